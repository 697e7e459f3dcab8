<?php

declare(strict_types=1);

namespace Punctual;

/**
 * The two channels of a sequential resident loop (docs/RESIDENT.md,
 * protocol 1), as Worker::run and the Laravel connector's `artisan
 * punctual:work` use them: job messages read from fd 3, one at a time,
 * cancels heard while a job runs (Job::cancelled() reads fd 3 without
 * blocking), replies written to fd 4. With a look-ahead (docs/RESIDENT.md,
 * "Look-ahead"), next() keeps the program's promise: right before a job
 * starts, it reads fd 3 without blocking (a job cancelled meanwhile is not
 * started) and a job past its start_by_us is answered skip.
 *
 *     $intake = Intake::open(fn (string $id, \Throwable $e) => Worker::replyFor($id, $e));
 *     $intake->ready(16);
 *     while (($job = $intake->next()) !== null) {
 *         // run it
 *         $intake->reply(['type' => 'done', 'id' => $job->id]);
 *     }
 *     $intake->close();
 *
 * @internal
 */
final class Intake
{
    /** fd 3 split in lines here, not by fgets: a look for cancels while a job runs reads what is there without blocking, and loses nothing next() reads later. */
    private string $buf = '';
    /** Where the next line starts in $buf: a line taken is not cut off the front (a copy of the rest, per line, of up to 64 KiB). */
    private int $at = 0;
    private bool $eof = false;
    /**
     * Jobs read, not started (read while the one before ran, or written
     * ahead): a queue, as a look at fd 3 may bring many at once.
     *
     * @var \SplQueue<Job>
     */
    private \SplQueue $waiting;
    /** The job next() handed out, until its reply. */
    private ?Job $running = null;
    /** What Job::cancelled() and next() call: reads what fd 3 holds now, without blocking, and takes its lines. */
    private readonly \Closure $poll;

    /**
     * @param resource $in fd 3
     * @param resource $out fd 4
     * @param \Closure(string, \Throwable): array<string, mixed> $refuse the reply for a job message
     *        Job::fromMessage refuses (its id, the exception)
     */
    public function __construct(private $in, private $out, private readonly \Closure $refuse)
    {
        stream_set_blocking($in, false);
        // fread then reads what it asks (not 8 KiB chunks into PHP's buffer): a short read means fd 3 was emptied.
        stream_set_read_buffer($in, 0);
        $this->waiting = new \SplQueue();
        $this->poll = function (): void {
            $this->fill(false);
            while (($l = $this->buffered()) !== null) {
                $this->take($l);
            }
        };
    }

    /**
     * The channels named by PUNCTUAL_JOBS_FD and PUNCTUAL_REPLIES_FD (3
     * and 4); see Worker::open.
     *
     * @param \Closure(string, \Throwable): array<string, mixed> $refuse
     */
    public static function open(\Closure $refuse): self
    {
        return new self(Worker::open('PUNCTUAL_JOBS_FD', 'r'), Worker::open('PUNCTUAL_REPLIES_FD', 'w'), $refuse);
    }

    /**
     * $n checked: how many jobs punctual may write ahead of the one that
     * runs (0 to 64; 0 turns look-ahead off).
     *
     * @throws \InvalidArgumentException out of range
     */
    public static function lookahead(int $n): int
    {
        if ($n < 0 || $n > 64) {
            throw new \InvalidArgumentException("punctual: lookahead must be 0 to 64 (the jobs punctual may write ahead of the one that runs; 0 turns look-ahead off), not $n");
        }
        return $n;
    }

    /** Says ready: one job at a time, and up to $lookahead written ahead of it (see lookahead()). */
    public function ready(int $lookahead = 0): void
    {
        $msg = ['type' => 'ready', 'protocol' => Worker::PROTOCOL, 'inflight' => 1];
        if (self::lookahead($lookahead) > 0) {
            $msg['lookahead'] = $lookahead;
        }
        Worker::send($this->out, $msg);
    }

    /**
     * The next job to run, blocking until one comes; null when fd 3 ends
     * (punctual wants the program to exit). Its cancel, if one comes
     * before reply(), marks it (Job::cancelled()). A job cancelled before
     * it was handed out is not: it is answered retry, "cancelled by an
     * operator", here; nor is one past its start_by_us: it is answered
     * skip.
     */
    public function next(): ?Job
    {
        $this->running = null;
        while (true) {
            if ($this->waiting->isEmpty()) {
                $l = $this->line();
                if ($l === null) {
                    return null;
                }
                $this->take($l);
                continue;
            }
            // The promise of docs/RESIDENT.md, "Look-ahead", kept for every
            // job: what fd 3 holds is read (one fread, '' when fd 3 is
            // empty) and every line read is taken (its cancel may have come
            // in the very read that brought it); then its start_by_us.
            $this->fill(false);
            while (($l = $this->buffered()) !== null) {
                $this->take($l);
            }
            $job = $this->waiting->dequeue();
            if ($job->cancelSeen()) {
                Worker::send($this->out, Worker::replyFor($job->id, new \RuntimeException('cancelled by an operator')));
                continue;
            }
            if ($job->startByUs !== null && intdiv(hrtime(true), 1000) > $job->startByUs) {
                Worker::send($this->out, ['type' => 'skip', 'id' => $job->id]);
                continue;
            }
            return $this->running = $job;
        }
    }

    /**
     * Sends a reply line: for the job next() handed out, that job is then
     * no longer running (a cancel for it is ignored).
     *
     * @param array<string, mixed> $msg
     */
    public function reply(array $msg): void
    {
        if ($this->running !== null && $this->running->id === ($msg['id'] ?? null)) {
            $this->running = null;
        }
        Worker::send($this->out, $msg);
    }

    public function close(): void
    {
        fclose($this->out);
        fclose($this->in);
    }

    /** The next line of fd 3, blocking until one comes; null at its end. */
    private function line(): ?string
    {
        while (($l = $this->buffered()) === null) {
            if ($this->eof) {
                return null;
            }
            $this->fill(true);
        }
        return $l;
    }

    /** The next whole line read (at the end of fd 3, what is left of a last one); null if there is none. */
    private function buffered(): ?string
    {
        $i = strpos($this->buf, "\n", $this->at);
        if ($i !== false) {
            $l = substr($this->buf, $this->at, $i - $this->at);
            $this->at = $i + 1;
            return $l;
        }
        if ($this->eof) {
            $l = (string) substr($this->buf, $this->at);
            [$this->buf, $this->at] = ['', 0];
            return $l === '' ? null : $l;
        }
        return null;
    }

    /**
     * Reads what fd 3 holds: with !$block, all of it and nothing more (a
     * short read means it was emptied: one fread in the usual case); with
     * $block, at least something, waiting for it, or its end.
     */
    private function fill(bool $block): void
    {
        // What is left is a partial line, if anything: the buffer starts over with it.
        if ($this->at > 0) {
            $this->buf = (string) substr($this->buf, $this->at);
            $this->at = 0;
        }
        while (!$this->eof) {
            $chunk = fread($this->in, 65536);
            if ($chunk !== false && $chunk !== '') {
                $this->buf .= $chunk;
                if (strlen($chunk) < 65536) {
                    return;
                }
                $block = false; // something came: only what else is there now
            } elseif (feof($this->in)) {
                $this->eof = true;
            } elseif (!$block) {
                return;
            } else {
                $r = [$this->in];
                $w = $e = null;
                @stream_select($r, $w, $e, null); // false: a signal; look again
            }
        }
    }

    /** One line of fd 3: a job joins the waiting ones, a cancel marks its job. */
    private function take(string $l): void
    {
        $msg = json_decode($l, true);
        if (!is_array($msg)) {
            return;
        }
        if (($msg['type'] ?? null) === 'job') {
            try {
                $job = Job::fromMessage($msg);
            } catch (\Throwable $e) {
                Worker::send($this->out, ($this->refuse)((string) ($msg['id'] ?? ''), $e));
                return;
            }
            $job->watchedBy($this->poll);
            $this->waiting->enqueue($job);
        } elseif (($msg['type'] ?? null) === 'cancel') {
            // For a job already replied to (or not sent): nothing to do.
            $id = (string) ($msg['id'] ?? '');
            if ($this->running?->id === $id) {
                $this->running->markCancelled();
            }
            foreach ($this->waiting as $job) {
                if ($job->id === $id) {
                    $job->markCancelled();
                }
            }
        } // later versions may add message types
    }
}
