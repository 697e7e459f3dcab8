<?php

declare(strict_types=1);

namespace Punctual;

/**
 * The checks the Rust library makes before anything reaches Redis, with its
 * messages (crates/punctual/src/keys.rs, job.rs, queue.rs).
 *
 * @internal
 */
final class Validate
{
    public const MAX_TOPIC_LEN = 100;
    public const MAX_ID_LEN = 200;
    public const MAX_DELAY_MS = 315360000000; // ten years
    public const MAX_ATTEMPTS = 10000;
    public const MAX_GROUP_LEN = 64;

    /**
     * Characters that show nothing or reorder text (bidi controls and
     * isolates, zero-width characters, the byte order mark, ...): the
     * library's is_invisible (crates/punctual/src/keys.rs), which the enqueue
     * script refuses too. As a PCRE class (with the u flag).
     */
    private const INVISIBLE = '[\\x{AD}\\x{600}-\\x{605}\\x{61C}\\x{6DD}\\x{70F}\\x{115F}\\x{1160}\\x{180E}'
        . '\\x{200B}-\\x{200F}\\x{202A}-\\x{202E}\\x{2060}-\\x{206F}\\x{3164}\\x{FEFF}\\x{FFA0}'
        . '\\x{FFF9}-\\x{FFFB}\\x{110BD}\\x{110CD}\\x{1D173}-\\x{1D17A}\\x{E0000}-\\x{E007F}]';

    /** A string quoted as Rust's `{:?}` does, so messages match the CLI's. */
    public static function quote(string $s): string
    {
        $out = '"';
        $n = strlen($s);
        $utf8 = preg_match('//u', $s) === 1;
        for ($i = 0; $i < $n; $i++) {
            $c = $s[$i];
            $o = ord($c);
            if ($c === '"' || $c === '\\') {
                $out .= '\\' . $c;
            } elseif ($c === "\n") {
                $out .= '\n';
            } elseif ($c === "\r") {
                $out .= '\r';
            } elseif ($c === "\t") {
                $out .= '\t';
            } elseif ($o === 0) {
                $out .= '\0';
            } elseif ($o < 0x20 || $o === 0x7f) {
                $out .= sprintf('\u{%x}', $o);
            } elseif ($o >= 0xc2 && $o <= 0xf4 && $utf8
                && preg_match('/\G[\x{80}-\x{10FFFF}]/u', $s, $m, 0, $i) === 1) {
                // What Rust's {:?} writes as \u{...}: control, format,
                // separator, private-use and unassigned characters.
                $ch = $m[0];
                $i += strlen($ch) - 1;
                $out .= preg_match('/^[\p{Cc}\p{Cf}\p{Z}\p{Co}\p{Cn}]$/u', $ch) === 1
                    ? sprintf('\u{%x}', self::codePoint($ch))
                    : $ch;
            } elseif (!$utf8 && $o === 0xc2 && $i + 1 < $n && ord($s[$i + 1]) >= 0x80 && ord($s[$i + 1]) <= 0x9f) {
                $out .= sprintf('\u{%x}', ord($s[++$i])); // C1 control, U+0080..U+009F
            } else {
                $out .= $c;
            }
        }
        return $out . '"';
    }

    /** The code point of one UTF-8 character. */
    private static function codePoint(string $ch): int
    {
        $b = array_values(unpack('C*', $ch));
        return match (count($b)) {
            1 => $b[0],
            2 => (($b[0] & 0x1f) << 6) | ($b[1] & 0x3f),
            3 => (($b[0] & 0x0f) << 12) | (($b[1] & 0x3f) << 6) | ($b[2] & 0x3f),
            default => (($b[0] & 0x07) << 18) | (($b[1] & 0x3f) << 12) | (($b[2] & 0x3f) << 6) | ($b[3] & 0x3f),
        };
    }

    private static function hasControl(string $s): bool
    {
        return preg_match('/[\x00-\x1f\x7f]|\xc2[\x80-\x9f]/', $s) === 1;
    }

    public static function topic(string $topic): void
    {
        $bad = static fn (string $why) => new InvalidInput(sprintf('invalid topic %s: %s', self::quote($topic), $why));
        if ($topic === '') {
            throw $bad('topic names may not be empty');
        }
        if (strlen($topic) > self::MAX_TOPIC_LEN) {
            throw $bad('topic names are at most ' . self::MAX_TOPIC_LEN . ' bytes');
        }
        if (strpbrk($topic, '{}') !== false) {
            throw $bad('topic names may not contain braces');
        }
        if (str_contains($topic, '#')) {
            throw $bad("'#' is reserved for partitions");
        }
        // Unicode White_Space and control characters (Rust's is_whitespace, is_control).
        if (self::hasControl($topic) || preg_match('/[\s\p{Z}]/u', $topic) === 1) {
            throw $bad('topic names may not contain spaces or control characters');
        }
        if (preg_match('//u', $topic) !== 1) {
            throw $bad('topic names must be UTF-8');
        }
        if (preg_match('/' . self::INVISIBLE . '/u', $topic, $m) === 1) {
            throw $bad(sprintf(
                'topic names may not contain invisible or bidirectional formatting characters (U+%04X)',
                self::codePoint($m[0]),
            ));
        }
    }

    public static function id(string $id): void
    {
        if ($id === '') {
            throw new InvalidInput('invalid id "": ids may not be empty (leave the id out to have one generated)');
        }
        if (preg_match('//u', $id) !== 1) {
            throw new InvalidInput('invalid id: ids must be valid UTF-8');
        }
        if (strlen($id) > self::MAX_ID_LEN) {
            throw new InvalidInput(sprintf('invalid id: %d bytes, ids are at most %d bytes', strlen($id), self::MAX_ID_LEN));
        }
        if (self::hasControl($id)) {
            throw new InvalidInput(sprintf('invalid id %s: ids may not contain control characters', self::quote($id)));
        }
    }

    public static function prefix(string $prefix): void
    {
        if ($prefix === '' || strpbrk($prefix, '{}') !== false) {
            throw new InvalidInput(sprintf('invalid prefix %s: prefixes must be non-empty and may not contain braces', self::quote($prefix)));
        }
    }

    /**
     * Milliseconds as a whole number: an int as it is, a finite float rounded
     * up (1.5 -> 2, so a job is never due early), else null. The scripts take
     * plain decimal digits only, so "1.5E+3" or "60000.0" never reach Redis.
     */
    public static function wholeMs(mixed $v): ?int
    {
        if (is_int($v)) {
            return $v;
        }
        if (is_float($v) && is_finite($v) && abs($v) < 9.0e15) {
            return (int) ceil($v);
        }
        return null;
    }

    /** The script's encoding of a due time: `d<ms>` or `a<epoch ms>`. */
    public static function when(mixed $delayMs, mixed $atMs): string
    {
        if ($delayMs !== null && $atMs !== null) {
            throw new InvalidInput('give a delay or a due time, not both');
        }
        if ($atMs !== null) {
            $ms = self::wholeMs($atMs);
            if ($ms === null) {
                throw new InvalidInput(sprintf('invalid due time %s: give epoch milliseconds as a number', var_export($atMs, true)));
            }
            $atMs = $ms;
            if ($atMs < 0) {
                throw new InvalidInput('invalid due time: before 1970; give a time after the epoch');
            }
            return 'a' . $atMs;
        }
        if ($delayMs === null) {
            return 'd0';
        }
        $ms = self::wholeMs($delayMs);
        if ($ms === null) {
            throw new InvalidInput(sprintf('invalid delay %s: give milliseconds as a number', var_export($delayMs, true)));
        }
        $delayMs = $ms;
        if ($delayMs < 0) {
            throw new InvalidInput(sprintf('invalid delay %dms: delays may not be negative', $delayMs));
        }
        if ($delayMs > self::MAX_DELAY_MS) {
            throw new InvalidInput(sprintf('invalid delay %ds: delays are at most ten years', intdiv($delayMs, 1000)));
        }
        return 'd' . $delayMs;
    }

    /** An expiry or a timeout: whole ms (rounded up), 1 ms to ten years. */
    private static function windowMs(string $what, string $article, mixed $given): int
    {
        $ms = self::wholeMs($given);
        if ($ms === null) {
            throw new InvalidInput(sprintf('invalid %s %s: give milliseconds as a number', $what, var_export($given, true)));
        }
        if ($ms < 1 || $ms > self::MAX_DELAY_MS) {
            throw new InvalidInput(sprintf('invalid %s %dms: %s %s is at least 1 ms and at most ten years', $what, $ms, $article, $what));
        }
        return $ms;
    }

    /** A group name: 1 to 64 bytes of [A-Za-z0-9_.@-]. */
    public static function group(mixed $group): void
    {
        if (!is_string($group)) {
            throw new InvalidInput(sprintf('invalid group %s: give a string', var_export($group, true)));
        }
        if (preg_match('/^[A-Za-z0-9_.@-]{1,64}$/D', $group) !== 1) {
            throw new InvalidInput(sprintf('invalid group %s: a group is 1 to %d bytes of ASCII letters, digits, _ . @ -', self::quote($group), self::MAX_GROUP_LEN));
        }
    }

    public const MAX_TRACESTATE_LEN = 512;

    /**
     * A W3C traceparent: `version-traceid-spanid-flags`, 2, 32, 16 and 2
     * lowercase hex digits, the version not `ff`, neither id all zeros.
     */
    public static function traceparent(mixed $tp): void
    {
        if (!is_string($tp)) {
            throw new InvalidInput(sprintf('invalid traceparent %s: give a string', var_export($tp, true)));
        }
        $why = null;
        if (preg_match('/^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$/D', $tp) !== 1) {
            $why = 'not four dash-separated fields of lowercase hex';
        } elseif (str_starts_with($tp, 'ff')) {
            $why = 'version ff is invalid';
        } elseif (trim(substr($tp, 3, 32), '0') === '') {
            $why = 'the trace id is all zeros';
        } elseif (trim(substr($tp, 36, 16), '0') === '') {
            $why = 'the parent span id is all zeros';
        }
        if ($why !== null) {
            throw new InvalidInput(sprintf(
                'invalid traceparent %s: %s; a W3C traceparent is version-traceid-spanid-flags, '
                . '2, 32, 16 and 2 lowercase hex digits, e.g. 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
                self::quote($tp),
                $why,
            ));
        }
    }

    /** A W3C tracestate: at most 512 bytes of printable ASCII. */
    public static function tracestate(mixed $ts): void
    {
        $len = is_string($ts) ? strlen($ts) : 0;
        if (!is_string($ts) || $len > self::MAX_TRACESTATE_LEN || preg_match('/^[\x20-\x7e]*$/D', $ts) !== 1) {
            throw new InvalidInput(sprintf(
                'invalid tracestate: a W3C tracestate is at most %d bytes of printable ASCII (got %d bytes)',
                self::MAX_TRACESTATE_LEN,
                $len,
            ));
        }
    }

    /**
     * The current OpenTelemetry context's traceparent and tracestate (each
     * null when absent), read through the open-telemetry/api package when it
     * is installed (its W3C propagator, on the current context); [null, null]
     * otherwise. Not a dependency.
     *
     * @return array{0: ?string, 1: ?string}
     */
    public static function currentTraceContext(): array
    {
        $propagator = 'OpenTelemetry\API\Trace\Propagation\TraceContextPropagator';
        if (!class_exists($propagator)) {
            return [null, null];
        }
        $carrier = [];
        try {
            $propagator::getInstance()->inject($carrier);
        } catch (\Throwable) {
            return [null, null];
        }
        $tp = $carrier['traceparent'] ?? null;
        $ts = ($carrier['tracestate'] ?? '') === '' ? null : $carrier['tracestate'];
        try {
            self::traceparent($tp);
            if ($ts !== null) {
                self::tracestate($ts);
            }
        } catch (InvalidInput) {
            return [null, null];
        }
        return [$tp, $ts];
    }

    /**
     * The enqueue script's "max attempts" argument with the per-job options
     * (docs/PROTOCOL.md, "Per-job options"):
     * `<max>;x<ms>;t<ms>;g<group>;p<traceparent>;s<tracestate, escaped>`,
     * each part only when given; '' for none.
     *
     * @param array<string, mixed> $o max_attempts, expire_ms, timeout_ms, group, traceparent, tracestate
     */
    public static function options(array $o): string
    {
        $out = '';
        $max = $o['max_attempts'] ?? null;
        if ($max !== null) {
            if (!is_int($max)) {
                throw new InvalidInput(sprintf('invalid max attempts %s: give an integer from 1 to %d', var_export($max, true), self::MAX_ATTEMPTS));
            }
            if ($max < 1 || $max > self::MAX_ATTEMPTS) {
                throw new InvalidInput(sprintf('invalid max attempts %d: max attempts must be at least 1 and at most %d', $max, self::MAX_ATTEMPTS));
            }
            $out = (string) $max;
        }
        if (($o['expire_ms'] ?? null) !== null) {
            $out .= ';x' . self::windowMs('expiry', 'an', $o['expire_ms']);
        }
        if (($o['timeout_ms'] ?? null) !== null) {
            $out .= ';t' . self::windowMs('timeout', 'a', $o['timeout_ms']);
        }
        if (($o['group'] ?? null) !== null) {
            self::group($o['group']);
            $out .= ';g' . $o['group'];
        }
        $tp = $o['traceparent'] ?? null;
        $ts = $o['tracestate'] ?? null;
        if ($tp !== null) {
            self::traceparent($tp);
        }
        if ($ts !== null) {
            if ($tp === null) {
                throw new InvalidInput('a tracestate needs a traceparent: give both, or neither');
            }
            self::tracestate($ts);
        }
        if ($tp !== null) {
            $out .= ';p' . $tp;
            if ($ts !== null && $ts !== '') {
                $out .= ';s' . strtr($ts, ['%' => '%25', ';' => '%3B', ':' => '%3A']);
            }
        }
        return $out;
    }

    /**
     * Checks one job; returns [id or '', payload, when, max attempts and options, backoff].
     *
     * @param array<string, mixed> $job
     * @return array{0: ?string, 1: string, 2: string, 3: string, 4: string}
     */
    public static function job(array $job, int $maxPayload): array
    {
        $known = ['payload', 'id', 'delay_ms', 'at_ms', 'max_attempts', 'backoff_ms', 'expire_ms', 'timeout_ms', 'group', 'traceparent', 'tracestate'];
        foreach (array_keys($job) as $k) {
            if (!in_array($k, $known, true)) {
                throw new InvalidInput(sprintf('unknown job field %s; the fields are: %s', var_export($k, true), implode(', ', $known)));
            }
        }
        $id = $job['id'] ?? null;
        if ($id !== null) {
            if (!is_string($id)) {
                throw new InvalidInput(sprintf('invalid id %s: give a string', var_export($id, true)));
            }
            self::id($id);
        }
        if (($job['traceparent'] ?? null) === null && ($job['tracestate'] ?? null) === null) {
            [$job['traceparent'], $job['tracestate']] = self::currentTraceContext();
        }
        $max = self::options($job);
        $backoff = '';
        if (isset($job['backoff_ms'])) {
            if (!is_array($job['backoff_ms'])) {
                throw new InvalidInput('backoff must be a list of delays in milliseconds');
            }
            $steps = [];
            foreach ($job['backoff_ms'] as $given) {
                $step = self::wholeMs($given);
                if ($step === null) {
                    throw new InvalidInput(sprintf('invalid backoff step %s: give milliseconds as numbers', var_export($given, true)));
                }
                $steps[] = $step;
                if ($step < 0) {
                    throw new InvalidInput(sprintf('invalid backoff step %dms: steps may not be negative', $step));
                }
                if ($step > self::MAX_DELAY_MS) {
                    throw new InvalidInput(sprintf('invalid backoff step %ds: steps are at most ten years', intdiv($step, 1000)));
                }
            }
            $backoff = implode(',', $steps);
        }
        $when = self::when($job['delay_ms'] ?? null, $job['at_ms'] ?? null);
        if (!array_key_exists('payload', $job) || !is_string($job['payload'])) {
            throw new InvalidInput('payload must be a string (use json_encode for JSON)');
        }
        $payload = $job['payload'];
        if (strlen($payload) > $maxPayload) {
            throw new InvalidInput(sprintf(
                'payload is %d bytes, over the %d-byte limit (raise max_payload or store the data elsewhere and enqueue a reference)',
                strlen($payload),
                $maxPayload,
            ));
        }
        return [$id, $payload, $when, $max, $backoff];
    }
}
