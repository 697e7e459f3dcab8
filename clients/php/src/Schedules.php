<?php

declare(strict_types=1);

namespace Punctual;

/**
 * Schedules: recurring jobs that `punctual serve` fires (docs/PROTOCOL.md,
 * "Schedules"; docs/decisions.md, "Recurring schedules"). The schedule
 * operations of a Producer (its schedule* methods).
 *
 * A client only writes and reads the definitions: a JSON object per name in
 * the HASH P:{T}:schedules, each change followed by
 * PUBLISH P:{T}:schedules <name> so the firers look at once. It fires
 * nothing: every `punctual serve` runs a firer that enqueues the
 * occurrences, exactly once across hosts, up to a minute ahead.
 *
 * A change takes the firers' lock (P:{T}:schedules:lock) as the Rust library
 * does, so no firer pass interleaves with it. Pause, remove and a change of
 * timing take back the occurrences fired ahead and not yet due with the
 * `unfire` script, and lower the watermark to now. The Rust library lists
 * them from the schedule's timing; a client has no cron parser, so it reads
 * them from P:{T}:fired (each partition's) instead: every occurrence fired
 * ahead was fired within the last minute, and its id `<name>@<ms>` names
 * its time.
 *
 * @internal
 */
final class Schedules
{
    public const MAX_NAME_LEN = 100;
    public const MIN_EVERY_MS = 1000;
    private const CATCH_UP = ['all', 'latest', 'skip', 'spread'];
    private const FIELDS = ['cron', 'every_ms', 'tz', 'payload', 'max_attempts', 'expire_ms', 'timeout_ms', 'group', 'catch_up', 'spread_ms', 'paused'];
    private const JSON = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_THROW_ON_ERROR;
    /** The firers' lock: held this long at most (SET NX PX), as the Rust library. */
    private const LOCK_MS = 10000;
    /**
     * How far back P:{T}:fired is read for occurrences fired ahead: a firer
     * enqueues an occurrence at most a minute (punctual::schedule::AHEAD)
     * before it; 5 minutes leave room for clocks of cluster nodes that differ.
     */
    private const FIRED_LOOKBACK_MS = 300000;
    /** How long fired marks live (7 days): the longest spread window take-back reads. */
    private const FIRED_KEEP_MS = 604800000;
    private const UNLOCK = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0";

    /**
     * @param \Closure(string): list<string> $physicals the partitions of a topic (or the topic)
     * @param \Closure(string, list<string>): int $unfire the unfire script on one of them
     */
    public function __construct(
        private readonly \Redis|\RedisCluster $redis,
        private readonly string $prefix,
        private readonly int $maxPayload,
        private readonly \Closure $physicals,
        private readonly \Closure $unfire,
    ) {
    }

    /** A schedule name: 1 to 100 bytes of [A-Za-z0-9_.-]. */
    public static function name(string $name): void
    {
        if (preg_match('/^[A-Za-z0-9_.-]{1,100}$/D', $name) !== 1) {
            throw new InvalidInput(sprintf('invalid schedule name %s: schedule names are 1 to %d bytes of letters, digits and _ . -', Validate::quote($name), self::MAX_NAME_LEN));
        }
    }

    /**
     * Checks a schedule; returns it as stored (PROTOCOL.md's key order), created_ms still 0.
     *
     * @param array<string, mixed> $spec
     * @return array<string, mixed>
     */
    public static function build(string $name, array $spec, int $maxPayload): array
    {
        foreach (array_keys($spec) as $k) {
            if (!in_array($k, self::FIELDS, true)) {
                throw new InvalidInput(sprintf('unknown schedule field %s; the fields are: %s', var_export($k, true), implode(', ', self::FIELDS)));
            }
        }
        $bad = static fn (string $why) => new InvalidInput(sprintf('schedule %s: %s', Validate::quote($name), $why));
        $cron = $spec['cron'] ?? null;
        $every = $spec['every_ms'] ?? null;
        $tz = $spec['tz'] ?? null;
        if (($cron === null) === ($every === null)) {
            throw $bad('give exactly one of a cron expression and an interval');
        }
        $s = ['name' => $name];
        if ($cron !== null) {
            if (!is_string($cron) || !in_array(count(preg_split('/\s+/', trim($cron))), [5, 6], true)) {
                throw new InvalidInput(sprintf('invalid cron %s: a cron expression has 5 fields, or 6 with seconds first', Validate::quote(is_string($cron) ? $cron : var_export($cron, true))));
            }
            $tz ??= 'UTC';
            if (!is_string($tz) || trim($tz) === '' || preg_match('/\s/', $tz) === 1) {
                throw new InvalidInput(sprintf('invalid time zone %s: give an IANA zone name such as Europe/Berlin', Validate::quote(is_string($tz) ? $tz : var_export($tz, true))));
            }
            $s['cron'] = $cron;
            $s['tz'] = $tz;
        } else {
            $ms = Validate::wholeMs($every);
            if ($ms === null) {
                throw new InvalidInput(sprintf('invalid interval %s: give milliseconds as a number', var_export($every, true)));
            }
            if ($ms < self::MIN_EVERY_MS || $ms > Validate::MAX_DELAY_MS) {
                throw new InvalidInput(sprintf('invalid interval %dms: an interval is at least %d ms and at most ten years', $ms, self::MIN_EVERY_MS));
            }
            if ($tz !== null) {
                throw $bad('a time zone is only for cron schedules');
            }
            $s['every_ms'] = $ms;
        }
        $catchUp = $spec['catch_up'] ?? 'all';
        if (!in_array($catchUp, self::CATCH_UP, true)) {
            throw new InvalidInput(sprintf('invalid catch-up %s: give all, latest, skip or spread', Validate::quote(is_string($catchUp) ? $catchUp : var_export($catchUp, true))));
        }
        $spread = null;
        if ($catchUp === 'spread') {
            if (($spec['spread_ms'] ?? null) === null) {
                throw $bad('catch-up spread needs a spread window (ms)');
            }
            $spread = Validate::wholeMs($spec['spread_ms']);
            if ($spread === null) {
                throw new InvalidInput(sprintf('invalid spread window %s: give milliseconds as a number', var_export($spec['spread_ms'], true)));
            }
            if ($spread < 1 || $spread > Validate::MAX_DELAY_MS) {
                throw new InvalidInput(sprintf('invalid spread window %dms: a spread window is at least 1 ms and at most ten years', $spread));
            }
        } elseif (($spec['spread_ms'] ?? null) !== null) {
            throw $bad('a spread window is only for catch-up spread');
        }
        $paused = $spec['paused'] ?? false;
        if (!is_bool($paused)) {
            throw new InvalidInput(sprintf('invalid paused %s: give true or false', var_export($paused, true)));
        }
        $options = Validate::options($spec);
        $payload = $spec['payload'] ?? '';
        if (!is_string($payload)) {
            throw new InvalidInput('payload must be a string (use json_encode for JSON)');
        }
        if (preg_match('//u', $payload) !== 1) {
            throw new InvalidInput("a schedule's payload must be UTF-8 text (it is stored in JSON)");
        }
        if (strlen($payload) > $maxPayload) {
            throw new InvalidInput(sprintf(
                'payload is %d bytes, over the %d-byte limit (raise max_payload or store the data elsewhere and enqueue a reference)',
                strlen($payload),
                $maxPayload,
            ));
        }
        return $s + ['payload' => $payload, 'options' => $options, 'catch_up' => $catchUp, 'spread_ms' => $spread, 'paused' => $paused, 'created_ms' => 0];
    }

    private function key(string $topic, string $suffix = ''): string
    {
        return $this->prefix . ':{' . $topic . '}:schedules' . $suffix;
    }

    /** Redis's clock, on the node of the topic's slot (RedisCluster::time() takes a key). */
    private function nowMs(string $topic): int
    {
        [$sec, $usec] = $this->redis instanceof \RedisCluster ? $this->redis->time($this->key($topic)) : $this->redis->time();
        return (int) $sec * 1000 + intdiv((int) $usec, 1000);
    }

    /** @return array<string, mixed> */
    private static function parse(string $name, string $raw): array
    {
        try {
            $s = json_decode($raw, true, 512, JSON_THROW_ON_ERROR);
        } catch (\JsonException) {
            $s = null;
        }
        return is_array($s) && !array_is_list($s) ? $s : ['name' => $name, 'unreadable' => $raw];
    }

    /** @return array<string, mixed>|null */
    private function read(string $topic, string $name): ?array
    {
        $raw = $this->redis->hGet($this->key($topic), $name);
        return is_string($raw) ? self::parse($name, $raw) : null;
    }

    /** @param array<string, mixed> $s */
    private function store(string $topic, array $s): void
    {
        $this->redis->hSet($this->key($topic), $s['name'], json_encode($s, self::JSON));
    }

    /**
     * Runs $change holding the firers' lock of $topic (waiting while a
     * firer's pass or another change holds it), then releases it.
     */
    private function locked(string $topic, callable $change): mixed
    {
        $key = $this->key($topic, ':lock');
        $token = bin2hex(random_bytes(8));
        $deadline = microtime(true) + (self::LOCK_MS + 2000) / 1000;
        while (!$this->redis->set($key, $token, ['nx', 'px' => self::LOCK_MS])) {
            if (microtime(true) > $deadline) {
                throw new \RuntimeException(sprintf("the schedules' lock %s stayed held for over %d s; try again", $key, intdiv(self::LOCK_MS, 1000) + 2));
            }
            usleep(20000);
        }
        try {
            return $change();
        } finally {
            try {
                $this->redis->eval(self::UNLOCK, [$key, $token], 1);
            } catch (\RedisException) {
                // it expires by itself
            }
        }
    }

    /**
     * Under the lock: takes back, with the unfire script, the occurrences of
     * schedule $name, $s (as stored: for a new timing, the old one) that are not
     * due yet, and lowers its watermark to now when it was ahead. Those are
     * the ones fired ahead (now < o <= watermark) and, for catch-up
     * `spread`, also the missed ones whose due time was spread ahead of
     * now: every `<name>@<digits>` marked in P:{T}:fired within the spread
     * window (at most the 7 days marks live) plus 5 minutes for the clocks
     * of nodes that differ (unfire leaves any already due alone), as
     * PROTOCOL.md's unfire section says. Returns how many were taken back.
     *
     * @param array<string, mixed> $s
     */
    private function takeBack(string $topic, string $name, array $s): int
    {
        $now = $this->nowMs($topic);
        $wm = $this->redis->hGet($this->key($topic, ':last'), $name);
        if (!is_string($wm) || !ctype_digit($wm)) {
            return 0;
        }
        $wm = (int) $wm;
        $spread = ($s['catch_up'] ?? null) === 'spread' && is_int($s['spread_ms'] ?? null);
        $since = $now - self::FIRED_LOOKBACK_MS - ($spread ? min((int) $s['spread_ms'], self::FIRED_KEEP_MS) : 0);
        $head = $name . '@';
        $removed = 0;
        foreach (($this->physicals)($topic) as $physical) {
            $fired = $this->prefix . ':{' . $physical . '}:fired';
            $ids = [];
            // Pages by score: each starts at the last page's highest score,
            // past the ids already read at it (an offset is walked entry by entry).
            $from = (string) $since;
            $fromScore = (float) $since;
            $skip = 0;
            do {
                $page = $this->redis->zRangeByScore($fired, $from, '+inf', ['withscores' => true, 'limit' => [$skip, Producer::MAX_BATCH]]) ?: [];
                $atLast = 0;
                $last = null;
                foreach ($page as $id => $score) {
                    $id = (string) $id; // a numeric member is an int key
                    $score = (float) $score;
                    $atLast = $score === $last ? $atLast + 1 : 1;
                    $last = $score;
                    $at = substr($id, strlen($head));
                    if (str_starts_with($id, $head) && ctype_digit($at) && ($spread || ((int) $at > $now && (int) $at <= $wm))) {
                        $ids[] = $id;
                    }
                }
                if ($last !== null) {
                    if ($last === $fromScore) {
                        $skip += $atLast;
                    } else {
                        [$from, $fromScore, $skip] = [(string) json_encode($last), $last, $atLast];
                    }
                }
            } while (count($page) === Producer::MAX_BATCH);
            foreach (array_chunk($ids, Producer::MAX_BATCH) as $chunk) {
                $removed += ($this->unfire)($physical, $chunk);
            }
        }
        if ($wm > $now) {
            $this->redis->hSet($this->key($topic, ':last'), $name, (string) $now);
        }
        return $removed;
    }

    /**
     * @param array<string, mixed> $spec
     * @return array<string, mixed>
     */
    public function add(string $topic, string $name, array $spec): array
    {
        Validate::topic($topic);
        self::name($name);
        $s = self::build($name, $spec, $this->maxPayload);
        $this->locked($topic, function () use ($topic, $name, &$s) {
            $old = $this->read($topic, $name);
            // A schedule written again keeps its creation time: the phase of
            // an interval, and the start of its watermark. A new timing takes
            // back what the old one fired ahead.
            $s['created_ms'] = is_int($old['created_ms'] ?? null) ? $old['created_ms'] : $this->nowMs($topic);
            if ($old !== null) {
                foreach (['cron', 'every_ms', 'tz'] as $f) {
                    if (($old[$f] ?? null) !== ($s[$f] ?? null)) {
                        $this->takeBack($topic, $name, $old);
                        break;
                    }
                }
            }
            $this->store($topic, $s);
        });
        $this->redis->publish($this->key($topic), $name);
        return $s;
    }

    /** @return list<array<string, mixed>> */
    public function list(string $topic): array
    {
        Validate::topic($topic);
        $out = [];
        foreach ($this->redis->hGetAll($this->key($topic)) ?: [] as $name => $raw) {
            $out[] = self::parse((string) $name, (string) $raw); // a numeric field name is an int key
        }
        usort($out, fn ($a, $b) => strcmp((string) $a['name'], (string) $b['name']));
        return $out;
    }

    public function setPaused(string $topic, string $name, bool $paused): bool
    {
        Validate::topic($topic);
        self::name($name);
        $found = $this->locked($topic, function () use ($topic, $name, $paused): bool {
            $s = $this->read($topic, $name);
            if ($s === null) {
                return false;
            }
            if (isset($s['unreadable'])) {
                throw new InvalidInput(sprintf('schedule %s is not readable JSON; add it again', Validate::quote($name)));
            }
            if ($paused) {
                $this->takeBack($topic, $name, $s);
            }
            $s['paused'] = $paused;
            $this->store($topic, $s);
            return true;
        });
        if ($found) {
            $this->redis->publish($this->key($topic), $name);
        }
        return $found;
    }

    public function remove(string $topic, string $name): bool
    {
        Validate::topic($topic);
        self::name($name);
        $found = $this->locked($topic, function () use ($topic, $name): bool {
            $s = $this->read($topic, $name);
            if ($s === null) {
                return false;
            }
            $this->takeBack($topic, $name, $s); // an unreadable one: as not spread
            $this->redis->hDel($this->key($topic), $name);
            $this->redis->hDel($this->key($topic, ':last'), $name);
            return true;
        });
        if ($found) {
            $this->redis->publish($this->key($topic), $name);
        }
        return $found;
    }
}
