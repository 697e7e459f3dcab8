<?php

// The PHP client's tests, without dependencies: php tests/run.php
// Needs PUNCTUAL_TEST_REDIS_URL (a scratch Redis: the Rust test
// crates/punctual-cli/tests/clients.rs starts one) and, for the checks
// against the Rust library, PUNCTUAL_BIN (the punctual binary).

declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use Punctual\InvalidInput;
use Punctual\Job;
use Punctual\Producer;

error_reporting(E_ALL);
set_error_handler(static function (int $no, string $msg, string $file, int $line): bool {
    throw new ErrorException($msg, 0, $no, $file, $line);
});

final class Failed extends Exception
{
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        throw new Failed($what);
    }
}

function same(mixed $want, mixed $have, string $what = ''): void
{
    if ($want !== $have) {
        throw new Failed(sprintf("%s\n  want: %s\n  have: %s", $what, var_export($want, true), var_export($have, true)));
    }
}

function refused(callable $fn, string $message): void
{
    try {
        $fn();
    } catch (InvalidInput $e) {
        same($message, $e->getMessage(), 'message');
        return;
    }
    throw new Failed("not refused: $message");
}

function fresh_prefix(): string
{
    return 'phptest-' . bin2hex(random_bytes(5));
}

/** The punctual binary on the same Redis and prefix, --json; null without PUNCTUAL_BIN. */
function cli(string $prefix, string ...$args): mixed
{
    $bin = getenv('PUNCTUAL_BIN');
    if (!$bin) {
        return null;
    }
    $cmd = array_merge([$bin, '--redis', getenv('PUNCTUAL_TEST_REDIS_URL'), '--prefix', $prefix, '--json'], $args);
    $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
    $out = stream_get_contents($pipes[1]);
    $err = stream_get_contents($pipes[2]);
    $code = proc_close($p);
    check($code === 0, 'punctual ' . implode(' ', $args) . " failed: $err");
    return json_decode($out, true);
}

$tests = [];

$tests['enqueue: created, duplicate, replaced; get'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $payload = "\xff\x00:colons:{\"x\":1}";
    same(['id' => 'order:1', 'status' => 'created'], $p->enqueue('orders', $payload, [
        'id' => 'order:1', 'delay_ms' => 60000, 'max_attempts' => 3, 'backoff_ms' => [1000, 2000],
    ]));
    same('duplicate', $p->enqueue('orders', 'other', ['id' => 'order:1'])['status']);
    $info = $p->get('orders', 'order:1');
    same('pool', $info['state']);
    same($payload, $info['payload']);
    same(3, $info['max_attempts']);
    // Redis's clock rounded up to the ms: the delay, or 1 ms more.
    check(in_array($info['due_ms'] - $info['created_ms'], [60000, 60001], true), 'due - created is the delay');
    same(0, $info['attempts']);
    same(null, $info['last_error']);
    check((bool) $r->sIsMember("$prefix:topics", 'orders'), 'topic registered');
    if (($got = cli($prefix, 'get', 'orders', 'order:1')) !== null) {
        same(['pool', 3, $info['due_ms']], [$got['state'], $got['max_attempts'], $got['due_ms']], 'the Rust library reads it');
    }
    same('replaced', $p->enqueue('orders', 'now', ['id' => 'order:1', 'replace' => true])['status']);
    $info = $p->get('orders', 'order:1');
    same(['ready', 'now', 6], [$info['state'], $info['payload'], $info['max_attempts']]);
};

$tests['enqueue of a dead id says dead'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $p->enqueue('orders', 'a', ['id' => 'order:9', 'delay_ms' => 60000]);
    // Moved to dead as fail would (record kept, in the dead set only). A
    // minute ahead is within cold_after (10 min): the job is in the pool ZSET.
    same(1, $r->zRem("$prefix:{orders}:pool", 'order:9'), 'order:9 was in the pool ZSET');
    $r->zAdd("$prefix:{orders}:dead", 1000, 'order:9');
    same(['id' => 'order:9', 'status' => 'dead'], $p->enqueue('orders', 'b', ['id' => 'order:9']));
    $out = $p->enqueueBatch('orders', [['payload' => 'c', 'id' => 'order:9'], ['payload' => 'd', 'id' => 'new']]);
    same(['dead', 'created'], array_column($out, 'status'));
    $info = $p->get('orders', 'order:9');
    same(['dead', 'a'], [$info['state'], $info['payload']]);
    same('replaced', $p->enqueue('orders', 'e', ['id' => 'order:9', 'replace' => true])['status']);
};

$tests['generated ids and absolute times'] = function (Redis $r): void {
    $p = new Producer($r, fresh_prefix());
    $now = (int) $r->time()[0] * 1000;
    $e = $p->enqueue('t', 'x', ['at_ms' => $now + 3600000]);
    check(preg_match('/^[0-9a-z]{12}$/', $e['id']) === 1, 'a 12-character generated id: ' . $e['id']);
    same($now + 3600000, $p->get('t', $e['id'])['due_ms']);
    same('ready', $p->get('t', $p->enqueue('t', 'y', ['at_ms' => 1000])['id'])['state'], 'a past time is due now');
};

$tests['batch: first id wins, calls of 1000'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $out = $p->enqueueBatch('t', [
        ['payload' => 'a', 'id' => 'a'], ['payload' => 'b', 'id' => 'a'], ['payload' => 'c', 'delay_ms' => 5000],
    ]);
    same(['created', 'duplicate', 'created'], array_column($out, 'status'));
    same('a', $out[1]['id']);
    same('a', $p->get('t', 'a')['payload']);
    $big = $p->enqueueBatch('big', array_map(fn ($i) => ['payload' => (string) $i], range(1, 2500)));
    same(2500, count(array_unique(array_column($big, 'id'))));
    same(2500, $r->hLen("$prefix:{big}:jobs"));
};

$tests['batch: the shared forms (=n, ~n, =*n, ~*n): ids and statuses as the script wrote them'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    // =*n: every id generated, jobs alike (the reply: -1 and the first id).
    $out = $p->enqueueBatch('s', array_map(fn ($i) => ['payload' => "g$i"], range(0, 99)));
    same(100, count(array_unique(array_column($out, 'id'))));
    foreach ($out as $i => $e) {
        same(['created', "g$i", 'ready'], [$e['status'], $p->get('s', $e['id'])['payload'], $p->get('s', $e['id'])['state']]);
    }
    // ~*n: generated, a delay each.
    $out = $p->enqueueBatch('s', array_map(fn ($i) => ['payload' => "d$i", 'delay_ms' => 60000 * ($i + 1)], range(0, 9)));
    $due = [];
    foreach ($out as $i => $e) {
        $info = $p->get('s', $e['id']);
        same(['created', "d$i", 'pool'], [$e['status'], $info['payload'], $info['state']]);
        $due[] = $info['due_ms'];
    }
    check($due === array_values(array_unique($due)) && $due[9] - $due[0] >= 9 * 60000, 'each its own delay');
    // =*n with a per-job option (the reply lists every id).
    $out = $p->enqueueBatch('s', [['payload' => 'o1', 'group' => 'g1'], ['payload' => 'o2', 'group' => 'g1']]);
    same(['o1', 'g1', 'o2', 'g1'], [$p->get('s', $out[0]['id'])['payload'], $p->get('s', $out[0]['id'])['group'],
        $p->get('s', $out[1]['id'])['payload'], $p->get('s', $out[1]['id'])['group']]);
    // =n, ids given and one generated: statuses of the jobs not created.
    $p->enqueue('s', 'x', ['id' => 'live']);
    $p->enqueue('s', 'y', ['id' => 'gone']);
    same(1, $r->zRem("$prefix:{s}:ready", 'gone'), 'gone was ready');
    $r->zAdd("$prefix:{s}:dead", 1000, 'gone');
    $out = $p->enqueueBatch('s', [['payload' => '1', 'id' => 'live'], ['payload' => '2', 'id' => 'fresh'],
        ['payload' => '3', 'id' => 'gone'], ['payload' => '4']]);
    same(['duplicate', 'created', 'dead', 'created'], array_column($out, 'status'));
    same(['live', 'fresh', 'gone'], array_slice(array_column($out, 'id'), 0, 3));
    same(['x', '2', 'y', '4'], array_map(fn ($e) => $p->get('s', $e['id'])['payload'], $out));
    // =n, all ids given (the reply lists none), with replace.
    $out = $p->enqueueBatch('s', [['payload' => 'r1', 'id' => 'live'], ['payload' => 'r2', 'id' => 'fresh']], true);
    same([['id' => 'live', 'status' => 'replaced'], ['id' => 'fresh', 'status' => 'replaced']], $out);
    same('r1', $p->get('s', 'live')['payload']);
    // ~n: ids given, a time each.
    $out = $p->enqueueBatch('s', [['payload' => 't1', 'id' => 't1', 'delay_ms' => 60000], ['payload' => 't2', 'id' => 't2']]);
    same([['id' => 't1', 'status' => 'created'], ['id' => 't2', 'status' => 'created']], $out);
    same(['pool', 'ready'], [$p->get('s', 't1')['state'], $p->get('s', 't2')['state']]);
};

$tests['invalid input: refused before Redis, with the library messages'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $cases = json_decode(file_get_contents(__DIR__ . '/../../testdata/invalid.json'), true, 512, JSON_THROW_ON_ERROR);
    foreach ($cases as $c) {
        $opts = array_key_exists('id', $c) ? ['id' => $c['id']] : [];
        if (array_key_exists('id_hex', $c)) {
            $opts['id'] = hex2bin($c['id_hex']); // bytes that are not UTF-8
        }
        if (array_key_exists('max_attempts', $c)) {
            $opts['max_attempts'] = $c['max_attempts'];
        }
        refused(fn () => $p->enqueue($c['topic'], str_repeat('x', $c['payload_bytes'] ?? 1), $opts), $c['message']);
    }
    refused(fn () => $p->enqueueBatch('t', [['payload' => 'ok'], ['payload' => 'x', 'max_attempts' => 0]]), 'job 2: invalid max attempts 0: max attempts must be at least 1 and at most 10000');
    refused(fn () => $p->enqueue('t', 'x', ['max_attempts' => 3.0]), 'invalid max attempts 3.0: give an integer from 1 to 10000');
    refused(fn () => $p->enqueue('t', 'x', ['delay_ms' => NAN]), 'invalid delay NAN: give milliseconds as a number');
    refused(fn () => $p->enqueue('t', 'x', ['delay_ms' => '60000']), "invalid delay '60000': give milliseconds as a number");
    refused(fn () => $p->enqueue('t', 'x', ['delay_ms' => -5]), 'invalid delay -5ms: delays may not be negative');
    refused(fn () => $p->enqueue('t', 'x', ['delay_ms' => 315360000001]), 'invalid delay 315360000s: delays are at most ten years');
    refused(fn () => $p->enqueue('t', 'x', ['at_ms' => -1]), 'invalid due time: before 1970; give a time after the epoch');
    refused(fn () => $p->enqueue('t', 'x', ['backoff_ms' => [1000, 315360001000]]), 'invalid backoff step 315360001s: steps are at most ten years');
    refused(fn () => $p->enqueue('t', 'x', ['delay_ms' => 1, 'at_ms' => 1]), 'give a delay or a due time, not both');
    refused(fn () => $p->enqueue('t', 'x', ['backoff_ms' => 5000]), 'backoff must be a list of delays in milliseconds');
    refused(fn () => $p->enqueue('t', 'x', ['dealy_ms' => 1]), "unknown job field 'dealy_ms'; the fields are: payload, id, delay_ms, at_ms, max_attempts, backoff_ms, expire_ms, timeout_ms, group, traceparent, tracestate");
    refused(fn () => new Producer($r, 'a{b'), 'invalid prefix "a{b": prefixes must be non-empty and may not contain braces');
    refused(fn () => $p->get('t', ''), 'invalid id "": ids may not be empty (leave the id out to have one generated)');
    same([], $r->keys("$prefix:*"), 'nothing reached Redis');
    $now = (int) $r->time()[0] * 1000;
    refused(fn () => $p->enqueue('t', 'x', ['at_ms' => $now + 20 * 365 * 86400 * 1000]), 'job 1: due time more than ten years ahead');
};

$tests['a call the script refuses does not list the topic'] = function (Redis $r): void {
    // The script fails on a key of the wrong type: nothing is written, not
    // even the topic's name in P:topics.
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $r->set($prefix . ':{broken}:jobs', 'not a hash');
    $threw = false;
    try {
        $p->enqueue('broken', 'x', ['id' => 'a']);
    } catch (\Throwable $e) {
        $threw = true;
    }
    check($threw, 'the refused call throws');
    check(!$r->sIsMember($prefix . ':topics', 'broken'), 'a refused topic is not listed');
    $p->enqueue('fine', 'x', ['id' => 'a']);
    check((bool) $r->sIsMember($prefix . ':topics', 'fine'), 'an accepted topic is listed');
};

$tests['NOSCRIPT: loaded again'] = function (Redis $r): void {
    $p = new Producer($r, fresh_prefix());
    $r->script('flush');
    same('created', $p->enqueue('t', 'x', ['id' => '1'])['status']);
    $r->script('flush');
    same('ready', $p->get('t', '1')['state']);
};

$tests['cancel and reschedule'] = function (Redis $r): void {
    $p = new Producer($r, fresh_prefix());
    $p->enqueue('t', 'x', ['id' => 'j', 'delay_ms' => 3600000]);
    same('pool', $p->reschedule('t', 'j'));
    same('ready', $p->get('t', 'j')['state']);
    same('ready', $p->reschedule('t', 'j', ['delay_ms' => 60000]));
    same('pool', $p->get('t', 'j')['state']);
    same('pool', $p->cancel('t', 'j'));
    same(null, $p->cancel('t', 'j'));
    same(null, $p->get('t', 'j'));
    same(null, $p->reschedule('t', 'j'));
};

$tests['a cancel is in the audit trail as the CLI\'s'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $p->enqueue('t', 'x', ['id' => 'a']);
    $p->enqueue('t', 'x', ['id' => 'b']);
    same('ready', $p->cancel('t', 'a'));
    same('ready', $p->cancel('t', 'b', 'billing'));
    same(null, $p->cancel('t', 'a'), 'found nothing: changed nothing, not recorded');
    $trail = array_map(fn ($e) => json_decode($e, true), $r->lRange("$prefix:audit", 0, -1));
    foreach ($trail as &$e) {
        check(abs($e['at_ms'] / 1000 - microtime(true)) < 60, 'at_ms is now');
        unset($e['at_ms']);
    }
    $me = gethostname() . '/' . getmypid();
    same([
        ['who' => 'billing', 'from' => $me, 'action' => 'cancel', 'topic' => 't', 'detail' => ['id' => 'b', 'was' => 'ready']],
        ['who' => 'php', 'from' => $me, 'action' => 'cancel', 'topic' => 't', 'detail' => ['id' => 'a', 'was' => 'ready']],
    ], $trail);
    $read = cli($prefix, 'audit');
    if ($read !== null) {
        same([['billing', 'b'], ['php', 'a']], array_map(fn ($e) => [$e['who'], $e['detail']['id']], $read), 'as punctual audit reads it');
    }
};

$tests["a job due far ahead waits cold, in its minute's bucket"] = function (Redis $r): void {
    // docs/PROTOCOL.md "The cold pool": due at least cold_after (10 min by
    // default) ahead, a job waits in P:{T}:c:<minute>, not in the pool ZSET;
    // get, reschedule and cancel still call it pool.
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $k = fn (string $name): string => "$prefix:{t}:$name";
    $coldN = fn (): int => (int) $r->hGet($k('meta'), 'cold_n');
    // A topic gets cold jobs once a scheduler ticked on it (its first tick
    // writes cold_at): one tick, as `punctual serve` runs at its start.
    $bin = getenv('PUNCTUAL_BIN');
    if (!$bin) {
        echo "skip: PUNCTUAL_BIN not set\n";
        return;
    }
    $proc = proc_open([$bin, 'script', 'tick'], [1 => ['pipe', 'w']], $pipes);
    $tick = stream_get_contents($pipes[1]);
    same(0, proc_close($proc), 'punctual script tick');
    $names = ['pool', 'ready', 'running', 'dead', 'jobs', 'meta', 'stats', 'seq', 'attempts'];
    $r->clearLastError();
    $r->eval($tick, array_merge(array_map($k, $names), ['1000', '1000000', '1000']), 9);
    same(false, $r->getLastError() !== null, 'the tick ran: ' . $r->getLastError());
    $p->enqueue('t', 'x', ['id' => 'far', 'delay_ms' => 3600000]);
    $p->enqueue('t', 'x', ['id' => 'near', 'delay_ms' => 60000]);
    $far = $p->get('t', 'far');
    same('pool', $far['state']);
    $start = $far['due_ms'] - $far['due_ms'] % 60000;
    same(false, $r->zScore($k('pool'), 'far'), 'far is not in the pool ZSET');
    same(['far'], $r->lRange($k("c:$start"), 0, -1), 'far is in its bucket');
    same([(string) $start], $r->zRange($k('cold'), 0, -1), 'its bucket is listed');
    same(1, $coldN(), 'cold_n');
    $near = $p->get('t', 'near');
    same((float) $near['due_ms'], $r->zScore($k('pool'), 'near'), 'near is in the pool ZSET');
    if (($got = cli($prefix, 'get', 't', 'far')) !== null) {
        same(['pool', $far['due_ms']], [$got['state'], $got['due_ms']], 'the Rust library reads it');
    }
    cli($prefix, 'check', 't');
    // Rescheduled within W: in the pool ZSET, no longer cold.
    same('pool', $p->reschedule('t', 'far', ['delay_ms' => 120000]));
    same((float) $p->get('t', 'far')['due_ms'], $r->zScore($k('pool'), 'far'), 'rescheduled near');
    same(0, $coldN(), 'cold_n after the reschedule');
    // Far again, then cancelled.
    same('pool', $p->reschedule('t', 'far', ['delay_ms' => 7200000]));
    $again = $p->get('t', 'far');
    same('pool', $again['state']);
    same(false, $r->zScore($k('pool'), 'far'), 'rescheduled far');
    $bucket = $r->lRange($k('c:' . ($again['due_ms'] - $again['due_ms'] % 60000)), 0, -1);
    check(in_array('far', $bucket, true), 'far is in its new bucket');
    same(1, $coldN(), 'cold_n after the second reschedule');
    same('pool', $p->cancel('t', 'far'));
    same(null, $p->get('t', 'far'));
    same(0, $coldN(), 'cold_n after the cancel');
};

$tests['partitioned topic: crc32 routing, client-made ids'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $r->hSet("$prefix:partitions", 'hot', '3');
    $p = new Producer($r, $prefix);
    $out = $p->enqueueBatch('hot', array_map(fn ($i) => ['payload' => (string) $i], range(1, 60)));
    $parts = [];
    foreach ($out as $e) {
        check(preg_match('/^[0-9a-z]{21}$/', $e['id']) === 1, 'a 21-character id: ' . $e['id']);
        $part = crc32($e['id']) % 3;
        $parts[$part] = true;
        check((bool) $r->hExists("$prefix:{hot#$part}:jobs", $e['id']), "{$e['id']} in partition $part");
    }
    same(3, count($parts));
    same(0xCBF43926 % 7, Producer::partitionOf('123456789', 7));
    $p->enqueue('hot', 'given', ['id' => 'order:10086', 'delay_ms' => 60000]);
    same('given', $p->get('hot', 'order:10086')['payload']);
    same('pool', $p->reschedule('hot', 'order:10086'));
    same('ready', $p->cancel('hot', 'order:10086'));
    same(['hot'], $r->sMembers("$prefix:topics"));
    cli($prefix, 'check', 'hot'); // exits non-zero on an id in the wrong partition
};

$tests['float ms are sent as whole ms, rounded up'] = function (Redis $r): void {
    // The scripts take plain decimal digits only ("1.5E+3", "60000.0" are
    // refused); a float is rounded up, so a job is never due early.
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $p->enqueue('t', 'x', ['id' => 'f1', 'delay_ms' => 60000.0, 'backoff_ms' => [1.5e3, 0.25]]);
    $p->enqueue('t', 'x', ['id' => 'f2', 'delay_ms' => 59999.2]);
    foreach (['f1', 'f2'] as $id) {
        $info = $p->get('t', $id);
        check(in_array($info['due_ms'] - $info['created_ms'], [60000, 60001], true), 'delay ' . ($info['due_ms'] - $info['created_ms']));
    }
    check(str_contains((string) $r->hGet("$prefix:{t}:jobs", 'f1'), ':1500,1:0:x'), 'backoff in whole ms');
    $now = (int) $r->time()[0] * 1000;
    $p->enqueue('t', 'x', ['id' => 'f3', 'at_ms' => $now + 3600000.4]);
    same($now + 3600001, $p->get('t', 'f3')['due_ms']);
    // Time passes between the reschedule and the get: bound the due time by
    // Redis's clock before the reschedule (floored) and at the get.
    [$sec, $usec] = $r->time();
    $t0 = (int) $sec * 1000 + intdiv((int) $usec, 1000);
    same('pool', $p->reschedule('t', 'f3', ['delay_ms' => 120000.5]));
    $info = $p->get('t', 'f3');
    check($info['due_ms'] >= $t0 + 120001 && $info['due_ms'] <= $info['now_ms'] + 120002, 'rescheduled in whole ms, rounded up');
};

$tests['a stale cached partition count never strands a job'] = function (Redis $r): void {
    if (!getenv('PUNCTUAL_BIN')) {
        echo "skip: PUNCTUAL_BIN not set\n";
        return;
    }
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    // The producer reads the count (1) and caches it...
    same('created', $p->enqueue('hot', 'x', ['id' => 'first'])['status']);
    same('ready', $p->cancel('hot', 'first'));
    // ...then the topic (empty) is split into 3 by the Rust library.
    $cmd = [getenv('PUNCTUAL_BIN'), '--redis', getenv('PUNCTUAL_TEST_REDIS_URL'), '--prefix', $prefix, 'partitions', 'hot', '3'];
    $proc = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
    $err = stream_get_contents($pipes[2]);
    same(0, proc_close($proc), "punctual partitions: $err");
    // A producer that read the count just before the change: its cache still
    // says 1 (kept fresh here, so the test does not race the 1 s).
    $stale = fn () => (function () {
        $this->partitions['hot'] = [1, microtime(true)];
    })->call($p);
    $stale();
    $ids = array_slice(array_values(array_filter(array_map(fn ($n) => "order:$n", range(0, 39)), fn ($i) => crc32($i) % 3 !== 0)), 0, 6);
    $out = $p->enqueueBatch('hot', array_map(fn ($id) => ['payload' => 'p', 'id' => $id], $ids));
    same(array_fill(0, count($ids), 'created'), array_column($out, 'status'));
    foreach ($ids as $id) {
        $part = crc32($id) % 3;
        check((bool) $r->hExists("$prefix:{hot#$part}:jobs", $id), "$id in partition $part");
    }
    same(0, $r->hLen("$prefix:{hot}:jobs"), 'nothing in the old layout');
    same(3, $p->partitions('hot'));
    $stale();
    $single = array_values(array_filter(array_map(fn ($n) => "single:$n", range(0, 39)), fn ($i) => crc32($i) % 3 !== 0))[0];
    same('created', $p->enqueue('hot', 'q', ['id' => $single])['status']);
    check((bool) $r->hExists("$prefix:{hot#" . (crc32($single) % 3) . "}:jobs", $single), 'the single job in its partition');
    cli($prefix, 'check', 'hot');
};

/** Plays punctual serve's side of docs/RESIDENT.md over fds 3 and 4. */
final class FakeServe
{
    /** @var resource */
    private $proc;
    /** @var array<int, resource> */
    private array $pipes = [];

    public function __construct(array $argv)
    {
        $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w'], 3 => ['pipe', 'r'], 4 => ['pipe', 'w']];
        $this->proc = proc_open($argv, $spec, $this->pipes, null, ['PUNCTUAL_PROTOCOL' => '1'] + getenv());
    }

    public function read(): array
    {
        $line = fgets($this->pipes[4]);
        if ($line === false) {
            throw new Failed('fd 4 closed early: ' . stream_get_contents($this->pipes[2]));
        }
        return json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    }

    public function send(array $msg): void
    {
        fwrite($this->pipes[3], json_encode($msg) . "\n");
        fflush($this->pipes[3]);
    }

    /** The lines in one write (under PIPE_BUF: atomic), so the program reads them in one read. */
    public function sendTogether(array ...$msgs): void
    {
        $data = implode('', array_map(fn (array $m): string => json_encode($m) . "\n", $msgs));
        check(strlen($data) <= 4096, 'one atomic write');
        same(strlen($data), fwrite($this->pipes[3], $data), 'written at once');
    }

    /** The program's pid (proc_open without a shell: the program itself). */
    public function pid(): int
    {
        return proc_get_status($this->proc)['pid'];
    }

    public function job(string $id, mixed $payload, int $attempt = 1, bool $b64 = false): array
    {
        $msg = ['type' => 'job', 'id' => $id, 'topic' => 'faketopic', 'attempt' => $attempt, 'max_attempts' => 5,
            'due_ms' => 1000, 'created_ms' => 900, 'timeout_ms' => 30000];
        if ($b64) {
            $msg['payload_b64'] = base64_encode($payload);
        } else {
            $msg['payload'] = is_string($payload) ? $payload : json_encode($payload);
        }
        $this->send($msg);
        return $this->read();
    }

    /** The next line the program writes on stdout (without its newline); fails rather than hangs when none comes. */
    public function stdoutLine(): string
    {
        $r = [$this->pipes[1]];
        $w = $e = null;
        check(stream_select($r, $w, $e, 20) === 1, 'a line on stdout within 20 s');
        return rtrim((string) fgets($this->pipes[1]), "\n");
    }

    /** Closes fd 3 (EOF): returns [exit status, stdout, stderr, the replies not read]. */
    public function close(): array
    {
        fclose($this->pipes[3]);
        $out = stream_get_contents($this->pipes[1]);
        $err = stream_get_contents($this->pipes[2]);
        $replies = stream_get_contents($this->pipes[4]);
        fclose($this->pipes[4]);
        return [proc_close($this->proc), $out, $err, $replies];
    }
}

$tests['resident loop against a fake serve'] = function (Redis $r): void {
    $r->del('e2e:faketopic:seen', 'e2e:faketopic:once:o');
    $fake = new FakeServe([PHP_BINARY, __DIR__ . '/e2e_handler.php']);
    same(['type' => 'ready', 'protocol' => 1, 'inflight' => 1, 'lookahead' => 16], $fake->read());
    same(['type' => 'done', 'id' => 'a'], $fake->job('a', ['do' => 'ok']));
    same(['type' => 'done', 'id' => 'p'], $fake->job('p', ['do' => 'print']));
    same(['type' => 'retry', 'id' => 'r', 'error' => 'asked to retry', 'delay_ms' => 1500], $fake->job('r', ['do' => 'retry', 'delay_ms' => 1500]));
    same(['type' => 'retry', 'id' => 'r2', 'error' => 'asked to retry'], $fake->job('r2', ['do' => 'retry']));
    same(['type' => 'dead', 'id' => 'd', 'error' => 'asked to die'], $fake->job('d', ['do' => 'dead']));
    same(['type' => 'retry', 'id' => 'x', 'error' => 'DomainException: boom'], $fake->job('x', ['do' => 'raise']));
    $fake->send(['type' => 'something-later', 'id' => 'zz']);
    same(['type' => 'done', 'id' => 'b'], $fake->job('b', "\xff\x00bin", 1, true));
    same(['type' => 'done', 'id' => 'u'], $fake->job('u', "caf\u{e9} \u{2603}"));
    same('retry', $fake->job('o', ['do' => 'once'])['type']);
    same(['type' => 'done', 'id' => 'o'], $fake->job('o', ['do' => 'once'], 2));
    same('1', $r->get('e2e:faketopic:once:o'));
    [$code, $out, $err] = $fake->close();
    same(0, $code, "exit status; stderr: $err");
    check(str_contains($out, 'junk on stdout') && str_contains($out, '{"type":"done","id":"not-a-reply"}'), "stdout: $out");
    check(str_contains($err, 'junk on stderr'), "stderr: $err");
    check(str_contains($out, 'EOF, exiting'), "stdout: $out");
    $seen = [];
    foreach ($r->lRange('e2e:faketopic:seen', 0, -1) as $s) {
        $s = json_decode($s, true);
        $seen[$s['id']] = $s;
    }
    same("\xff\x00bin", hex2bin($seen['b']['payload_hex']));
    same("caf\u{e9} \u{2603}", hex2bin($seen['u']['payload_hex']));
    same([1, 5, 1000, 900, 30000], [$seen['a']['attempt'], $seen['a']['max_attempts'], $seen['a']['due_ms'], $seen['a']['created_ms'], $seen['a']['timeout_ms']]);
};

$tests['resident loop: the running job sees its cancel, no line is lost'] = function (Redis $r): void {
    $code = 'require ' . var_export(__DIR__ . '/bootstrap.php', true) . ';
        Punctual\Worker::run(function (Punctual\Job $job): void {
            echo "start {$job->id}\n";
            if ($job->payload === "wait") {
                $deadline = microtime(true) + 20; // until cancelled, looking between steps
                while (!$job->cancelled()) {
                    if (microtime(true) > $deadline) {
                        throw new Punctual\Dead("never cancelled");
                    }
                    usleep(10000);
                }
                throw new Punctual\Retry("stopped: {$job->id}");
            }
            if ($job->payload === "block") {
                usleep(500000); // the driver writes what comes next meanwhile
            }
        });
        echo "EOF, exiting\n";';
    $fake = new FakeServe([PHP_BINARY, '-r', $code]);
    same(['type' => 'ready', 'protocol' => 1, 'inflight' => 1, 'lookahead' => 16], $fake->read());
    // A cancel for a job already answered, one for another id: ignored;
    // the running job's own cancel ends it.
    same(['type' => 'done', 'id' => 'a'], $fake->job('a', 'x'));
    $fake->send(['type' => 'cancel', 'id' => 'a']);
    $fake->send(['type' => 'job', 'id' => 'w', 'payload' => 'wait']);
    same(['start a', 'start w'], [$fake->stdoutLine(), $fake->stdoutLine()]);
    $fake->send(['type' => 'cancel', 'id' => 'other']);
    $fake->send(['type' => 'cancel', 'id' => 'w']);
    same(['type' => 'retry', 'id' => 'w', 'error' => 'stopped: w'], $fake->read());
    // Lines read by the handler's look for cancels are kept, in order; a
    // job cancelled before it started is not started.
    $fake->send(['type' => 'job', 'id' => 'w2', 'payload' => 'wait']);
    same('start w2', $fake->stdoutLine());
    $fake->send(['type' => 'job', 'id' => 'n', 'payload' => 'x']);
    $fake->send(['type' => 'job', 'id' => 'gone', 'payload' => 'x']);
    $fake->send(['type' => 'cancel', 'id' => 'gone']);
    $fake->send(['type' => 'cancel', 'id' => 'w2']);
    same(['type' => 'retry', 'id' => 'w2', 'error' => 'stopped: w2'], $fake->read());
    same(['type' => 'done', 'id' => 'n'], $fake->read());
    same(['type' => 'retry', 'id' => 'gone', 'error' => 'RuntimeException: cancelled by an operator'], $fake->read());
    // A job that never looks: its cancel is harmless, its reply as usual.
    $fake->send(['type' => 'job', 'id' => 'b', 'payload' => 'block']);
    same(['start n', 'start b'], [$fake->stdoutLine(), $fake->stdoutLine()]);
    $fake->send(['type' => 'cancel', 'id' => 'b']);
    same(['type' => 'done', 'id' => 'b'], $fake->read());
    same(['type' => 'done', 'id' => 'c'], $fake->job('c', 'x'));
    // A job line the loop cannot read is answered where it is read.
    $fake->send(['type' => 'job', 'id' => 'bad', 'payload_b64' => '@@@']);
    same('retry', $fake->read()['type']);
    [$status, $out, $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    preg_match_all('/^start (\S+)$/m', $out, $m);
    same(['c'], $m[1], "stdout: $out");
    check(str_contains($out, 'EOF, exiting'), "stdout: $out");
    same(false, Job::fromMessage(['id' => 'j', 'payload' => ''])->cancelled(), 'a job not run by the loop');
};

// docs/RESIDENT.md, "Look-ahead": the sequential loop's side.

/** A Worker::run program: prints "start ID START_BY" per job; a "hold:PATH" job returns once PATH exists, not looking at fd 3 meanwhile. */
function lookahead_program(string $lookahead): array
{
    $code = 'require ' . var_export(__DIR__ . '/bootstrap.php', true) . ';
        $handle = function (Punctual\Job $job): void {
            echo "start {$job->id} ", var_export($job->startByUs, true), "\n";
            if (str_starts_with($job->payload, "hold:")) {
                while (!file_exists(substr($job->payload, 5))) {
                    usleep(5000);
                }
            }
        };
        if ($argv[1] === "default") {
            Punctual\Worker::run($handle);
        } else {
            Punctual\Worker::run($handle, lookahead: (int) $argv[1]);
        }
        echo "EOF, exiting\n";';
    return [PHP_BINARY, '-r', $code, $lookahead];
}

function job_msg(string $id, string $payload = 'x', array $extra = []): array
{
    return ['type' => 'job', 'id' => $id, 'topic' => 't', 'attempt' => 1, 'max_attempts' => 5, 'due_ms' => 1,
        'created_ms' => 1, 'timeout_ms' => 30000, 'payload' => $payload] + $extra;
}

function now_us(): int
{
    return intdiv(hrtime(true), 1000);
}

/** A path that does not exist yet: the driver creates it to let a "hold:" job return. */
function hold_flag(): string
{
    return sys_get_temp_dir() . '/punctual-hold-' . bin2hex(random_bytes(6));
}

/** @return list<string> the ids of the "start" lines of $out */
function started(string $out): array
{
    preg_match_all('/^start (\S+)/m', $out, $m);
    return $m[1];
}

$tests['look-ahead: the handshake says lookahead 16 by default, none with 0'] = function (Redis $r): void {
    foreach (['default' => 16, '64' => 64, '0' => null] as $arg => $n) {
        $fake = new FakeServe(lookahead_program((string) $arg));
        $ready = ['type' => 'ready', 'protocol' => 1, 'inflight' => 1];
        if ($n !== null) {
            $ready['lookahead'] = $n;
        }
        same($ready, $fake->read(), "lookahead $arg");
        same(['type' => 'done', 'id' => 'j'], $fake->job('j', 'x'));
        [$status, , $err] = $fake->close();
        same(0, $status, "exit status; stderr: $err");
    }
};

$tests['look-ahead: a job past its start_by_us is answered skip and not started'] = function (Redis $r): void {
    $fake = new FakeServe(lookahead_program('default'));
    $fake->read();
    $t = now_us();
    $fake->sendTogether(job_msg('late', 'x', ['start_by_us' => $t - 1000000]),
        job_msg('soon', 'x', ['start_by_us' => $t + 60000000]), job_msg('plain'));
    same([['type' => 'skip', 'id' => 'late'], ['type' => 'done', 'id' => 'soon'], ['type' => 'done', 'id' => 'plain']],
        [$fake->read(), $fake->read(), $fake->read()]);
    [$status, $out, $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    check(str_contains($out, 'start soon ' . ($t + 60000000) . "\n") && str_contains($out, "start plain NULL\n"), "stdout: $out");
    same(['soon', 'plain'], started($out));
    same(123456789, Job::fromMessage(['id' => 'j', 'payload' => '', 'start_by_us' => 123456789])->startByUs);
    same(null, Job::fromMessage(['id' => 'j', 'payload' => ''])->startByUs);
};

$tests['look-ahead: start_by_us is checked when the job would start, not when it was read'] = function (Redis $r): void {
    $fake = new FakeServe(lookahead_program('default'));
    $fake->read();
    $flag = hold_flag();
    $startBy = now_us() + 200000;
    $fake->sendTogether(job_msg('hold', "hold:$flag"), job_msg('next', 'x', ['start_by_us' => $startBy]), job_msg('after'));
    same('start hold NULL', $fake->stdoutLine());
    while (now_us() <= $startBy) {
        usleep(10000); // "next" waits, read, behind "hold" past its start_by_us
    }
    touch($flag);
    same([['type' => 'done', 'id' => 'hold'], ['type' => 'skip', 'id' => 'next'], ['type' => 'done', 'id' => 'after']],
        [$fake->read(), $fake->read(), $fake->read()]);
    unlink($flag);
    [$status, $out, $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    same(['after'], started($out), "stdout (after hold, read above): $out");
};

$tests['look-ahead: a cancel read in the same read as its job stops its start'] = function (Redis $r): void {
    $fake = new FakeServe(lookahead_program('default'));
    $fake->read();
    $fake->sendTogether(job_msg('a'), ['type' => 'cancel', 'id' => 'a'], job_msg('b'));
    same(['type' => 'retry', 'id' => 'a', 'error' => 'RuntimeException: cancelled by an operator'], $fake->read());
    same(['type' => 'done', 'id' => 'b'], $fake->read());
    [$status, $out, $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    same(['b'], started($out), "stdout: $out");
};

$tests['look-ahead: a cancel written while the job before runs stops a job already read'] = function (Redis $r): void {
    // "c" is read with "hold" (one write, one read); its cancel comes while
    // "hold" runs without looking at fd 3: the loop must read fd 3 before
    // starting "c".
    $fake = new FakeServe(lookahead_program('default'));
    $fake->read();
    $flag = hold_flag();
    $fake->sendTogether(job_msg('hold', "hold:$flag"), job_msg('c'));
    same('start hold NULL', $fake->stdoutLine());
    $fake->send(['type' => 'cancel', 'id' => 'c']);
    touch($flag);
    same(['type' => 'done', 'id' => 'hold'], $fake->read());
    same(['type' => 'retry', 'id' => 'c', 'error' => 'RuntimeException: cancelled by an operator'], $fake->read());
    unlink($flag);
    same(['type' => 'done', 'id' => 'd'], $fake->job('d', 'x'));
    [$status, $out, $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    same(['d'], started($out), "stdout (after hold, read above): $out");
};

$tests['look-ahead: waiting for a job blocks without spinning'] = function (Redis $r): void {
    $fake = new FakeServe(lookahead_program('default'));
    $fake->read();
    $ticks = function () use ($fake): int {
        $stat = file_get_contents('/proc/' . $fake->pid() . '/stat');
        $f = explode(' ', trim(substr($stat, strrpos($stat, ')') + 2)));
        return (int) $f[11] + (int) $f[12]; // utime + stime
    };
    $before = $ticks();
    sleep(1);
    $used = $ticks() - $before;
    check($used < 20, "$used ticks of CPU in 1 s idle: a loop that polled fd 3 without blocking burns about 100");
    same(['type' => 'done', 'id' => 'j'], $fake->job('j', 'x'));
    $fake->close();
};

$tests['look-ahead: an invalid lookahead is refused before the handshake'] = function (Redis $r): void {
    foreach ([-1, 65] as $bad) {
        try {
            Punctual\Intake::lookahead($bad);
            throw new Failed("lookahead $bad accepted");
        } catch (InvalidArgumentException $e) {
            check(str_contains($e->getMessage(), 'lookahead must be 0 to 64'), $e->getMessage());
        }
    }
    $fake = new FakeServe(lookahead_program('65'));
    [$status, $out, $err, $replies] = $fake->close();
    check($status !== 0, 'exits non-zero');
    same('', $replies, 'no handshake');
    check(str_contains($out . $err, 'InvalidArgumentException: punctual: lookahead must be 0 to 64'), "stdout: $out\nstderr: $err");
};

$tests['look-ahead: artisan punctual:work --lookahead, its skip and cancel before a start'] = function (Redis $r): void {
    $artisan = __DIR__ . '/laravel-app/artisan';
    if (!is_file(__DIR__ . '/laravel-app/vendor/autoload.php') && stream_resolve_include_path('Illuminate/autoload.php') === false) {
        echo "skip: Laravel not installed (Debian: php-laravel-framework)\n";
        return;
    }
    $fake = new FakeServe([PHP_BINARY, $artisan, 'punctual:work']);
    same(['type' => 'ready', 'protocol' => 1, 'inflight' => 1, 'lookahead' => 16], $fake->read());
    [$status, , $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    $fake = new FakeServe([PHP_BINARY, $artisan, 'punctual:work', 'punctual', '--lookahead=0']);
    same(['type' => 'ready', 'protocol' => 1, 'inflight' => 1], $fake->read());
    [$status, , $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    $fake = new FakeServe([PHP_BINARY, $artisan, 'punctual:work', '--lookahead=5']);
    same(['type' => 'ready', 'protocol' => 1, 'inflight' => 1, 'lookahead' => 5], $fake->read());
    $t = now_us();
    // Not Laravel payloads: a job that starts is answered dead by the command.
    $fake->sendTogether(job_msg('late', 'x', ['start_by_us' => $t - 1000000]), job_msg('gone'),
        ['type' => 'cancel', 'id' => 'gone'], job_msg('ran', 'x', ['start_by_us' => $t + 60000000]));
    same(['type' => 'skip', 'id' => 'late'], $fake->read());
    same(['type' => 'retry', 'id' => 'gone', 'error' => 'RuntimeException: cancelled by an operator'], $fake->read());
    same(['dead', 'ran'], [($m = $fake->read())['type'], $m['id']]);
    check(str_contains($m['error'], 'not a Laravel queue payload'), $m['error']);
    [$status, , $err] = $fake->close();
    same(0, $status, "exit status; stderr: $err");
    foreach (['65', 'abc'] as $bad) {
        $fake = new FakeServe([PHP_BINARY, $artisan, 'punctual:work', "--lookahead=$bad"]);
        [$status, $out, $err, $replies] = $fake->close();
        check($status !== 0, "--lookahead=$bad: exits non-zero");
        same('', $replies, "--lookahead=$bad: no handshake");
        check(str_contains($out . $err, "--lookahead must be 0 to 64 (the jobs punctual may write ahead of the one that runs; 0 turns look-ahead off), not '$bad'"), "stdout: $out\nstderr: $err");
    }
};

$tests['outside serve: says what to do'] = function (Redis $r): void {
    $code = 'require ' . var_export(__DIR__ . '/bootstrap.php', true) . '; Punctual\Worker::run(fn ($j) => null);';
    $p = proc_open([PHP_BINARY, '-r', $code], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null,
        ['PUNCTUAL_PROTOCOL' => '1', 'PUNCTUAL_JOBS_FD' => '97', 'PUNCTUAL_REPLIES_FD' => '98']);
    $all = stream_get_contents($pipes[1]) . stream_get_contents($pipes[2]);
    check(proc_close($p) !== 0, 'exits non-zero');
    check(str_contains($all, 'fd 97 is not open: run this program under `punctual serve`'), $all);
};

$tests['once: a step runs once, again after it failed'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $job = Job::fromMessage(['id' => 'j1', 'topic' => 't', 'payload' => '{}']);
    $calls = [];
    try {
        $job->once($r, 'charge', 60, function () use (&$calls) {
            $calls[] = 'boom';
            throw new RuntimeException('side effect failed');
        }, $prefix);
        throw new Failed('the exception must pass through');
    } catch (RuntimeException) {
    }
    check($job->once($r, 'charge', 60, function () use (&$calls) { $calls[] = 'ok'; }, $prefix), 'ran');
    check(!$job->once($r, 'charge', 60, function () use (&$calls) { $calls[] = 'again'; }, $prefix), 'skipped');
    same(['boom', 'ok'], $calls);
    $key = Punctual\Idempotency::key($prefix, 't', 'j1', 'charge');
    same("$prefix:once:t:j1:charge", $key);
    $ttl = $r->ttl($key);
    check($ttl > 0 && $ttl <= 60, "ttl $ttl");
};

$tests['run by hand (no PUNCTUAL_PROTOCOL): a message on stderr and a non-zero exit, though fds 3 and 4 are open'] = function (Redis $r): void {
    // fds 3 and 4 open, as PHP's own script file and a Redis socket hold them in a terminal.
    $code = 'require ' . var_export(__DIR__ . '/bootstrap.php', true) . '; Punctual\Worker::run(fn ($j) => null);';
    $env = getenv();
    unset($env['PUNCTUAL_PROTOCOL']);
    $spec = [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w'], 3 => ['file', __FILE__, 'r'], 4 => ['file', '/dev/null', 'w']];
    $p = proc_open([PHP_BINARY, '-r', $code], $spec, $pipes, null, $env);
    $out = stream_get_contents($pipes[1]);
    $err = stream_get_contents($pipes[2]);
    same(2, proc_close($p), "exit status; stdout: $out; stderr: $err");
    check(str_contains($err, 'PUNCTUAL_PROTOCOL is not set: this is a resident handler, run it under `punctual serve`'), $err);
    same('', $out, 'stdout');
    $env['PUNCTUAL_PROTOCOL'] = '7';
    $p = proc_open([PHP_BINARY, '-r', $code], $spec, $pipes, null, $env);
    $err = stream_get_contents($pipes[2]);
    same(2, proc_close($p), "exit status; stderr: $err");
    check(str_contains($err, 'PUNCTUAL_PROTOCOL is 7, this package speaks protocol 1'), $err);
};

$tests['a connection with OPT_PREFIX and a serializer (Laravel\'s): punctual\'s keys and payloads exact, the options kept'] = function (Redis $plain): void {
    $u = parse_url(getenv('PUNCTUAL_TEST_REDIS_URL'));
    $r = new Redis();
    $r->connect($u['host'] ?? '127.0.0.1', $u['port'] ?? 6379, 5.0);
    $r->setOption(Redis::OPT_PREFIX, 'laravel_database_');
    $r->setOption(Redis::OPT_SERIALIZER, Redis::SERIALIZER_PHP);
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    same(['id' => 'o:1', 'status' => 'created'], $p->enqueue('orders', '{"order":1}', ['id' => 'o:1', 'delay_ms' => 60000]));
    same('{"order":1}', $p->get('orders', 'o:1')['payload']);
    check($plain->zScore("$prefix:{orders}:pool", 'o:1') !== false, 'in the pool under punctual\'s exact key');
    check((bool) $plain->sIsMember("$prefix:topics", 'orders'), 'listed under the exact key');
    same([], $plain->keys("laravel_database_$prefix*"), 'no prefixed key');
    same('laravel_database_', $r->getOption(Redis::OPT_PREFIX), 'prefix restored');
    same(Redis::SERIALIZER_PHP, $r->getOption(Redis::OPT_SERIALIZER), 'serializer restored');
    same('pool', $p->cancel('orders', 'o:1'));
    cli($prefix, 'check', 'orders');
};

require __DIR__ . '/options.php';

$redis = test_redis();
$failed = 0;
foreach ($tests as $name => $test) {
    try {
        $test($redis);
        echo "ok   $name\n";
    } catch (Throwable $e) {
        $failed++;
        echo "FAIL $name: ", get_class($e), ': ', $e->getMessage(), "\n  at ", $e->getFile(), ':', $e->getLine(), "\n";
    }
}
echo $failed === 0 ? 'php: all ' . count($tests) . " tests passed\n" : "php: $failed of " . count($tests) . " tests FAILED\n";
exit($failed === 0 ? 0 : 1);
