<?php

declare(strict_types=1);

namespace Punctual\Laravel;

use Illuminate\Contracts\Queue\ClearableQueue;
use Illuminate\Contracts\Queue\Queue as QueueContract;
use Illuminate\Queue\Queue;
use Punctual\Producer;
use Punctual\Validate;

/**
 * Laravel's queue contract on punctual: a Laravel queue is a punctual topic
 * of the same name. Payloads keep Laravel's shape (so CallQueuedHandler,
 * encryption, unique jobs and batches work as with any driver); the job's
 * punctual id is the payload's uuid. From the payload:
 *
 * - `$tries` (maxTries) -> max attempts = tries + 1: Laravel fails the job
 *   (calling failed()) on its tries-th exception, or at the start of the
 *   attempt after `tries` when the earlier ones ended another way (a
 *   release, a timeout, a crash), as its own worker does; 0 -> 10,000.
 *   No `$tries`: the topic's max attempts, of which Laravel uses one less
 *   (PunctualJob::maxTries), for the same reason.
 * - `$backoff` (seconds, a list) -> the job's backoff ladder in ms.
 * - `$timeout` (seconds) -> the job's handler timeout, enforced by
 *   `punctual serve`.
 * - `retryUntil()` -> max attempts 10,000 and no expiry of punctual's: a
 *   delivery past retryUntil() is failed by Laravel's own worker pipeline
 *   (failed(), the failed-jobs provider, JobFailed), which then moves it to
 *   punctual's dead set. Were it punctual's expiry, punctual would move a
 *   job delivered late to dead without Laravel ever seeing it.
 * - delays in ms, rounded up (`->delay(now()->addMilliseconds(1500))`).
 */
class PunctualQueue extends Queue implements QueueContract, ClearableQueue
{
    /** Laravel's $tries = 0 (unlimited) and retryUntil(). */
    private const UNLIMITED = Validate::MAX_ATTEMPTS;

    public function __construct(
        private readonly Producer $producer,
        private readonly string $default = 'default',
        private readonly int $leaseSeconds = 60,
        bool $dispatchAfterCommit = false,
    ) {
        $this->dispatchAfterCommit = $dispatchAfterCommit;
    }

    public function producer(): Producer
    {
        return $this->producer;
    }

    /** The topic of a queue name (the connection's 'queue' for null). */
    public function getQueue(?string $queue): string
    {
        return $queue === null || $queue === '' ? $this->default : $queue;
    }

    public function push($job, $data = '', $queue = null)
    {
        $queue = $this->getQueue($queue);
        return $this->enqueueUsing(
            $job,
            $this->createPayload($job, $queue, $data),
            $queue,
            null,
            fn ($payload, $queue) => $this->pushRaw($payload, $queue),
        );
    }

    /** @param array<string, mixed> $options 'delay': as later()'s */
    public function pushRaw($payload, $queue = null, array $options = [])
    {
        return $this->enqueueRaw((string) $payload, $this->getQueue($queue), Time::delayMs($options['delay'] ?? null));
    }

    public function later($delay, $job, $data = '', $queue = null)
    {
        $queue = $this->getQueue($queue);
        return $this->enqueueUsing(
            $job,
            $this->createPayload($job, $queue, $data),
            $queue,
            $delay,
            fn ($payload, $queue, $delay) => $this->enqueueRaw((string) $payload, $queue, Time::delayMs($delay)),
        );
    }

    /**
     * The jobs in one enqueue script call per 1,000 (Laravel's base class
     * pushes one at a time). Returns the ids.
     *
     * @return list<string>
     */
    public function bulk($jobs, $data = '', $queue = null)
    {
        $queue = $this->getQueue($queue);
        $specs = [];
        foreach ((array) $jobs as $job) {
            $specs[] = $this->spec($this->createPayload($job, $queue, $data), null);
        }
        return array_map(fn (array $r) => $r['id'], $this->producer->enqueueBatch($queue, $specs));
    }

    private function enqueueRaw(string $payload, string $queue, ?int $delayMs): string
    {
        return $this->producer->enqueueBatch($queue, [$this->spec($payload, $delayMs)])[0]['id'];
    }

    /**
     * The punctual job of a Laravel payload: its uuid as the id, and its
     * tries, backoff, timeout and retryUntil as the job's options.
     *
     * @return array<string, mixed>
     */
    public function spec(string $payload, ?int $delayMs): array
    {
        $p = json_decode($payload, true);
        $spec = ['payload' => $payload];
        if ($delayMs !== null && $delayMs > 0) {
            $spec['delay_ms'] = $delayMs;
        }
        if (!is_array($p)) {
            return $spec;
        }
        if (isset($p['uuid']) && is_string($p['uuid']) && $p['uuid'] !== '') {
            $spec['id'] = $p['uuid'];
        }
        $tries = isset($p['maxTries']) && is_numeric($p['maxTries']) ? (int) $p['maxTries'] : null;
        $until = isset($p['retryUntil']) && is_numeric($p['retryUntil']) ? (int) $p['retryUntil'] : null;
        if ($tries !== null && $tries > 0 && $until === null) {
            $spec['max_attempts'] = min(self::UNLIMITED, $tries + 1);
        } elseif ($tries === 0 || $until !== null) {
            $spec['max_attempts'] = self::UNLIMITED;
        }
        $backoff = $p['backoff'] ?? null;
        if ($backoff !== null && $backoff !== '') {
            $steps = array_map(fn ($s) => (int) ceil(((float) trim((string) $s)) * 1000), explode(',', (string) $backoff));
            $spec['backoff_ms'] = array_map(fn (int $ms) => max(0, $ms), $steps);
        }
        if (isset($p['timeout']) && is_numeric($p['timeout']) && (float) $p['timeout'] > 0) {
            $spec['timeout_ms'] = (int) ceil((float) $p['timeout'] * 1000);
        }
        return $spec;
    }

    // ---- sizes ------------------------------------------------------------

    /** Waiting (pool, ready) and running jobs; not the dead ones. */
    public function size($queue = null)
    {
        $s = $this->sizes($this->getQueue($queue));
        return $s['pool'] + $s['ready'] + $s['running'];
    }

    /** Due jobs waiting for a worker (Laravel 10+'s pendingSize). */
    public function pendingSize($queue = null)
    {
        return $this->sizes($this->getQueue($queue))['ready'];
    }

    /** Jobs waiting for their due time, retries included (Laravel 10+'s delayedSize). */
    public function delayedSize($queue = null)
    {
        return $this->sizes($this->getQueue($queue))['pool'];
    }

    /** Leased jobs (Laravel 10+'s reservedSize). */
    public function reservedSize($queue = null)
    {
        return $this->sizes($this->getQueue($queue))['running'];
    }

    /** Jobs in punctual's dead set (not in Laravel's contract). */
    public function deadSize($queue = null): int
    {
        return $this->sizes($this->getQueue($queue))['dead'];
    }

    /**
     * When the due job that has waited longest was created, epoch seconds,
     * or null when none is due (Laravel 11+'s creationTimeOfOldestPendingJob).
     */
    public function creationTimeOfOldestPendingJob($queue = null)
    {
        $topic = $this->getQueue($queue);
        $oldest = null;
        foreach ($this->physical($topic) as $t) {
            $created = $this->producer->bare(function () use ($t) {
                $r = $this->producer->redis();
                $ids = $r->zRange($this->key($t, 'ready'), 0, 0);
                if (!is_array($ids) || $ids === []) {
                    return null;
                }
                $rec = $r->hGet($this->key($t, 'jobs'), $ids[0]);
                $h = is_string($rec) ? self::header($rec) : null;
                return $h === null ? null : $h['created_ms'];
            });
            if ($created !== null && ($oldest === null || $created < $oldest)) {
                $oldest = $created;
            }
        }
        return $oldest === null ? null : intdiv($oldest, 1000);
    }

    /** @return array{pool: int, ready: int, running: int, dead: int} */
    private function sizes(string $topic): array
    {
        $sum = ['pool' => 0, 'ready' => 0, 'running' => 0, 'dead' => 0];
        foreach ($this->physical($topic) as $t) {
            $this->producer->bare(function () use ($t, &$sum) {
                $r = $this->producer->redis();
                $sum['pool'] += (int) $r->zCard($this->key($t, 'pool')) + max(0, (int) $r->hGet($this->key($t, 'meta'), 'cold_n'));
                $sum['ready'] += (int) $r->zCard($this->key($t, 'ready'));
                $sum['running'] += (int) $r->zCard($this->key($t, 'running'));
                $sum['dead'] += (int) $r->zCard($this->key($t, 'dead'));
            });
        }
        return $sum;
    }

    /** @return list<string> the topic, or its partitions `T#i` */
    private function physical(string $topic): array
    {
        $k = $this->producer->partitions($topic);
        return $k <= 1 ? [$topic] : array_map(fn (int $i) => "$topic#$i", range(0, $k - 1));
    }

    private function key(string $physical, string $name): string
    {
        return $this->producer->prefix() . ':{' . $physical . '}:' . $name;
    }

    /**
     * Cancels every job of the queue that is not dead (waiting, cold,
     * running: a running job's ack then finds nothing), through punctual's
     * cancel script, so its counters stay right. Returns how many.
     */
    public function clear($queue)
    {
        $topic = $this->getQueue($queue);
        $n = 0;
        foreach ($this->physical($topic) as $t) {
            while (true) {
                $ids = $this->producer->bare(function () use ($t) {
                    $r = $this->producer->redis();
                    $ids = [];
                    foreach (['ready', 'pool', 'running'] as $set) {
                        array_push($ids, ...($r->zRange($this->key($t, $set), 0, 999) ?: []));
                    }
                    foreach ($r->zRange($this->key($t, 'cold'), 0, 9) ?: [] as $start) {
                        array_push($ids, ...($r->lRange($this->key($t, 'c:' . $start), 0, 999) ?: []));
                    }
                    return $ids;
                });
                if ($ids === []) {
                    break;
                }
                $cancelled = 0;
                foreach (array_unique($ids) as $id) {
                    if ($this->producer->script('cancel', $t, [(string) $id]) !== null) {
                        $cancelled++;
                    }
                }
                $n += $cancelled;
                if ($cancelled === 0) {
                    break; // nothing we can cancel (ids whose records vanished): `punctual check` reports them
                }
            }
        }
        return $n;
    }

    // ---- pop: `php artisan queue:work punctual` -------------------------

    /**
     * Claims one due job under a lease of the connection's 'lease' seconds
     * (like Laravel's retry_after: set it above your longest job; the lease
     * is not extended while the job runs). Needs a `punctual serve`
     * scheduler on the topic to reclaim expired leases and promote
     * far-future jobs; due ones are claimed straight from the pool.
     */
    public function pop($queue = null)
    {
        $topic = $this->getQueue($queue);
        $parts = $this->physical($topic);
        $start = count($parts) > 1 ? random_int(0, count($parts) - 1) : 0;
        for ($n = 0; $n < count($parts); $n++) {
            $t = $parts[($start + $n) % count($parts)];
            $r = $this->producer->script('claim', $t, [1, max(1, $this->leaseSeconds) * 1000]);
            if (!is_array($r) || count($r) < 7 || (int) $r[4] < 1) {
                continue;
            }
            $m = (int) $r[4];
            $id = (string) $r[5];
            $h = self::header((string) $r[6]);
            if ($h === null) {
                // Unreadable record: hand it back to punctual's fail, which parks it in dead.
                $this->producer->script('fail', $t, [$id, (string) $r[3], 'unreadable record', '', '1']);
                continue;
            }
            $attempt = 1;
            for ($i = 5 + 2 * $m; $i + 1 < count($r) - 1; $i += 2) {
                if ((int) $r[$i] === 1) {
                    $attempt = (int) $r[$i + 1];
                }
            }
            return new PunctualJob(
                $this->container,
                $h['payload'],
                $id,
                $attempt,
                $h['max'] ?? (int) $r[1],
                $this->getConnectionName(),
                $topic,
                $this,
                [$t, (string) $r[3]],
            );
        }
        return null;
    }

    /**
     * A record's header and payload (docs/PROTOCOL.md "Records"), or null.
     *
     * @return array{max: ?int, created_ms: int, payload: string}|null
     */
    public static function header(string $rec): ?array
    {
        if (preg_match('/^([^:]*):([0-9a-z]+):([0-9a-z]+):([0-9,]*):([0-9]+):/', $rec, $m) !== 1) {
            return null;
        }
        $max = preg_match('/^[0-9]+/', $m[1], $d) === 1 ? (int) $d[0] : null;
        $due = intval($m[2], 36);
        return [
            'max' => $max,
            'created_ms' => $due - intval($m[3], 36),
            'payload' => substr($rec, strlen($m[0]) + (int) $m[5]),
        ];
    }

    /** @internal the pop path's ack */
    public function ackLease(string $physical, string $id, string $token): void
    {
        $this->producer->script('ack', $physical, [$id, $token]);
    }

    /** @internal the pop path's retry (delay null: the job's backoff ladder) or dead */
    public function failLease(string $physical, string $id, string $token, string $error, ?int $delayMs, bool $dead): void
    {
        $this->producer->script('fail', $physical, [$id, $token, $error, $delayMs === null ? '' : (string) $delayMs, $dead ? '1' : '0']);
    }
}
