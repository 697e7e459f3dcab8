<?php

// Per-job options (expiry, timeout, group) and schedules (docs/PROTOCOL.md,
// "Per-job options" and "Schedules"). Required by run.php: adds to $tests.

declare(strict_types=1);

use Punctual\InvalidInput;
use Punctual\Producer;
use Punctual\Validate;

function redis_now_ms(Redis $r): int
{
    [$sec, $usec] = $r->time();
    return (int) $sec * 1000 + intdiv((int) $usec, 1000);
}

function b36(int $n): string
{
    return base_convert((string) $n, 10, 36);
}

/** The schedules of a topic as stored: the parsed JSON of $name, or null. */
function stored(Redis $r, string $prefix, string $topic, string $name): ?array
{
    $raw = $r->hGet("$prefix:{" . $topic . '}:schedules', $name);
    return $raw === false ? null : json_decode($raw, true, 512, JSON_THROW_ON_ERROR);
}

/**
 * A subscriber on the topic's schedules channel, over a plain socket (phpredis'
 * subscribe() blocks in a callback).
 */
final class Listener
{
    /** @var resource */
    private $sock;

    public function __construct(string $channel)
    {
        $u = parse_url((string) getenv('PUNCTUAL_TEST_REDIS_URL'));
        $this->sock = stream_socket_client(sprintf('tcp://%s:%d', $u['host'] ?? '127.0.0.1', $u['port'] ?? 6379), $no, $err, 5.0);
        fwrite($this->sock, sprintf("*2\r\n\$9\r\nSUBSCRIBE\r\n\$%d\r\n%s\r\n", strlen($channel), $channel));
        stream_set_timeout($this->sock, 5);
        same(['subscribe', $channel, 1], $this->reply(), 'subscribed');
    }

    /** One RESP reply: an array of bulk strings and integers, or null on timeout. */
    private function reply(): mixed
    {
        $line = fgets($this->sock);
        if ($line === false) {
            return null;
        }
        $line = rtrim($line, "\r\n");
        return match ($line[0]) {
            '*' => array_map(fn () => $this->reply(), range(1, (int) substr($line, 1))),
            '$' => substr(fread($this->sock, (int) substr($line, 1) + 2), 0, -2),
            ':' => (int) substr($line, 1),
            default => throw new Failed("unexpected reply $line"),
        };
    }

    /** The names published since the last look: $n of them, or none within 0.5 s when $n is 0. */
    public function take(int $n): array
    {
        stream_set_timeout($this->sock, $n > 0 ? 5 : 0, $n > 0 ? 0 : 500000);
        $names = [];
        while ($n === 0 || count($names) < $n) {
            $m = $this->reply();
            if ($m === null) {
                break;
            }
            $names[] = $m[2];
        }
        return $names;
    }
}

$tests['the shared invalid options are refused before Redis'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $cases = json_decode(file_get_contents(__DIR__ . '/../../testdata/invalid_options.json'), true, 512, JSON_THROW_ON_ERROR);
    check(count($cases) >= 20, 'cases');
    foreach ($cases as $c) {
        $args = $c['args'];
        if ($c['kind'] === 'enqueue') {
            refused(fn () => $p->enqueue('t', 'x', $args), $c['message']);
        } else {
            $name = $args['name'];
            $payload = str_repeat('x', $args['payload_bytes'] ?? 1);
            unset($args['name'], $args['payload_bytes']);
            refused(fn () => $p->scheduleAdd('t', $name, ['payload' => $payload] + $args), $c['message']);
        }
    }
    refused(fn () => $p->enqueue('t', 'x', ['expire_ms' => '60000']), "invalid expiry '60000': give milliseconds as a number");
    refused(
        fn () => $p->scheduleAdd('t', 's', ['every_ms' => 60000, 'frequency' => 2]),
        "unknown schedule field 'frequency'; the fields are: cron, every_ms, tz, payload, max_attempts, expire_ms, timeout_ms, group, catch_up, spread_ms, paused",
    );
    refused(fn () => $p->scheduleAdd('t', 's', ['every_ms' => 60000, 'payload' => "\xff"]), "a schedule's payload must be UTF-8 text (it is stored in JSON)");
    same([], $r->keys("$prefix:*"), 'nothing reached Redis');
};

$tests['options are passed in the max-attempts argument'] = function (Redis $r): void {
    // What the script gets: <max>;x<ms>;t<ms>;g<group>, in that order.
    $enc = fn (array $o) => Validate::job(['payload' => 'x'] + $o, 100)[3];
    same('3;x3600000;t5000;gshop-17', $enc(['max_attempts' => 3, 'expire_ms' => 3600000, 'timeout_ms' => 5000, 'group' => 'shop-17']));
    same(';x3600000', $enc(['expire_ms' => 3600000]));
    same(';ga.b_c@d-9', $enc(['group' => 'a.b_c@d-9']));
    same('2', $enc(['max_attempts' => 2]));
    same('', $enc([]));
    same(';x2;t1', $enc(['expire_ms' => 1.2, 'timeout_ms' => 0.001]), 'whole ms, rounded up');
};

$tests['options read back from what get returns'] = function (Redis $r): void {
    $none = ['traceparent' => null, 'tracestate' => null];
    same(['expires_at_ms' => 36 * 36 - 1, 'timeout_ms' => 5000, 'group' => 'shop-17'] + $none, Producer::parseOptions(';ezz;t5000;gshop-17'));
    same(['expires_at_ms' => null, 'timeout_ms' => null, 'group' => 'ops'] + $none, Producer::parseOptions(';gops'));
    same(['expires_at_ms' => null, 'timeout_ms' => null, 'group' => null] + $none, Producer::parseOptions(''));
    same(
        ['expires_at_ms' => null, 'timeout_ms' => null, 'group' => null, 'traceparent' => '00-ab-cd-01', 'tracestate' => 'k=a;b:c%'],
        Producer::parseOptions(';p00-ab-cd-01;sk=a%3Bb%3Ac%25'),
    );
};

const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

$tests['a trace context round-trips, escaped, through the record'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $state = 'rojo=00f067aa0ba902b7,congo=a:b;c%d';
    $p->enqueue('orders', 'pay', ['id' => 't1', 'max_attempts' => 3, 'group' => 'g1', 'traceparent' => TP, 'tracestate' => $state]);
    $head = fn (string $id) => explode(':', (string) $r->hGet("$prefix:{orders}:jobs", $id))[0];
    same('3;gg1;p' . TP . ';srojo=00f067aa0ba902b7,congo=a%3Ab%3Bc%25d', $head('t1'));
    $info = $p->get('orders', 't1');
    same([TP, $state, 'g1'], [$info['traceparent'], $info['tracestate'], $info['group']]);
    // None given and no OpenTelemetry: nothing stored, no byte more.
    $p->enqueue('orders', 'pay', ['id' => 't2', 'max_attempts' => 3]);
    same('3', $head('t2'));
    same(null, $p->get('orders', 't2')['traceparent']);
};

$tests['the current OpenTelemetry context is taken when none is given'] = function (Redis $r): void {
    // A stand-in for open-telemetry/api's W3C propagator, which writes the
    // current context's headers into the carrier (here: while set).
    if (!class_exists('OpenTelemetry\\API\\Trace\\Propagation\\TraceContextPropagator')) {
        eval('namespace OpenTelemetry\\API\\Trace\\Propagation; final class TraceContextPropagator {
            public static ?array $current = null;
            public static function getInstance(): self { return new self(); }
            public function inject(&$carrier): void { if (self::$current !== null) { $carrier += self::$current; } }
        }');
    }
    $fake = 'OpenTelemetry\\API\\Trace\\Propagation\\TraceContextPropagator';
    $other = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $fake::$current = ['traceparent' => $other, 'tracestate' => 'k=v'];
    try {
        $p->enqueue('orders', 'x', ['id' => 'o1']);
        $p->enqueue('orders', 'x', ['id' => 'o2', 'traceparent' => TP]);
    } finally {
        $fake::$current = null;
    }
    $o1 = $p->get('orders', 'o1');
    $o2 = $p->get('orders', 'o2');
    same([$other, 'k=v'], [$o1['traceparent'], $o1['tracestate']]);
    same([TP, null], [$o2['traceparent'], $o2['tracestate']], 'a given one wins');
};

$tests['a resident job message carries the trace context'] = function (Redis $r): void {
    $job = \Punctual\Job::fromMessage(['id' => 'j', 'traceparent' => TP, 'tracestate' => 'k=v']);
    same([TP, 'k=v'], [$job->traceparent, $job->tracestate]);
    same(null, \Punctual\Job::fromMessage(['id' => 'j'])->traceparent);
};

// Needs the enqueue script of the `opts` branch.
$tests['options round-trip into the record'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $at = redis_now_ms($r) + 60000;
    $e = $p->enqueue('orders', 'pay', ['id' => 'o1', 'at_ms' => $at, 'max_attempts' => 3, 'expire_ms' => 3600000, 'timeout_ms' => 5000, 'group' => 'shop-17']);
    same('created', $e['status']);
    $head = fn (string $id) => explode(':', (string) $r->hGet("$prefix:{orders}:jobs", $id))[0];
    // x is stored as e<deadline in base 36>: the due time plus the window.
    same('3;e' . b36($at + 3600000) . ';t5000;gshop-17', $head('o1'));
    $info = $p->get('orders', 'o1');
    same(['pool', 3, $at, 'pay'], [$info['state'], $info['max_attempts'], $info['due_ms'], $info['payload']]);
    same([$at + 3600000, 5000, 'shop-17'], [$info['expires_at_ms'], $info['timeout_ms'], $info['group']]);
    $p->enqueue('orders', 'pay', ['id' => 'o2', 'at_ms' => $at, 'expire_ms' => 60000]);
    same(';e' . b36($at + 60000), $head('o2'));
    $p->enqueue('orders', 'pay', ['id' => 'o3', 'at_ms' => $at, 'max_attempts' => 4]);
    same('4', $head('o3'), 'without options the record is what it was');
    $o3 = $p->get('orders', 'o3');
    same([null, null, null], [$o3['expires_at_ms'], $o3['timeout_ms'], $o3['group']]);
};

$tests['scheduleAdd writes the documented JSON and publishes'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $l = new Listener("$prefix:{orders}:schedules");
    $before = redis_now_ms($r);
    $s = $p->scheduleAdd('orders', 'close-unpaid', [
        'cron' => '0 */5 * * * *', 'tz' => 'Europe/Berlin', 'payload' => '{"kind":"sweep"}', 'timeout_ms' => 60000, 'catch_up' => 'latest',
    ]);
    $after = redis_now_ms($r);
    same(['close-unpaid'], $l->take(1));
    $got = stored($r, $prefix, 'orders', 'close-unpaid');
    same($s, $got);
    check($before <= $got['created_ms'] && $got['created_ms'] <= $after, 'created_ms is Redis time');
    // Also the key order of PROTOCOL.md's example.
    same([
        'name' => 'close-unpaid', 'cron' => '0 */5 * * * *', 'tz' => 'Europe/Berlin', 'payload' => '{"kind":"sweep"}',
        'options' => ';t60000', 'catch_up' => 'latest', 'spread_ms' => null, 'paused' => false, 'created_ms' => $got['created_ms'],
    ], $got);
    $p->scheduleAdd('orders', 'tick.5s', [
        'every_ms' => 5000, 'payload' => 't', 'max_attempts' => 2, 'expire_ms' => 4000, 'group' => 'ops', 'catch_up' => 'spread', 'spread_ms' => 600000,
    ]);
    same(['tick.5s'], $l->take(1));
    $tick = stored($r, $prefix, 'orders', 'tick.5s');
    unset($tick['created_ms']);
    same(['name' => 'tick.5s', 'every_ms' => 5000, 'payload' => 't', 'options' => '2;x4000;gops', 'catch_up' => 'spread', 'spread_ms' => 600000, 'paused' => false], $tick);
    $p->scheduleAdd('orders', 'nightly', ['cron' => '0 3 * * *']);
    $n = stored($r, $prefix, 'orders', 'nightly');
    same(['UTC', '', '', 'all', false], [$n['tz'], $n['payload'], $n['options'], $n['catch_up'], $n['paused']]);
    same(['close-unpaid', 'nightly', 'tick.5s'], array_column($p->scheduleList('orders'), 'name'));
    // Only the topic's hash: nothing was enqueued, the clients fire nothing.
    same(["$prefix:{orders}:schedules"], $r->keys("$prefix:*"));
};

$tests['scheduleAdd again replaces it and keeps its creation time'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $first = $p->scheduleAdd('t', 's', ['every_ms' => 60000, 'payload' => 'a']);
    usleep(10000);
    $second = $p->scheduleAdd('t', 's', ['every_ms' => 30000, 'payload' => 'b', 'paused' => true]);
    same($first['created_ms'], $second['created_ms']);
    same($second, stored($r, $prefix, 't', 's'));
    same([30000, 'b', true], [$second['every_ms'], $second['payload'], $second['paused']]);
};

$tests['scheduleList, schedulePause, scheduleResume, scheduleRemove'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $p = new Producer($r, $prefix);
    $l = new Listener("$prefix:{t}:schedules");
    same([], $p->scheduleList('t'));
    $p->scheduleAdd('t', 'b', ['every_ms' => 1000]);
    $p->scheduleAdd('t', 'a', ['cron' => '*/10 * * * * *']);
    $p->scheduleAdd('t', '10', ['every_ms' => 1000]);
    same(['b', 'a', '10'], $l->take(3));
    $listed = $p->scheduleList('t');
    same(['10', 'a', 'b'], array_column($listed, 'name'));
    same(stored($r, $prefix, 't', 'a'), $listed[1]);
    same(true, $p->schedulePause('t', 'a'));
    same(['a'], $l->take(1));
    same(true, stored($r, $prefix, 't', 'a')['paused']);
    same(false, stored($r, $prefix, 't', 'b')['paused']);
    same(true, $p->scheduleResume('t', 'a'));
    same(['a'], $l->take(1));
    same(false, stored($r, $prefix, 't', 'a')['paused']);
    same(true, $p->scheduleRemove('t', 'a'));
    same(['a'], $l->take(1));
    same(null, stored($r, $prefix, 't', 'a'));
    same(['10', 'b'], array_column($p->scheduleList('t'), 'name'));
    // Unknown names: false, nothing written or published.
    same(false, $p->scheduleRemove('t', 'a'));
    same(false, $p->schedulePause('t', 'nope'));
    same(false, $p->scheduleResume('t', 'nope'));
    same([], $l->take(0));
    // The watermark of a removed schedule goes with it.
    $r->hSet("$prefix:{t}:schedules:last", 'b', '1000');
    same(true, $p->scheduleRemove('t', 'b'));
    same(false, $r->hExists("$prefix:{t}:schedules:last", 'b'));
    $threw = false;
    try {
        $p->schedulePause('t{x}', 'a');
    } catch (InvalidInput) {
        $threw = true;
    }
    check($threw, 'a bad topic is refused');
};

/**
 * Enqueues occurrences as punctual's firer does: id "name@o", due "a<o>",
 * through the enqueue script with the fired key; the watermark at the last.
 *
 * @param list<int> $occurrences
 */
function fire(Redis $r, Producer $p, string $prefix, string $topic, string $name, array $occurrences): void
{
    $k = $p->partitions($topic);
    foreach ($occurrences as $o) {
        $id = "$name@$o";
        $physical = $k <= 1 ? $topic : $topic . '#' . Producer::partitionOf($id, $k);
        $p->callFired('enqueue', $physical, [65536, 0, 1, $id, 'x', "a$o", '', '']);
    }
    $r->hSet("$prefix:{" . $topic . '}:schedules:last', $name, (string) max($occurrences));
}

/** @return list<string> the ids in every partition's P:{T}:fired */
function fired(Redis $r, Producer $p, string $prefix, string $topic): array
{
    $k = $p->partitions($topic);
    $ids = [];
    for ($i = 0; $i < $k; $i++) {
        $physical = $k <= 1 ? $topic : "$topic#$i";
        $ids = array_merge($ids, $r->zRange("$prefix:{" . $physical . '}:fired', 0, -1));
    }
    return $ids;
}

$tests['schedulePause and scheduleRemove take back the occurrences fired ahead'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $r->hSet("$prefix:partitions", 'hot', '3');
    $p = new Producer($r, $prefix);
    foreach (['t', 'hot'] as $topic) {
        $p->scheduleAdd($topic, 's', ['every_ms' => 1000]);
        $p->scheduleAdd($topic, 'other', ['every_ms' => 1000]);
        $now = redis_now_ms($r);
        $ahead = array_map(fn (int $i) => $now + 30000 + $i * 1000, range(0, 5));
        fire($r, $p, $prefix, $topic, 's', array_merge([$now - 5000], $ahead));
        fire($r, $p, $prefix, $topic, 'other', $ahead);
        same(true, $p->schedulePause($topic, 's'));
        foreach ($ahead as $o) {
            same(null, $p->get($topic, "s@$o"), "$topic: s@$o taken back");
            check($p->get($topic, "other@$o") !== null, "$topic: other@$o kept");
        }
        check($p->get($topic, 's@' . ($now - 5000)) !== null, 'already due: left alone');
        $fired = fired($r, $p, $prefix, $topic);
        foreach ($ahead as $o) {
            check(!in_array("s@$o", $fired, true), "s@$o left P:{T}:fired: it may fire again");
        }
        check(in_array('s@' . ($now - 5000), $fired, true), 'the due one stays in P:{T}:fired');
        $wm = (int) $r->hGet("$prefix:{" . $topic . '}:schedules:last', 's');
        check($wm >= $now && $wm < $ahead[0], "watermark lowered to now: $wm");
        same(true, $p->scheduleResume($topic, 's'));
        same(true, $p->scheduleRemove($topic, 'other'));
        foreach ($ahead as $o) {
            same(null, $p->get($topic, "other@$o"), "$topic: other@$o taken back");
        }
        same(0, $r->exists("$prefix:{" . $topic . '}:schedules:lock'));
        // A new timing takes back what the old one fired ahead.
        fire($r, $p, $prefix, $topic, 's', array_map(fn (int $o) => $o + 500, $ahead));
        $p->scheduleAdd($topic, 's', ['every_ms' => 1000]);
        check($p->get($topic, 's@' . ($ahead[0] + 500)) !== null, 'same timing: kept');
        $p->scheduleAdd($topic, 's', ['every_ms' => 2000]);
        same(null, $p->get($topic, 's@' . ($ahead[0] + 500)), 'new timing: taken back');
    }
};

$tests['a partitioned topic keeps its schedules under the topic'] = function (Redis $r): void {
    $prefix = fresh_prefix();
    $r->hSet("$prefix:partitions", 'hot', '3');
    $p = new Producer($r, $prefix);
    $p->scheduleAdd('hot', 's', ['every_ms' => 60000]);
    check(stored($r, $prefix, 'hot', 's') !== null, 'stored under the topic');
    same(['s'], array_column($p->scheduleList('hot'), 'name'));
};
