<?php

declare(strict_types=1);

namespace Punctual;

/**
 * Enqueues and inspects punctual jobs from PHP, through punctual's own Lua
 * scripts (copies in ../lua, identical to `punctual script NAME`), called by
 * EVALSHA. On NOSCRIPT the script is sent once with EVAL, which also caches
 * it on the node that holds the keys (so this works on Redis Cluster too).
 * Input is checked before anything reaches Redis, with the Rust library's
 * messages.
 *
 *     $producer = new Punctual\Producer($redis);   // a connected \Redis or \RedisCluster
 *     $r = $producer->enqueue('orders', '{"order":10086}', ['id' => 'order:10086', 'delay_ms' => 1800000]);
 *     // ['id' => 'order:10086', 'status' => 'created']
 */
final class Producer
{
    public const DEFAULT_PREFIX = 'punctual';
    public const DEFAULT_MAX_PAYLOAD = 65536;
    public const MAX_BATCH = 1000;
    public const MAX_PARTITIONS = 1024;
    /** Rounds of routing anew after the script refuses a stale partition count. */
    private const STALE_ROUNDS = 5;
    /** The audit trail keeps this many entries, the newest (docs/PROTOCOL.md, "Audit trail"). */
    private const AUDIT_MAX_ENTRIES = 10000;
    private const KEYS = ['pool', 'ready', 'running', 'dead', 'jobs', 'meta', 'stats', 'seq', 'attempts'];
    /**
     * Status 4 ("fired before") comes only with the fired key, which only
     * punctual's schedule firer passes: here it is unknown, hence an error.
     */
    private const STATUS = [0 => 'duplicate', 1 => 'created', 2 => 'replaced', 3 => 'dead'];
    private const DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz';

    /** @var array<string, array{0: string, 1: string}> name => [text, sha1] */
    private array $scripts = [];
    /** @var array<string, true> */
    private array $registered = [];
    /** @var array<string, array{0: int, 1: float}> */
    private array $partitions = [];
    private ?Schedules $schedules = null;

    /** How long a call waits for a Redis that is loading its dataset (LOADING), at most. */
    public const LOADING_WAIT_S = 60.0;

    /**
     * @param \Redis|\RedisCluster $redis connected; its OPT_PREFIX, serializer
     *        and compression (Laravel's phpredis connection sets them) are set
     *        aside for punctual's calls, so its keys are exactly
     *        `$prefix:{T}:...` and payloads go as they are
     */
    public function __construct(
        private readonly \Redis|\RedisCluster $redis,
        private readonly string $prefix = self::DEFAULT_PREFIX,
        private readonly int $maxPayload = self::DEFAULT_MAX_PAYLOAD,
    ) {
        Validate::prefix($prefix);
        if ($maxPayload < 1) {
            throw new InvalidInput(sprintf('invalid max_payload %d: give a number of bytes (at least 1)', $maxPayload));
        }
    }

    /** The connection (with whatever options the caller set on it). */
    public function redis(): \Redis|\RedisCluster
    {
        return $this->redis;
    }

    /** The key prefix of punctual's keys (default 'punctual'). */
    public function prefix(): string
    {
        return $this->prefix;
    }

    /**
     * Runs $fn with the connection's OPT_PREFIX, serializer and compression
     * set aside (restored afterwards, also on an exception): punctual's keys
     * and payloads are exact bytes. A no-op for a connection without them.
     *
     * @template T
     * @param callable(): T $fn
     * @return T
     */
    public function bare(callable $fn): mixed
    {
        $saved = [];
        foreach (self::optionsSetAside() as $opt => $none) {
            $v = $this->redis->getOption($opt);
            if ($v !== $none && !($opt === \Redis::OPT_PREFIX && ($v === null || $v === false || $v === ''))) {
                $saved[$opt] = $v;
            }
        }
        if ($saved === []) {
            return $fn();
        }
        foreach ($saved as $opt => $_) {
            $this->redis->setOption($opt, self::optionsSetAside()[$opt]);
        }
        try {
            return $fn();
        } finally {
            foreach ($saved as $opt => $v) {
                $this->redis->setOption($opt, $v);
            }
        }
    }

    /** @return array<int, mixed> option => its "none" value */
    private static function optionsSetAside(): array
    {
        $o = [\Redis::OPT_PREFIX => '', \Redis::OPT_SERIALIZER => \Redis::SERIALIZER_NONE];
        if (defined('Redis::OPT_COMPRESSION')) {
            $o[\Redis::OPT_COMPRESSION] = \Redis::COMPRESSION_NONE;
        }
        return $o;
    }

    /** The nine keys of one topic (or partition `T#i`), in script order. @return list<string> */
    public function keys(string $topic): array
    {
        // Not "$prefix:{$topic}": that is PHP interpolation and drops the braces.
        return array_map(fn (string $n) => $this->prefix . ':{' . $topic . '}:' . $n, self::KEYS);
    }

    /**
     * EVALSHA of script $name with the nine keys of $topic (and, with
     * $fired, its tenth, P:{T}:fired).
     *
     * @param list<string|int> $argv
     */
    private function call(string $name, string $topic, array $argv, bool $fired = false): mixed
    {
        if (!isset($this->scripts[$name])) {
            $text = file_get_contents(__DIR__ . '/../lua/' . $name . '.lua');
            if ($text === false) {
                throw new \RuntimeException("punctual: cannot read lua/$name.lua");
            }
            $this->scripts[$name] = [$text, sha1($text)];
        }
        [$text, $sha] = $this->scripts[$name];
        $keys = $this->keys($topic);
        if ($fired) {
            $keys[] = $this->prefix . ':{' . $topic . '}:fired';
        }
        $args = array_merge($keys, array_map('strval', $argv));
        $n = count($keys);
        $reply = $this->attempt(fn () => $this->redis->evalSha($sha, $args, $n));
        if ($reply instanceof \Throwable && str_starts_with($reply->getMessage(), 'NOSCRIPT')) {
            // Empty script cache (restart, failover, SCRIPT FLUSH): EVAL runs
            // the text and caches it on the node that holds the keys.
            $reply = $this->attempt(fn () => $this->redis->eval($text, $args, $n));
        }
        if ($reply instanceof \Throwable) {
            if (str_starts_with($reply->getMessage(), 'PUNCTUAL_INVALID ')) {
                throw new InvalidInput(substr($reply->getMessage(), strlen('PUNCTUAL_INVALID ')));
            }
            throw $reply;
        }
        return $reply;
    }

    /**
     * Runs one script call. A Redis error reply is thrown as a
     * RedisException or returned as false with getLastError(), depending on
     * the phpredis version: either way it comes back as an exception object.
     * While Redis loads its dataset (LOADING, after a restart) the call is
     * sent again, backing off 100 ms doubling to 2 s, for up to
     * LOADING_WAIT_S: a loading Redis ran nothing, and an enqueue sent again
     * with its id is a duplicate at worst.
     */
    private function attempt(callable $fn): mixed
    {
        $deadline = microtime(true) + self::LOADING_WAIT_S;
        $pause = 0.1;
        while (true) {
            $reply = $this->bare(fn () => $this->attemptOnce($fn));
            if (!($reply instanceof \Throwable) || !str_starts_with($reply->getMessage(), 'LOADING')
                || microtime(true) + $pause > $deadline) {
                return $reply;
            }
            usleep((int) ($pause * 1e6));
            $pause = min(2.0, $pause * 2);
        }
    }

    /** One plain command, as attempt() sends it; an error reply is thrown. */
    private function command(callable $fn): mixed
    {
        $reply = $this->attempt($fn);
        if ($reply instanceof \Throwable) {
            throw $reply;
        }
        return $reply;
    }

    private function attemptOnce(callable $fn): mixed
    {
        $this->redis->clearLastError();
        try {
            $reply = $fn();
        } catch (\RedisException $e) {
            return $e;
        }
        $error = $this->redis->getLastError();
        if ($reply === false && $error !== null && $error !== '') {
            $this->redis->clearLastError();
            return new \RedisException($error);
        }
        return $reply;
    }

    /** How many partitions $topic has (1: not partitioned); cached for 1 s. */
    public function partitions(string $topic): int
    {
        Validate::topic($topic);
        $hit = $this->partitions[$topic] ?? null;
        if ($hit !== null && microtime(true) - $hit[1] < 1.0) {
            return $hit[0];
        }
        $v = $this->command(fn () => $this->redis->hGet($this->prefix . ':partitions', $topic));
        $k = ($v === false || $v === null) ? 1 : min(self::MAX_PARTITIONS, max(1, (int) $v));
        $this->partitions[$topic] = [$k, microtime(true)];
        return $k;
    }

    /** The partition of $id among $k: IEEE CRC-32 of its bytes mod k. */
    public static function partitionOf(string $id, int $k): int
    {
        return $k <= 1 ? 0 : crc32($id) % $k; // 64-bit PHP: crc32() is non-negative
    }

    /** The name of an enqueue status; an unknown one is an error, never taken for "created". */
    private static function status(mixed $code): string
    {
        $name = self::STATUS[(int) $code] ?? null;
        if ($name === null) {
            throw new \RuntimeException("enqueue returned an unknown status $code");
        }
        return $name;
    }

    private static function partitionName(string $topic, int $i, int $k): string
    {
        return $k <= 1 ? $topic : $topic . '#' . $i;
    }

    /** An id for a partitioned topic: 9 base-36 digits of the time in ms, 12 random ones. */
    public static function generateId(): string
    {
        $ms = (int) floor(microtime(true) * 1000);
        $head = '';
        for ($i = 0; $i < 9; $i++) {
            $head = self::DIGITS[$ms % 36] . $head;
            $ms = intdiv($ms, 36);
        }
        for ($i = 0; $i < 12; $i++) {
            $head .= self::DIGITS[random_int(0, 35)];
        }
        return $head;
    }

    /**
     * The script calls for the jobs $pending (indexes into $encoded): per
     * partition (of $k), at most 1,000 each. A partitioned topic's missing ids
     * are made here, since the id picks the partition.
     *
     * @param list<int> $pending
     * @param array<int, array{0: ?string, 1: string, 2: string, 3: string, 4: string}> $encoded
     * @return list<array{0: string, 1: list<int>}>
     */
    private static function groups(string $topic, int $k, array $pending, array &$encoded): array
    {
        $groups = [];
        if ($k <= 1) {
            foreach (array_chunk($pending, self::MAX_BATCH) as $chunk) {
                $groups[] = [$topic, $chunk];
            }
            return $groups;
        }
        $byPart = [];
        foreach ($pending as $i) {
            $encoded[$i][0] ??= self::generateId();
            $byPart[self::partitionOf($encoded[$i][0], $k)][] = $i;
        }
        ksort($byPart);
        foreach ($byPart as $p => $idx) {
            foreach (array_chunk($idx, self::MAX_BATCH) as $chunk) {
                $groups[] = [self::partitionName($topic, $p, $k), $chunk];
            }
        }
        return $groups;
    }

    private function route(string $topic, string $id): string
    {
        $k = $this->partitions($topic);
        return self::partitionName($topic, self::partitionOf($id, $k), $k);
    }

    /**
     * Enqueues one job: due now, 'delay_ms' after Redis gets it, or at
     * 'at_ms' (epoch ms, Redis clock). Options: 'id' (default: generated),
     * 'delay_ms', 'at_ms', 'max_attempts', 'backoff_ms' (list of ms),
     * 'replace' (replace a live job of that id instead of reporting a
     * duplicate), and the per-job options (docs/PROTOCOL.md, "Per-job
     * options"): 'expire_ms' (1 ms to ten years: the job may start only
     * until its due time plus this, later it goes to dead unrun),
     * 'timeout_ms' (same range: the handler timeout for this job instead of
     * the topic's), 'group' (1 to 64 bytes of [A-Za-z0-9_.@-]: the group it
     * is served fairly in), 'traceparent' and 'tracestate' (W3C Trace
     * Context: the producer's trace, handed to every attempt's handler;
     * without them, the current OpenTelemetry context's when
     * open-telemetry/api is installed and a span is active).
     *
     * @param array<string, mixed> $options
     * @return array{id: string, status: string} status: created, duplicate, replaced
     *     or dead (the id is in the dead-letter set: nothing changed, so this job
     *     will not run; replay the dead one or enqueue with 'replace' => true)
     */
    public function enqueue(string $topic, string $payload, array $options = []): array
    {
        $replace = (bool) ($options['replace'] ?? false);
        unset($options['replace']);
        return $this->enqueueBatch($topic, [['payload' => $payload] + $options], $replace)[0];
    }

    /**
     * Enqueues jobs, each an array with 'payload' and the options of
     * enqueue(): one atomic script call per 1,000 jobs (per partition).
     * Every job is checked before anything is written. An id given twice:
     * the first wins, the others are reported as duplicates.
     *
     * @param list<array<string, mixed>> $jobs
     * @return list<array{id: string, status: string}>
     */
    public function enqueueBatch(string $topic, array $jobs, bool $replace = false): array
    {
        Validate::topic($topic);
        $jobs = array_values($jobs);
        if ($jobs === []) {
            return [];
        }
        $encoded = [];
        foreach ($jobs as $i => $job) {
            try {
                $encoded[] = Validate::job($job, $this->maxPayload);
            } catch (InvalidInput $e) {
                throw count($jobs) > 1 ? new InvalidInput('job ' . ($i + 1) . ': ' . $e->getMessage()) : $e;
            }
        }
        $placed = array_fill(0, count($jobs), null);
        $first = [];
        foreach ($encoded as $i => [$id]) {
            if ($id !== null) {
                if (isset($first[$id])) {
                    $placed[$i] = ['id' => $id, 'status' => 'duplicate'];
                } else {
                    $first[$id] = $i;
                }
            }
        }
        $pending = array_keys(array_filter($placed, fn ($p) => $p === null));
        $failed = [];
        $firstError = null;
        $rounds = 0;
        $accepted = false;
        while ($pending !== []) {
            $rounds++;
            $k = $this->partitions($topic);
            $stale = [];
            foreach (self::groups($topic, $k, $pending, $encoded) as [$physical, $idx]) {
                try {
                    foreach ($this->enqueueCall($physical, $k, $replace, $idx, $encoded) as $n => $result) {
                        $placed[$idx[$n]] = $result;
                    }
                    $accepted = true;
                } catch (\Throwable $e) {
                    if (str_starts_with($e->getMessage(), 'PUNCTUAL_STALE') && $rounds < self::STALE_ROUNDS) {
                        array_push($stale, ...$idx);
                    } else {
                        array_push($failed, ...$idx);
                        $firstError ??= $e;
                    }
                }
            }
            sort($stale);
            $pending = $stale;
            if ($pending !== []) {
                // The partition count changed since it was read: read it
                // again and route those jobs anew.
                unset($this->partitions[$topic]);
                usleep(20000 * $rounds);
            }
        }
        if ($accepted && !isset($this->registered[$topic])) {
            // Listed only once a script took a job: a refused call changes nothing.
            $this->command(fn () => $this->redis->sAdd($this->prefix . ':topics', $topic));
            $this->registered[$topic] = true;
        }
        if ($firstError !== null) {
            $written = array_filter($placed, fn ($p) => $p !== null);
            if (array_filter($written, fn ($p) => $p['status'] !== 'duplicate' && $p['status'] !== 'dead') === []) {
                throw $firstError;
            }
            sort($failed);
            throw new PartialBatch(count($jobs), $written, $failed, $firstError);
        }
        return $placed;
    }

    /**
     * One call of the enqueue script for the jobs $idx, in the form the
     * Rust library sends for the same jobs (docs/PROTOCOL.md "enqueue"):
     * one job, or jobs that differ in max attempts or backoff, in the
     * five-argument form; jobs alike in all but id and payload in the
     * shared form `=n` (their when, max attempts and backoff once), jobs
     * alike in max attempts and backoff in `~n`; `=*n`, `~*n` when every id
     * is to be generated. Returns the results in the order of $idx.
     *
     * @param list<int> $idx
     * @param array<int, array{0: ?string, 1: string, 2: string, 3: string, 4: string}> $encoded
     * @return list<array{id: string, status: string}>
     */
    private function enqueueCall(string $physical, int $k, bool $replace, array $idx, array $encoded): array
    {
        $n = count($idx);
        $first = $encoded[$idx[0]];
        $sameWhen = true;
        $sameRest = true;
        $genAll = true;
        foreach ($idx as $i) {
            $e = $encoded[$i];
            $sameWhen = $sameWhen && (string) $e[2] === (string) $first[2];
            $sameRest = $sameRest && (string) $e[3] === (string) $first[3] && (string) $e[4] === (string) $first[4];
            $genAll = $genAll && $e[0] === null;
        }
        $form = $n > 1 && $sameRest ? ($sameWhen ? '=' : '~') : null;
        $argv = [$this->maxPayload, $replace ? '1' : '0'];
        if ($form === null) {
            $argv[] = $n;
            foreach ($idx as $i) {
                [$id, $payload, $when, $max, $backoff] = $encoded[$i];
                array_push($argv, $id ?? '', $payload, $when, $max, $backoff);
            }
        } else {
            $argv[] = $form . ($genAll ? '*' : '') . $n;
            if ($form === '=') {
                $argv[] = $first[2];
            }
            array_push($argv, $first[3], $first[4]);
            foreach ($idx as $i) {
                if (!$genAll) {
                    $argv[] = $encoded[$i][0] ?? '';
                }
                $argv[] = $encoded[$i][1];
                if ($form === '~') {
                    $argv[] = $encoded[$i][2];
                }
            }
        }
        // The count routed with goes last: the script refuses the call
        // (PUNCTUAL_STALE, nothing written) when the topic has another.
        $argv[] = $k;
        $reply = $this->call('enqueue', $physical, $argv);
        $bad = fn (string $why) => new \UnexpectedValueException("unexpected reply from Redis to enqueue: $why");
        if (!is_array($reply)) {
            throw $bad('an array expected');
        }
        $reply = array_values($reply);
        if ($form === null) {
            if (count($reply) !== 2 * $n) {
                throw $bad('one result per job expected');
            }
            $out = [];
            for ($j = 0; $j < $n; $j++) {
                $out[] = ['id' => (string) $reply[2 * $j], 'status' => self::status($reply[2 * $j + 1])];
            }
            return $out;
        }
        // Shared forms: k, k ids (n when one was generated, 0 when all were
        // given), then pairs j, status for the jobs not created; or, all
        // generated, -1 and the first id, the others following it.
        $count = (int) ($reply[0] ?? 0);
        if ($count === -1 && $genAll) {
            if (count($reply) !== 2) {
                throw $bad('more after the first id');
            }
            return array_map(fn (string $id) => ['id' => $id, 'status' => 'created'], self::followingIds((string) $reply[1], $n));
        }
        if (($count !== 0 && $count !== $n) || count($reply) < 1 + $count || (count($reply) - 1 - $count) % 2 !== 0) {
            throw $bad('one id per job expected');
        }
        $out = [];
        foreach ($idx as $j => $i) {
            if ($count === 0 && $encoded[$i][0] === null) {
                throw $bad('no ids returned for generated ones');
            }
            $out[] = ['id' => $count === 0 ? (string) $encoded[$i][0] : (string) $reply[1 + $j], 'status' => 'created'];
        }
        for ($p = 1 + $count; $p < count($reply); $p += 2) {
            $j = (int) $reply[$p] - 1;
            if (!isset($out[$j])) {
                throw $bad('a status for no job');
            }
            $out[$j]['status'] = self::status($reply[$p + 1]);
        }
        return $out;
    }

    /**
     * The ids the enqueue script generated for $n jobs from $first on, when
     * it skipped none: each the one before with its last four base-36
     * digits counted up by one, modulo 36^4 (docs/PROTOCOL.md "enqueue").
     *
     * @return list<string>
     */
    private static function followingIds(string $first, int $n): array
    {
        $digits = '0123456789abcdefghijklmnopqrstuvwxyz';
        $last = substr($first, -4);
        if (strlen($first) < 4 || strspn($last, $digits) !== 4) {
            throw new \UnexpectedValueException("unexpected reply from Redis to enqueue: \"$first\" is not a generated id");
        }
        $stamp = substr($first, 0, -4);
        $v = (int) base_convert($last, 36, 10);
        $ids = [];
        for ($j = 0; $j < $n; $j++) {
            $ids[] = $stamp . str_pad(base_convert((string) (($v + $j) % 1679616), 10, 36), 4, '0', STR_PAD_LEFT);
        }
        return $ids;
    }

    /**
     * One job by id, or null when no such job is live. Keys: id, state
     * (pool, ready, running, dead; orphan: a broken invariant), attempts,
     * max_attempts, due_ms, created_ms, state_since_ms (lease deadline when
     * running, time of death when dead, else null), last_error (null if
     * none), payload, now_ms (Redis's clock), and the per-job options:
     * expires_at_ms (the expiry deadline), timeout_ms, group (null when not
     * set, or when the get script is older than options).
     *
     * @return array<string, mixed>|null
     */
    public function get(string $topic, string $id): ?array
    {
        Validate::topic($topic);
        Validate::id($id);
        $r = $this->call('get', $this->route($topic, $id), [$id]);
        if (!is_array($r)) {
            return null;
        }
        $state = (string) $r[0];
        $err = (string) $r[8];
        return [
            'id' => $id,
            'state' => $state,
            'attempts' => (int) $r[2],
            'max_attempts' => (int) $r[3],
            'due_ms' => (int) $r[5],
            'created_ms' => (int) $r[6],
            'state_since_ms' => in_array($state, ['running', 'dead'], true) ? (int) $r[1] : null,
            'last_error' => $err === '' ? null : $err,
            'payload' => (string) $r[9],
            'now_ms' => (int) $r[10],
        ] + self::parseOptions(isset($r[11]) && is_string($r[11]) ? $r[11] : '');
    }

    /**
     * The options part of a record's first field as `get` returns it
     * (`;e<deadline base 36>;t<ms>;g<group>;p<traceparent>;s<tracestate>`,
     * or ''): expires_at_ms, timeout_ms, group, traceparent, tracestate,
     * null where not set.
     *
     * @return array{expires_at_ms: ?int, timeout_ms: ?int, group: ?string, traceparent: ?string, tracestate: ?string}
     */
    public static function parseOptions(string $text): array
    {
        $out = ['expires_at_ms' => null, 'timeout_ms' => null, 'group' => null, 'traceparent' => null, 'tracestate' => null];
        foreach (array_slice(explode(';', $text), 1) as $part) {
            $letter = substr($part, 0, 1);
            $value = substr($part, 1);
            if ($letter === 'e' && preg_match('/^[0-9a-z]+$/D', $value) === 1) {
                $out['expires_at_ms'] = intval($value, 36);
            } elseif ($letter === 't' && ctype_digit($value)) {
                $out['timeout_ms'] = (int) $value;
            } elseif ($letter === 'g' && $value !== '') {
                $out['group'] = $value;
            } elseif ($letter === 'p' && $value !== '') {
                $out['traceparent'] = $value;
            } elseif ($letter === 's' && $value !== '') {
                $out['tracestate'] = (string) preg_replace_callback(
                    '/%([0-9A-Fa-f]{2})/',
                    fn (array $m) => chr((int) hexdec($m[1])),
                    $value,
                );
            }
        }
        return $out;
    }

    /**
     * Cancels a job in any state: the state it was in, or null when it was
     * not live. A running job is stopped in flight: the worker holding it,
     * on any host, is told at once (docs/RESIDENT.md, "Cancel"). A cancel
     * that found the job is recorded in the audit trail (`punctual audit`)
     * as the CLI's is: who is $by (default 'php'), from this host and pid;
     * a failed record is a line in the error log, and the cancel stands.
     */
    public function cancel(string $topic, string $id, ?string $by = null): ?string
    {
        Validate::topic($topic);
        Validate::id($id);
        $r = $this->call('cancel', $this->route($topic, $id), [$id]);
        if (!is_string($r)) {
            return null; // nothing changed: not recorded
        }
        $this->audit($by, 'cancel', $topic, ['id' => $id, 'was' => $r]);
        return $r;
    }

    /**
     * Appends an entry to the audit trail (docs/PROTOCOL.md, "Audit
     * trail"), as the CLI does: LPUSH and LTRIM in one MULTI, one round
     * trip. A failure is logged, not thrown: the change is made.
     *
     * @param array<string, mixed> $detail
     */
    private function audit(?string $by, string $action, string $topic, array $detail): void
    {
        $entry = json_encode([
            'at_ms' => (int) floor(microtime(true) * 1000),
            'who' => $by === null || $by === '' ? 'php' : $by,
            'from' => gethostname() . '/' . getmypid(),
            'action' => $action,
            'topic' => $topic,
            'detail' => $detail,
        ], JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE | JSON_THROW_ON_ERROR);
        $key = $this->prefix . ':audit';
        $reply = $this->attempt(fn () => $this->redis->multi()
            ->lPush($key, $entry)
            ->lTrim($key, 0, self::AUDIT_MAX_ENTRIES - 1)
            ->exec());
        if ($reply instanceof \Throwable || !is_array($reply)) {
            error_log(sprintf('punctual: the %s of job %s of %s was made, but the audit trail could not record it: %s',
                $action, $detail['id'] ?? '-', $topic,
                $reply instanceof \Throwable ? $reply->getMessage() : 'MULTI failed'));
        }
    }

    /**
     * Gives a waiting job (pool or ready) a new due time: 'delay_ms' or
     * 'at_ms', now when neither. Returns the state it was in; a running or
     * dead job is left alone and its state returned; null when not live.
     *
     * @param array{delay_ms?: int, at_ms?: int} $when
     */
    public function reschedule(string $topic, string $id, array $when = []): ?string
    {
        Validate::topic($topic);
        Validate::id($id);
        $w = Validate::when($when['delay_ms'] ?? null, $when['at_ms'] ?? null);
        $r = $this->call('reschedule', $this->route($topic, $id), [$id, $w]);
        return is_array($r) ? (string) $r[0] : null;
    }

    // ---- schedules (docs/PROTOCOL.md, "Schedules") ----------------------

    private function schedules(): Schedules
    {
        return $this->schedules ??= new Schedules(
            $this->redis,
            $this->prefix,
            $this->maxPayload,
            fn (string $topic): array => array_map(
                fn (int $i) => self::partitionName($topic, $i, $this->partitions($topic)),
                range(0, $this->partitions($topic) - 1),
            ),
            fn (string $physical, array $ids): int => (int) $this->call('unfire', $physical, $ids, true),
        );
    }

    /**
     * Runs one of this package's scripts (lua/NAME.lua) with the nine keys
     * of $physical (a topic or a partition `T#i`): for the Laravel
     * connector's pop (claim, ack, fail).
     *
     * @internal
     * @param list<string|int> $argv
     */
    public function script(string $name, string $physical, array $argv): mixed
    {
        return $this->call($name, $physical, $argv);
    }

    /**
     * For tests: runs script $name with the nine keys of $physical and its
     * fired key, as punctual's schedule firer does.
     *
     * @internal
     * @param list<string|int> $argv
     */
    public function callFired(string $name, string $physical, array $argv): mixed
    {
        return $this->call($name, $physical, $argv, true);
    }

    /**
     * Adds or replaces the schedule $name of $topic (not a partition);
     * returns it as stored. $spec: exactly one of 'cron' (5 fields, or 6
     * with seconds first; its syntax is checked by `punctual serve`, which
     * fires it) with 'tz' (an IANA zone, default UTC) and 'every_ms' (at
     * least 1000); 'payload' (UTF-8 text, default ''); 'max_attempts',
     * 'expire_ms', 'timeout_ms', 'group' (as for enqueue); 'catch_up'
     * ('all' (default), 'latest', 'skip', or 'spread' with 'spread_ms');
     * 'paused' (default false). Each occurrence is a job with id
     * `<name>@<occurrence ms>`. A schedule added again keeps its creation
     * time. This client fires nothing.
     *
     * @param array<string, mixed> $spec
     * @return array<string, mixed>
     */
    public function scheduleAdd(string $topic, string $name, array $spec): array
    {
        return $this->bare(fn () => $this->schedules()->add($topic, $name, $spec));
    }

    /**
     * The schedules of $topic as stored, by name (['name', 'unreadable'] for
     * an entry that is not a JSON object).
     *
     * @return list<array<string, mixed>>
     */
    public function scheduleList(string $topic): array
    {
        return $this->bare(fn () => $this->schedules()->list($topic));
    }

    /**
     * Removes a schedule (and its watermark); false when there was none.
     * Occurrences already enqueued stay: cancel them by id (`<name>@<ms>`).
     */
    public function scheduleRemove(string $topic, string $name): bool
    {
        return $this->bare(fn () => $this->schedules()->remove($topic, $name));
    }

    /** Pauses a schedule: it fires nothing until resumed. False when there is none. */
    public function schedulePause(string $topic, string $name): bool
    {
        return $this->bare(fn () => $this->schedules()->setPaused($topic, $name, true));
    }

    /** Resumes a schedule (the firer applies its catch-up policy to what was missed). False when there is none. */
    public function scheduleResume(string $topic, string $name): bool
    {
        return $this->bare(fn () => $this->schedules()->setPaused($topic, $name, false));
    }
}
