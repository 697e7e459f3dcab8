<?php

namespace App\Jobs;

use App\Support\Recorder;

class RecordMiddleware
{
    public function handle($job, $next)
    {
        Recorder::record(['what' => 'middleware', 'tag' => $job->tag, 'attempt' => $job->attempts()]);
        return $next($job);
    }
}
