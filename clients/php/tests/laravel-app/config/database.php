<?php

return [
    'default' => 'sqlite',
    'connections' => [],
    'redis' => [
        'client' => 'phpredis',
        // Laravel's defaults: every key of the app's connections gets this prefix.
        'options' => ['prefix' => 'laravel_database_'],
        // The app's own connection, with a serializer as well: the punctual
        // driver uses it as it is.
        'default' => [
            'host' => env('REDIS_HOST', '127.0.0.1'),
            'port' => env('REDIS_PORT', 6379),
            'database' => 0,
            'serializer' => defined('Redis::SERIALIZER_PHP') ? Redis::SERIALIZER_PHP : 1,
        ],
        // For Laravel's own redis queue driver (the bench): no serializer.
        'queue' => [
            'host' => env('REDIS_HOST', '127.0.0.1'),
            'port' => env('REDIS_PORT', 6379),
            'database' => 0,
        ],
    ],
];
