<?php

namespace App\Jobs;

use App\Support\Recorder;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/**
 * The bench's job: nothing, or, with a due time (Redis ms), how late it
 * started by Redis's clock (RPUSH bench:late, negative: early).
 */
class Noop implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable;

    public function __construct(public int $dueMs = 0)
    {
    }

    public function handle(): void
    {
        if ($this->dueMs > 0) {
            Recorder::redis()->rPush('bench:late', (string) (Recorder::nowMs() - $this->dueMs));
        } else {
            Recorder::redis()->incr('bench:done');
        }
    }
}
