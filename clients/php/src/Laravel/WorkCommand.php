<?php

declare(strict_types=1);

namespace Punctual\Laravel;

use Illuminate\Console\Command;
use Illuminate\Contracts\Cache\Repository as Cache;
use Illuminate\Contracts\Debug\ExceptionHandler;
use Illuminate\Queue\Events\JobFailed;
use Illuminate\Queue\WorkerOptions;
use Illuminate\Support\Facades\Facade;
use Punctual\Intake;
use Punctual\Worker;

/**
 * `php artisan punctual:work`: the resident program of `punctual serve`
 * (docs/RESIDENT.md). The app boots once; each job punctual sends runs
 * through Laravel's worker pipeline (job middleware, the JobProcessing,
 * JobProcessed and JobFailed events, failed(), the failed-jobs provider),
 * and its outcome goes back to punctual, which stays the runtime: claims,
 * leases, timeouts, retries with fencing, the dead set. An operator's
 * cancel of the running job is heard as under Worker::run (the same
 * Intake): the job's cancelled() (PunctualJob) turns true, and a job
 * cancelled before it started is not started. `--lookahead=N` (0 to 64,
 * default 16, 0: off) as Worker::run's $lookahead.
 *
 *     [topics.default]
 *     resident = ["php", "artisan", "punctual:work"]
 *     cwd = "/srv/app"
 */
class WorkCommand extends Command
{
    protected $signature = 'punctual:work
        {connection? : The queue connection of the jobs (default: the first connection with driver punctual)}
        {--lookahead=16 : How many jobs punctual may write ahead of the one that runs, 0 to 64 (0: off; docs/RESIDENT.md, "Look-ahead")}';

    protected $description = 'Run queued jobs for `punctual serve` (resident = ["php", "artisan", "punctual:work"])';

    public function handle(): int
    {
        $lookahead = (string) $this->option('lookahead');
        if (preg_match('/^[0-9]{1,3}$/', $lookahead) !== 1 || (int) $lookahead > 64) {
            throw new \InvalidArgumentException("punctual: --lookahead must be 0 to 64 (the jobs punctual may write ahead of the one that runs; 0 turns look-ahead off), not '$lookahead'");
        }
        $lookahead = (int) $lookahead;
        Worker::requireServe();
        $intake = Intake::open(fn (string $id, \Throwable $e): array => ['type' => 'dead', 'id' => $id, 'error' => 'not a job for Laravel: ' . $e->getMessage()]);
        $app = $this->laravel;
        $connection = $this->argument('connection') ?: $this->defaultConnection();

        $app['events']->listen(JobFailed::class, function (JobFailed $event) use ($app, $connection): void {
            if ($event->connectionName === $connection && $event->job instanceof PunctualJob && $app->bound('queue.failer')) {
                $app['queue.failer']->log($event->connectionName, $event->job->getQueue(), $event->job->getRawBody(), $event->exception);
            }
        });

        $worker = new ResidentWorker(
            $app['queue'],
            $app['events'],
            $app[ExceptionHandler::class],
            fn () => false,
            function () use ($app) {
                if (method_exists($app, 'forgetScopedInstances')) {
                    $app->forgetScopedInstances();
                }
                return Facade::clearResolvedInstances();
            },
        );
        if ($app->bound(Cache::class)) {
            $worker->setCache($app[Cache::class]);
        }
        $worker->setName('punctual');
        // maxTries 0: each job's own ($tries, else punctual's max attempts, see PunctualJob::maxTries).
        $options = new WorkerOptions('punctual', 0, 0, 0, 0, 0);

        $intake->ready($lookahead);
        while (($delivery = $intake->next()) !== null) {
            $job = PunctualJob::fromDelivery($app, $delivery, $connection);
            if (!is_array($job->payload())) {
                $intake->reply(['type' => 'dead', 'id' => $delivery->id, 'error' => 'the payload is not a Laravel queue payload (JSON with "job" and "data"): push it with Laravel\'s punctual connection']);
                continue;
            }
            if (method_exists($app, 'forgetScopedInstances')) {
                $app->forgetScopedInstances();
            }
            $error = null;
            try {
                $worker->process($connection, $job, $options);
            } catch (\Throwable $e) {
                $error = $e;
                $app[ExceptionHandler::class]->report($e);
            }
            $intake->reply($job->reply($error));
        }
        $intake->close();
        return 0;
    }

    private function defaultConnection(): string
    {
        $config = $this->laravel['config'];
        $default = (string) $config->get('queue.default');
        if ($config->get("queue.connections.$default.driver") === 'punctual') {
            return $default;
        }
        foreach ((array) $config->get('queue.connections', []) as $name => $c) {
            if (($c['driver'] ?? null) === 'punctual') {
                return (string) $name;
            }
        }
        return 'punctual';
    }
}
