<?php

namespace App\Jobs;

use App\Support\Recorder;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/**
 * The bench's job (clients/php/bench/laravel-vs-punctual.sh): with a due
 * time (Redis ms), how late it started by Redis's clock (RPUSH bench:late,
 * negative: early); without, it counts itself done (bench:done) and notes
 * Redis's clock at the first and the latest (bench:first, bench:last), in
 * one script call: the same one round trip for either driver.
 */
class Noop implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable;

    private const DONE = <<<'LUA'
        local n = redis.call('INCR', KEYS[1])
        local t = redis.call('TIME')
        local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        if n == 1 then redis.call('SET', KEYS[2], ms) end
        redis.call('SET', KEYS[3], ms)
        return n
        LUA;

    public function __construct(public int $dueMs = 0)
    {
    }

    public function handle(): void
    {
        if ($this->dueMs > 0) {
            Recorder::redis()->rPush('bench:late', (string) (Recorder::nowMs() - $this->dueMs));
        } else {
            Recorder::redis()->eval(self::DONE, ['bench:done', 'bench:first', 'bench:last'], 3);
        }
    }
}
