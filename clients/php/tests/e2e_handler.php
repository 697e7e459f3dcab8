<?php

// The resident handler used by the tests (tests/run.php's fake driver and
// crates/punctual-cli/tests/clients.rs), the same as the Python one: what it
// does depends on the payload {"do": ok|print|retry|dead|raise|hang|slow|once|
// exit} (exit: the program exits on the first attempt, recorded on
// $E2E_KEY:crashed first), and every delivery is recorded with RPUSH on $E2E_KEY:seen (default e2e:TOPIC:seen).

declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use Punctual\Dead;
use Punctual\Job;
use Punctual\Retry;
use Punctual\Worker;

$redis = test_redis();
echo "e2e_handler: booting ", getmypid(), "\n";

Worker::run(function (Job $job) use ($redis): void {
    try {
        $spec = $job->json();
    } catch (JsonException) {
        $spec = [];
    }
    $spec = is_array($spec) ? $spec : [];
    $do = $spec['do'] ?? 'ok';
    [$sec, $usec] = $redis->time();
    $seen = json_encode([
        'id' => $job->id, 'topic' => $job->topic, 'attempt' => $job->attempt,
        'max_attempts' => $job->maxAttempts, 'due_ms' => $job->dueMs,
        'created_ms' => $job->createdMs, 'timeout_ms' => $job->timeoutMs,
        'now_ms' => (int) $sec * 1000 + intdiv((int) $usec, 1000), 'pid' => getmypid(),
        'payload_hex' => bin2hex($job->payload), 'do' => $do,
        'traceparent' => $job->traceparent, 'tracestate' => $job->tracestate,
    ]);
    $key = getenv('E2E_KEY') ?: 'e2e:' . $job->topic;
    if ($do === 'exit' && $job->attempt === 1) {
        $redis->rPush($key . ':crashed', $seen);
        exit(7);
    } elseif ($do === 'print') {
        echo '{"type":"done","id":"not-a-reply"}', "\n", "junk on stdout\n";
        fwrite(STDERR, "junk on stderr\n");
    } elseif ($do === 'hang' && $job->attempt === 1) {
        $redis->rPush($key . ':hung', $seen);
        sleep(3600);
    } elseif ($do === 'slow') {
        $redis->rPush($key . ':started', $seen);
        usleep(($spec['ms'] ?? 1000) * 1000);
    } elseif ($do === 'once') {
        $job->once($redis, 'count', 600, fn () => $redis->incr($key . ':once:' . $job->id));
        if ($job->attempt === 1) {
            $redis->rPush($key . ':seen', $seen);
            throw new Retry('after the step', 0);
        }
    }
    $redis->rPush($key . ':seen', $seen);
    match ($do) {
        'retry' => throw new Retry('asked to retry', $spec['delay_ms'] ?? null),
        'dead' => throw new Dead('asked to die'),
        'raise' => throw new DomainException('boom'),
        default => null,
    };
});
echo "e2e_handler: EOF, exiting ", getmypid(), "\n";
