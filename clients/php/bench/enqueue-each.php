<?php

// Enqueues N jobs one Producer::enqueue call each (payloads payload-<n>,
// no options), as a web app enqueues one job per request: the PHP side of
// single-enqueue.sh and of the bench's client-enqueue phase; prints the loop's
// seconds. Usage: PUNCTUAL_REDIS_URL=redis://host:port [PUNCTUAL_PREFIX=punctual] php enqueue-each.php TOPIC N

declare(strict_types=1);

require __DIR__ . '/../tests/bootstrap.php';

$u = parse_url(getenv('PUNCTUAL_REDIS_URL') ?: 'redis://127.0.0.1:6379');
$redis = new Redis();
$redis->connect($u['host'] ?? '127.0.0.1', $u['port'] ?? 6379, 5.0);
$producer = new Punctual\Producer($redis, getenv('PUNCTUAL_PREFIX') ?: 'punctual');
$topic = $argv[1] ?? 'enqueue-each';
$n = (int) ($argv[2] ?? 10000);
$t0 = hrtime(true);
for ($i = 0; $i < $n; $i++) {
    $producer->enqueue($topic, sprintf('payload-%08d', $i));
}
// The loop's seconds, for the bench's client-enqueue phase.
printf("%.6f\n", (hrtime(true) - $t0) / 1e9);
