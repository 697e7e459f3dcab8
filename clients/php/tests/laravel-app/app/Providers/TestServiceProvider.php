<?php

namespace App\Providers;

use App\Support\Recorder;
use Illuminate\Queue\Events\JobFailed;
use Illuminate\Queue\Events\JobProcessed;
use Illuminate\Queue\Events\JobProcessing;
use Illuminate\Queue\Failed\FailedJobProviderInterface;
use Illuminate\Support\Facades\Event;
use Illuminate\Support\ServiceProvider;

/** Records the queue events and what reaches the failed-jobs provider. */
class TestServiceProvider extends ServiceProvider
{
    public function register()
    {
        $this->app->extend('queue.failer', fn () => new RecordingFailedJobProvider());
    }

    public function boot()
    {
        if (getenv('LT_RECORD_EVENTS') !== '1') {
            return;
        }
        foreach ([JobProcessing::class => 'JobProcessing', JobProcessed::class => 'JobProcessed', JobFailed::class => 'JobFailed'] as $class => $name) {
            Event::listen($class, function ($event) use ($name) {
                $cmd = unserialize($event->job->payload()['data']['command'] ?? 'N;', ['allowed_classes' => true]);
                Recorder::record(['what' => 'event', 'event' => $name, 'tag' => $cmd->tag ?? null,
                    'connection' => $event->connectionName, 'id' => $event->job->getJobId()]);
            });
        }
    }
}

class RecordingFailedJobProvider implements FailedJobProviderInterface
{
    public function log($connection, $queue, $payload, $exception)
    {
        $cmd = unserialize(json_decode($payload, true)['data']['command'] ?? 'N;', ['allowed_classes' => true]);
        Recorder::record(['what' => 'failer', 'tag' => $cmd->tag ?? null, 'connection' => $connection, 'queue' => $queue,
            'error' => get_class($exception) . ': ' . $exception->getMessage()]);
        return 1;
    }

    public function all()
    {
        return [];
    }

    public function find($id)
    {
        return null;
    }

    public function forget($id)
    {
        return false;
    }

    public function flush($hours = null)
    {
    }
}
