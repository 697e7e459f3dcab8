<?php

declare(strict_types=1);

namespace Punctual\Laravel;

use Illuminate\Container\Container;
use Illuminate\Contracts\Queue\Job as JobContract;
use Illuminate\Queue\Jobs\Job;

/**
 * One delivery of a punctual job to Laravel. Under `artisan punctual:work`
 * the outcome is sent to `punctual serve` after Laravel's pipeline ran
 * (reply()); under `queue:work punctual` (pop) it goes to Redis at once,
 * fenced by the claim's token:
 *
 * - delete() -> done (ack);
 * - release($delay) -> retry after $delay (seconds, a DateTimeInterface or
 *   a DateInterval; in ms, rounded up); the attempt counts;
 * - fail($e) -> dead, the exception as the last error (failed() and the
 *   JobFailed event as Laravel does);
 * - attempts() -> punctual's attempt counter (1 on the first delivery);
 * - cancelled() -> whether an operator cancelled it while it runs (under
 *   `artisan punctual:work`; docs/RESIDENT.md, "Cancel").
 */
class PunctualJob extends Job implements JobContract
{
    private ?int $releaseMs = null;
    private ?string $failure = null;
    private bool $failing = false;
    /** @var array<string, mixed>|null */
    private ?array $decoded = null;

    /**
     * @param array{0: string, 1: string}|null $lease the pop path's [topic or partition, token]
     * @param \Punctual\Job|null $delivery the resident path's job, as `artisan punctual:work` read it
     */
    public function __construct(
        Container $container,
        private readonly string $raw,
        private readonly string $id,
        private readonly int $attempt,
        private readonly int $maxAttempts,
        ?string $connectionName,
        string $queue,
        private readonly ?PunctualQueue $punctual = null,
        private readonly ?array $lease = null,
        private readonly ?\Punctual\Job $delivery = null,
    ) {
        $this->container = $container;
        $this->connectionName = $connectionName;
        $this->queue = $queue;
    }

    /** @param array<string, mixed> $msg a job message of docs/RESIDENT.md */
    public static function fromMessage(Container $container, array $msg, string $connectionName): self
    {
        return self::fromDelivery($container, \Punctual\Job::fromMessage($msg), $connectionName);
    }

    /** The Laravel job of a punctual job `artisan punctual:work` runs. */
    public static function fromDelivery(Container $container, \Punctual\Job $job, string $connectionName): self
    {
        return new self($container, $job->payload, $job->id, $job->attempt, $job->maxAttempts, $connectionName, $job->topic, delivery: $job);
    }

    /**
     * Whether an operator cancelled this job while it runs (`punctual
     * cancel`, the API, a producer's cancel; docs/RESIDENT.md, "Cancel"):
     * the job is already ended as cancelled in punctual, and what Laravel
     * does with this delivery from then on is not recorded there. Each call
     * reads the cancels waiting on fd 3 without blocking: cheap enough
     * between the steps of a long job, which may then return. Always false
     * under `queue:work punctual` (the pop path hears no cancels).
     */
    public function cancelled(): bool
    {
        return $this->delivery?->cancelled() ?? false;
    }

    /**
     * The punctual job behind this delivery under `artisan punctual:work`
     * (its due time, timeout, trace context...); null under `queue:work
     * punctual`.
     */
    public function punctual(): ?\Punctual\Job
    {
        return $this->delivery;
    }

    public function getJobId()
    {
        return $this->id;
    }

    public function getRawBody()
    {
        return $this->raw;
    }

    /**
     * The payload decoded, once per delivery (Laravel's pipeline asks for
     * it a dozen times per job).
     *
     * @return array<string, mixed>|null
     */
    public function payload()
    {
        if ($this->decoded === null) {
            $p = json_decode($this->raw, true);
            if (!is_array($p)) {
                return $p;
            }
            $this->decoded = $p;
        }
        return $this->decoded;
    }

    public function attempts()
    {
        return $this->attempt;
    }

    /**
     * The job's $tries; without one (and without retryUntil()), one less
     * than punctual's max attempts (at least 1). Punctual always has one
     * attempt more than Laravel's limit (with $tries = N the job was pushed
     * with N + 1): when the last of Laravel's tries ends without Laravel
     * failing the job (its process crashed, or punctual killed it at its
     * timeout, or it released itself), punctual delivers it once more and
     * Laravel's pipeline fails it at the start of that delivery (failed(),
     * the failed-jobs provider, JobFailed) instead of punctual moving it to
     * dead unseen.
     */
    public function maxTries()
    {
        $tries = parent::maxTries();
        if ($tries === null && $this->retryUntil() === null && $this->maxAttempts > 0) {
            return max(1, $this->maxAttempts - 1);
        }
        return $tries;
    }

    public function delete()
    {
        parent::delete();
        if ($this->lease !== null && !$this->failing) {
            $this->punctual?->ackLease($this->lease[0], $this->id, $this->lease[1]);
        }
    }

    /** @param \DateTimeInterface|\DateInterval|int|float|null $delay null: the job's backoff ladder */
    public function release($delay = 0)
    {
        parent::release($delay);
        $this->releaseMs = Time::delayMs($delay);
        if ($this->lease !== null) {
            $this->punctual?->failLease($this->lease[0], $this->id, $this->lease[1], $this->releaseError(), $this->releaseMs, false);
        }
    }

    public function fail($e = null)
    {
        $this->failure = $e === null
            ? 'failed: the job called fail()'
            : 'failed: ' . get_class($e) . ': ' . $e->getMessage();
        $this->failing = true;
        try {
            parent::fail($e);
        } finally {
            $this->failing = false;
            if ($this->lease !== null) {
                $this->punctual?->failLease($this->lease[0], $this->id, $this->lease[1], $this->failure, null, true);
            }
        }
    }

    private function releaseError(): string
    {
        return $this->releaseMs === null ? 'released' : "released for {$this->releaseMs} ms";
    }

    /**
     * The resident reply (docs/RESIDENT.md) for what Laravel did with this
     * delivery; $error: the exception its pipeline threw, if any.
     *
     * @return array<string, mixed>
     */
    public function reply(?\Throwable $error): array
    {
        if ($this->hasFailed()) {
            return ['type' => 'dead', 'id' => $this->id, 'error' => $this->failure ?? 'failed'];
        }
        if ($this->isReleased()) {
            $reply = ['type' => 'retry', 'id' => $this->id,
                'error' => $error !== null ? get_class($error) . ': ' . $error->getMessage() : $this->releaseError()];
            if ($this->releaseMs !== null) {
                $reply['delay_ms'] = $this->releaseMs;
            }
            return $reply;
        }
        if ($error !== null) {
            // Thrown past Laravel's own handling (not released, not failed): retried.
            return ['type' => 'retry', 'id' => $this->id, 'error' => get_class($error) . ': ' . $error->getMessage()];
        }
        return ['type' => 'done', 'id' => $this->id];
    }
}
