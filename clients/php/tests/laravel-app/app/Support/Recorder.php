<?php

namespace App\Support;

/**
 * What the test jobs did, with Redis's clock: one JSON object per event,
 * RPUSHed on `lt:log` (a plain connection: no prefix, no serializer).
 */
final class Recorder
{
    private static ?\Redis $redis = null;

    public static function redis(): \Redis
    {
        if (self::$redis === null) {
            self::$redis = new \Redis();
            self::$redis->connect(getenv('REDIS_HOST') ?: '127.0.0.1', (int) (getenv('REDIS_PORT') ?: 6379), 5.0);
        }
        return self::$redis;
    }

    /** Redis's clock in ms. */
    public static function nowMs(): int
    {
        [$s, $us] = self::redis()->time();
        return (int) $s * 1000 + intdiv((int) $us, 1000);
    }

    /** @param array<string, mixed> $event */
    public static function record(array $event): void
    {
        $event['redis_ms'] = self::nowMs();
        $event['pid'] = getmypid();
        self::redis()->rPush('lt:log', json_encode($event));
    }
}
