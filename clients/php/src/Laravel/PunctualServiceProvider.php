<?php

declare(strict_types=1);

namespace Punctual\Laravel;

use Illuminate\Queue\QueueManager;
use Illuminate\Support\ServiceProvider;

/**
 * Registers the `punctual` queue driver and `php artisan punctual:work`.
 * Composer's package discovery adds it (composer.json "extra.laravel");
 * without discovery, list it in config/app.php's providers.
 */
class PunctualServiceProvider extends ServiceProvider
{
    public function register()
    {
    }

    public function boot()
    {
        $add = function (QueueManager $manager): void {
            $manager->addConnector('punctual', fn () => new PunctualConnector($this->app['redis']));
        };
        if ($this->app->resolved('queue')) {
            $add($this->app['queue']);
        } else {
            $this->app->afterResolving('queue', $add);
        }
        if ($this->app->runningInConsole()) {
            $this->commands([WorkCommand::class]);
        }
    }
}
