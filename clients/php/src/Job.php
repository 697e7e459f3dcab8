<?php

declare(strict_types=1);

namespace Punctual;

/** One delivery of a job to a resident handler (docs/RESIDENT.md). */
final class Job
{
    private bool $cancelled = false;

    /** Set by the loop that runs it (Intake): reads the cancels waiting on fd 3. */
    private ?\Closure $poll = null;

    /**
     * @param string $payload exactly the bytes the producer enqueued
     */
    public function __construct(
        public readonly string $id,
        public readonly string $topic,
        public readonly int $attempt,
        public readonly int $maxAttempts,
        public readonly int $dueMs,
        public readonly int $createdMs,
        public readonly int $timeoutMs,
        public readonly string $payload,
        /** The producer's W3C trace context (the parent span when serve exports spans). */
        public readonly ?string $traceparent = null,
        public readonly ?string $tracestate = null,
        /**
         * On every job to a program that declared a look-ahead (docs/RESIDENT.md,
         * "Look-ahead"): the host's CLOCK_MONOTONIC in microseconds
         * (intdiv(hrtime(true), 1000)) past which the loop does not start it
         * (it replies skip); null otherwise.
         */
        public readonly ?int $startByUs = null,
    ) {
    }

    /** @param array<string, mixed> $msg a "job" message of fd 3 */
    public static function fromMessage(array $msg): self
    {
        if (isset($msg['payload_b64'])) {
            $payload = base64_decode((string) $msg['payload_b64'], true);
            if ($payload === false) {
                throw new \UnexpectedValueException('punctual: payload_b64 is not base64');
            }
        } else {
            $payload = (string) ($msg['payload'] ?? '');
        }
        return new self(
            (string) $msg['id'],
            (string) ($msg['topic'] ?? ''),
            (int) ($msg['attempt'] ?? 1),
            (int) ($msg['max_attempts'] ?? 0),
            (int) ($msg['due_ms'] ?? 0),
            (int) ($msg['created_ms'] ?? 0),
            (int) ($msg['timeout_ms'] ?? 0),
            $payload,
            isset($msg['traceparent']) ? (string) $msg['traceparent'] : null,
            isset($msg['tracestate']) ? (string) $msg['tracestate'] : null,
            isset($msg['start_by_us']) ? (int) $msg['start_by_us'] : null,
        );
    }

    /**
     * Whether an operator cancelled this job while it runs (docs/RESIDENT.md,
     * "Cancel"): the job is already ended as cancelled and whatever this run
     * replies is not recorded, so a handler that sees it may stop (return,
     * or throw) and the program keeps its place. Under Worker::run (and
     * `artisan punctual:work`), each call reads the cancels waiting on fd 3
     * without blocking (job lines read meanwhile are kept for later): cheap
     * enough to call between the steps of a long job. False for a job
     * neither runs.
     */
    public function cancelled(): bool
    {
        if (!$this->cancelled && $this->poll !== null) {
            ($this->poll)();
        }
        return $this->cancelled;
    }

    /**
     * The loop's hooks (Intake): what cancelled() calls to look at fd 3,
     * and the mark it sets when a cancel names this job.
     *
     * @internal
     */
    public function watchedBy(\Closure $poll): void
    {
        $this->poll = $poll;
    }

    /** @internal */
    public function markCancelled(): void
    {
        $this->cancelled = true;
    }

    /**
     * Whether a cancel named it, as far as read: cancelled() without its
     * look at fd 3, for the loop that has just looked.
     *
     * @internal
     */
    public function cancelSeen(): bool
    {
        return $this->cancelled;
    }

    /** The payload decoded as JSON (objects as associative arrays). */
    public function json(): mixed
    {
        return json_decode($this->payload, true, 512, JSON_THROW_ON_ERROR);
    }

    /**
     * Runs $fn unless step $step of this job already succeeded within $ttl
     * seconds; returns whether it ran. See Idempotency::once for the caveat.
     */
    public function once(\Redis|\RedisCluster $redis, string $step, int $ttl, callable $fn, string $prefix = 'punctual'): bool
    {
        return Idempotency::once($redis, $prefix, $this->topic, $this->id, $step, $ttl, $fn);
    }
}
