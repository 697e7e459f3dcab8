<?php

declare(strict_types=1);

namespace Punctual\Laravel;

use Illuminate\Contracts\Redis\Factory as RedisFactory;
use Illuminate\Queue\Connectors\ConnectorInterface;
use Punctual\Producer;

/**
 * Makes a PunctualQueue from a `config/queue.php` connection with
 * 'driver' => 'punctual':
 *
 *     'punctual' => [
 *         'driver' => 'punctual',
 *         'connection' => 'default', // the app's Redis connection (config/database.php), phpredis
 *         'queue' => 'default',      // the topic of a job pushed without a queue name
 *         'prefix' => 'punctual',    // punctual's key prefix (as `prefix` in punctual.toml)
 *         'lease' => 60,             // queue:work punctual (pop): the lease, in seconds, of a job without $timeout
 *         'after_commit' => false,
 *     ],
 */
final class PunctualConnector implements ConnectorInterface
{
    public function __construct(private readonly RedisFactory $redis)
    {
    }

    /** @param array<string, mixed> $config */
    public function connect(array $config)
    {
        $name = $config['connection'] ?? 'default';
        $client = $this->redis->connection($name)->client();
        if (!($client instanceof \Redis) && !($client instanceof \RedisCluster)) {
            throw new \InvalidArgumentException(sprintf(
                'punctual: the Redis connection "%s" is a %s client: the punctual driver needs phpredis (REDIS_CLIENT=phpredis, the php-redis extension)',
                $name,
                get_debug_type($client),
            ));
        }
        return new PunctualQueue(
            new Producer($client, (string) ($config['prefix'] ?? Producer::DEFAULT_PREFIX), (int) ($config['max_payload'] ?? Producer::DEFAULT_MAX_PAYLOAD)),
            (string) ($config['queue'] ?? 'default'),
            (int) ($config['lease'] ?? 60),
            (bool) ($config['after_commit'] ?? false),
        );
    }
}
