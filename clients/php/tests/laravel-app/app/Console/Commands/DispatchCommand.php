<?php

namespace App\Console\Commands;

use App\Jobs\Noop;
use App\Jobs\Probe;
use App\Support\Recorder;
use Illuminate\Console\Command;
use Illuminate\Support\Facades\Queue;

/**
 * test:dispatch TAG [DO]: dispatches a Probe job as an app would; prints
 * {"t0_ms": Redis's clock read before the dispatch}. --id: the payload's
 * uuid (the punctual id), through Laravel's createPayloadUsing hook.
 * test:dispatch --noop=N [--spread-ms=MS]: N Noop jobs in bulk, or with
 * --spread-ms each delayed by a random 0..MS ms (due time recorded).
 */
class DispatchCommand extends Command
{
    protected $signature = 'test:dispatch {tag?} {do=ok} {--delay-ms=} {--id=} {--tries=} {--queue=} {--connection=}
        {--backoff=} {--timeout=} {--retry-until-s=}
        {--noop=0} {--spread-ms=0}';

    protected $description = 'Dispatch test jobs (punctual connector tests and bench)';

    public function handle(): int
    {
        $connection = $this->option('connection') ?: config('queue.default');
        $queue = $this->option('queue') ?: null;
        $n = (int) $this->option('noop');
        if ($n > 0) {
            return $this->noop($n, $connection, $queue);
        }
        $t0 = Recorder::nowMs();
        $tries = $this->option('tries') === null ? null : (int) $this->option('tries');
        $job = new Probe((string) $this->argument('tag'), (string) $this->argument('do'), $tries);
        if ($this->option('backoff') !== null) {
            $job->backoff = array_map('intval', explode(',', $this->option('backoff')));
        }
        if ($this->option('timeout') !== null) {
            $job->timeout = (int) $this->option('timeout');
        }
        if ($this->option('retry-until-s') !== null) {
            $job->retryUntil = now()->addSeconds((int) $this->option('retry-until-s'));
        }
        if ($this->option('id') !== null) {
            $id = (string) $this->option('id');
            \Illuminate\Queue\Queue::createPayloadUsing(fn () => ['uuid' => $id]);
        }
        $pending = dispatch($job)->onConnection($connection);
        if ($queue !== null) {
            $pending->onQueue($queue);
        }
        if ($this->option('delay-ms') !== null) {
            $pending->delay(now()->addMilliseconds((int) $this->option('delay-ms')));
        }
        unset($pending); // PendingDispatch dispatches on destruction
        $this->line(json_encode(['t0_ms' => $t0]));
        return 0;
    }

    private function noop(int $n, string $connection, ?string $queue): int
    {
        $spread = (int) $this->option('spread-ms');
        $q = Queue::connection($connection);
        if ($spread <= 0) {
            for ($i = 0; $i < $n; $i += 1000) {
                $q->bulk(array_map(fn () => new Noop(), range(1, min(1000, $n - $i))), '', $queue);
            }
            return 0;
        }
        for ($i = 0; $i < $n; $i++) {
            $delay = random_int(0, $spread);
            $due = Recorder::nowMs() + $delay;
            $q->later(now()->addMilliseconds($delay), new Noop($due), '', $queue);
        }
        return 0;
    }
}
