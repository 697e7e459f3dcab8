<?php

declare(strict_types=1);

namespace Punctual\Laravel;

use Illuminate\Queue\Worker;
use Illuminate\Queue\WorkerOptions;

/**
 * Laravel's worker pipeline (Worker::process: the JobProcessing,
 * JobProcessed, JobExceptionOccurred and JobFailed events, max tries and
 * max exceptions, failed()) for jobs punctual hands over. The one change: a
 * job that threw is released with no delay of its own, so punctual's
 * backoff ladder for it applies (the job's `$backoff`, sent with it, else
 * the topic's `backoff`).
 *
 * @internal
 */
class ResidentWorker extends Worker
{
    protected function calculateBackoff($job, WorkerOptions $options)
    {
        return null;
    }
}
