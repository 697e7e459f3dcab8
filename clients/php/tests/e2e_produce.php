<?php

// Enqueues jobs through the PHP producer for the end-to-end tests.
// Usage: php e2e_produce.php TOPIC < jobs, one JSON object per line
// ({"payload"|"payload_hex", "id", "delay_ms", "max_attempts", or any other
// job field: at_ms, expire_ms, timeout_ms, group}); prints one
// JSON line per job: {"id", "status"}. With PUNCTUAL_TEST_CLUSTER_URLS
// (comma-separated), it talks to a Redis Cluster.

declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

$seeds = getenv('PUNCTUAL_TEST_CLUSTER_URLS');
if ($seeds) { // a Redis Cluster
    $nodes = array_map(fn ($u) => parse_url($u, PHP_URL_HOST) . ':' . parse_url($u, PHP_URL_PORT), explode(',', $seeds));
    $client = new RedisCluster(null, $nodes, 5.0, 5.0);
} else {
    $client = test_redis();
}
$producer = new Punctual\Producer($client);
$jobs = [];
while (($line = fgets(STDIN)) !== false) {
    $spec = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    if (isset($spec['payload_hex'])) {
        $spec['payload'] = hex2bin($spec['payload_hex']);
        unset($spec['payload_hex']);
    }
    $jobs[] = $spec;
}
if (count($jobs) === 1) {
    $payload = $jobs[0]['payload'];
    unset($jobs[0]['payload']);
    $out = [$producer->enqueue($argv[1], $payload, $jobs[0])];
} else {
    $out = $producer->enqueueBatch($argv[1], $jobs);
}
foreach ($out as $e) {
    echo json_encode($e), "\n";
}
