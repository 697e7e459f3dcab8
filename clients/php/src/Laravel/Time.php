<?php

declare(strict_types=1);

namespace Punctual\Laravel;

/**
 * Laravel's delays (seconds as int or float, a DateTimeInterface, a
 * DateInterval) in whole milliseconds, rounded up: Laravel's own drivers
 * round `later()` to whole seconds, which starts jobs up to a second early.
 *
 * @internal
 */
final class Time
{
    /** The delay in ms from now (never negative); null for null. */
    public static function delayMs(mixed $delay): ?int
    {
        if ($delay === null) {
            return null;
        }
        if ($delay instanceof \DateInterval) {
            $now = new \DateTimeImmutable();
            $delay = $now->add($delay);
        }
        if ($delay instanceof \DateTimeInterface) {
            $ms = ((float) $delay->format('U.u') - microtime(true)) * 1000.0;
        } else {
            $ms = (float) $delay * 1000.0;
        }
        return max(0, (int) ceil($ms));
    }
}
