<?php

declare(strict_types=1);

namespace Punctual;

/**
 * The resident handler loop of `punctual serve` (docs/RESIDENT.md, protocol
 * 1): jobs arrive on fd 3 and replies go to fd 4, one JSON object per line.
 * stdout and stderr are not part of the protocol: echo freely.
 *
 *     Punctual\Worker::run(function (Punctual\Job $job): void {
 *         $order = $job->json();
 *         // ... return: done; throw new Punctual\Retry('busy', 60000): retry
 *         // in a minute; throw new Punctual\Dead('no such order'): dead;
 *         // any other exception: retried, its class and message the error.
 *     });
 */
final class Worker
{
    public const PROTOCOL = 1;

    /**
     * Says ready, handles jobs one at a time until fd 3 ends (EOF: punctual
     * wants the program to exit), then returns.
     *
     * When an operator cancels the job that runs (docs/RESIDENT.md,
     * "Cancel"), $job->cancelled() says so from then on (the loop cannot
     * interrupt the handler: it should look between steps); its reply,
     * whatever it is, is not recorded. A job cancelled before its handler
     * started is not started (its reply: retry, "cancelled by an
     * operator"); a cancel for a job already answered is ignored.
     *
     * $lookahead (0 to 64, default 16; 0 turns it off) is how many jobs
     * punctual may write to fd 3 ahead of the one that runs, so that the
     * next job is there when the handler returns (docs/RESIDENT.md,
     * "Look-ahead"). Right before each job starts, the loop reads fd 3
     * without blocking: a job whose cancel came meanwhile is not started,
     * nor one past its $job->startByUs (answered skip: punctual hands it
     * back, or ends it if it expired).
     *
     * @param callable(Job): mixed $handler
     * @throws \InvalidArgumentException $lookahead out of range, before the handshake
     */
    public static function run(callable $handler, int $lookahead = 16): void
    {
        Intake::lookahead($lookahead);
        self::requireServe();
        $intake = Intake::open(self::replyFor(...));
        $intake->ready($lookahead);
        while (($job = $intake->next()) !== null) {
            try {
                $handler($job);
                $reply = ['type' => 'done', 'id' => $job->id];
            } catch (\Throwable $e) {
                $reply = self::replyFor($job->id, $e);
            }
            $intake->reply($reply);
        }
        $intake->close();
    }

    /** @return array<string, mixed> the reply line for a handler's exception */
    public static function replyFor(string $id, \Throwable $e): array
    {
        if ($e instanceof Dead) {
            return ['type' => 'dead', 'id' => $id, 'error' => $e->getMessage()];
        }
        if ($e instanceof Retry) {
            $reply = ['type' => 'retry', 'id' => $id, 'error' => $e->getMessage()];
            if ($e->delayMs !== null) {
                $reply['delay_ms'] = max(0, $e->delayMs);
            }
            return $reply;
        }
        return ['type' => 'retry', 'id' => $id, 'error' => get_class($e) . ': ' . $e->getMessage()];
    }

    /**
     * Exits with status 2 and a message on stderr unless `punctual serve`
     * started this program: serve sets PUNCTUAL_PROTOCOL=1. Whether fds 3
     * and 4 are open tells nothing: PHP itself may hold them (the script
     * file, a Redis socket), and reading jobs from them would be wrong
     * silently.
     */
    public static function requireServe(): void
    {
        $v = getenv('PUNCTUAL_PROTOCOL');
        if ($v === (string) self::PROTOCOL) {
            return;
        }
        fwrite(STDERR, $v === false || $v === ''
            ? "punctual: PUNCTUAL_PROTOCOL is not set: this is a resident handler, run it under `punctual serve` (a topic with resident = [...]), not by hand; see docs/RESIDENT.md\n"
            : sprintf("punctual: PUNCTUAL_PROTOCOL is %s, this package speaks protocol %d: upgrade punctual or this package so they match; see docs/RESIDENT.md\n", $v, self::PROTOCOL));
        exit(2);
    }

    /**
     * Opens the protocol fd named by $env (PUNCTUAL_JOBS_FD, PUNCTUAL_REPLIES_FD).
     *
     * @internal
     * @return resource
     */
    public static function open(string $env, string $mode)
    {
        $fd = (int) (getenv($env) ?: ($env === 'PUNCTUAL_JOBS_FD' ? 3 : 4));
        $h = @fopen('php://fd/' . $fd, $mode);
        if ($h === false || @fstat($h) === false) {
            throw new \RuntimeException("punctual: fd $fd is not open: run this program under `punctual serve` (a topic with resident = [...]); see docs/RESIDENT.md");
        }
        return $h;
    }

    /**
     * Writes one protocol line to the reply fd.
     *
     * @internal
     * @param resource $out
     * @param array<string, mixed> $msg
     */
    public static function send($out, array $msg): void
    {
        $line = json_encode($msg, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_INVALID_UTF8_SUBSTITUTE | JSON_THROW_ON_ERROR) . "\n";
        while ($line !== '') {
            $n = fwrite($out, $line);
            if ($n === false || $n === 0) {
                throw new \RuntimeException('punctual: cannot write to the reply fd');
            }
            $line = substr($line, $n);
        }
        fflush($out);
    }
}
