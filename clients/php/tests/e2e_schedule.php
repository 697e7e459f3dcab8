<?php

// Schedule operations through the PHP producer, for
// crates/punctual-cli/tests/clients.rs.
// Usage: php e2e_schedule.php TOPIC < ops, one JSON object per line:
// {"op": "add", "name", "spec": {cron, every_ms, tz, payload, ...}},
// {"op": "pause"|"resume"|"remove", "name"} or {"op": "list"}. Prints one
// JSON line per op: {"result"}. With PUNCTUAL_TEST_CLUSTER_URLS
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
$p = new Punctual\Producer($client);
$topic = $argv[1];
while (($line = fgets(STDIN)) !== false) {
    $op = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    $result = match ($op['op']) {
        'add' => $p->scheduleAdd($topic, $op['name'], $op['spec'] ?? []),
        'list' => $p->scheduleList($topic),
        'pause' => $p->schedulePause($topic, $op['name']),
        'resume' => $p->scheduleResume($topic, $op['name']),
        'remove' => $p->scheduleRemove($topic, $op['name']),
    };
    echo json_encode(['result' => $result], JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE), "\n";
}
