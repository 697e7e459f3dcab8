<?php

return [
    'name' => 'punctual-laravel-test',
    'env' => env('APP_ENV', 'testing'),
    'debug' => true,
    'url' => 'http://localhost',
    'timezone' => 'UTC',
    'locale' => 'en',
    'fallback_locale' => 'en',
    // A fixed test key (the ShouldBeEncrypted job needs one).
    'key' => 'base64:' . base64_encode(str_repeat('punctual', 4)),
    'cipher' => 'AES-256-CBC',
    'providers' => [
        Illuminate\Bus\BusServiceProvider::class,
        Illuminate\Cache\CacheServiceProvider::class,
        Illuminate\Foundation\Providers\ConsoleSupportServiceProvider::class,
        Illuminate\Database\DatabaseServiceProvider::class,
        Illuminate\Encryption\EncryptionServiceProvider::class,
        Illuminate\Filesystem\FilesystemServiceProvider::class,
        Illuminate\Foundation\Providers\FoundationServiceProvider::class,
        Illuminate\Queue\QueueServiceProvider::class,
        Illuminate\Redis\RedisServiceProvider::class,
        // What `composer require punctual/punctual` adds by package discovery:
        Punctual\Laravel\PunctualServiceProvider::class,
        App\Providers\TestServiceProvider::class,
    ],
    'aliases' => [],
];
