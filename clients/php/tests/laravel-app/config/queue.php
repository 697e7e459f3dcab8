<?php

return [
    'default' => env('QUEUE_CONNECTION', 'punctual'),
    'connections' => [
        'punctual' => [
            'driver' => 'punctual',
            'connection' => 'default',
            'queue' => env('PUNCTUAL_QUEUE', 'default'),
            'prefix' => env('PUNCTUAL_PREFIX', 'punctual'),
            'lease' => 60,
        ],
        'redis' => [
            'driver' => 'redis',
            'connection' => 'queue',
            'queue' => env('REDIS_QUEUE', 'default'),
            'retry_after' => 90,
            'block_for' => null,
        ],
        'sync' => ['driver' => 'sync'],
    ],
    // The test app binds its own failed-jobs provider (TestServiceProvider).
    'failed' => ['driver' => 'null'],
];
