<?php

declare(strict_types=1);

namespace Punctual;

/** One delivery of a job to a resident handler (docs/RESIDENT.md). */
final class Job
{
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
        );
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
