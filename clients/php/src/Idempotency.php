<?php

declare(strict_types=1);

namespace Punctual;

/**
 * Side effects of a job that must not repeat when the job is retried: charge
 * the card once, even if a later step fails and the job runs again.
 *
 * The marker is `SET prefix:once:TOPIC:ID:STEP 1 NX EX ttl`, written after
 * the step returns. This is at least once, not exactly once: the side effect
 * and the marker are not atomic, so if the process dies between them, or two
 * deliveries of the job run at the same time (after a lost lease), the step
 * runs again. Where the other side supports it, also pass it an idempotency
 * key (e.g. "$id:$step").
 */
final class Idempotency
{
    public static function key(string $prefix, string $topic, string $id, string $step): string
    {
        return $prefix . ':once:' . $topic . ':' . $id . ':' . $step;
    }

    /** Runs $fn unless the step's marker exists; returns whether it ran. */
    public static function once(\Redis|\RedisCluster $redis, string $prefix, string $topic, string $id, string $step, int $ttl, callable $fn): bool
    {
        $key = self::key($prefix, $topic, $id, $step);
        if ($redis->exists($key)) {
            return false;
        }
        $fn();
        $redis->set($key, '1', ['nx', 'ex' => $ttl]);
        return true;
    }
}
