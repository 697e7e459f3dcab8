<?php

declare(strict_types=1);

namespace Punctual;

/**
 * The two channels of a sequential resident loop (docs/RESIDENT.md,
 * protocol 1), as Worker::run and the Laravel connector's `artisan
 * punctual:work` use them: job messages read from fd 3, one at a time,
 * cancels heard while a job runs (Job::cancelled() reads fd 3 without
 * blocking), replies written to fd 4.
 *
 *     $intake = Intake::open(fn (string $id, \Throwable $e) => Worker::replyFor($id, $e));
 *     $intake->ready();
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
    private bool $eof = false;
    /** @var list<Job> jobs read, not started (read while the one before ran) */
    private array $waiting = [];
    /** The job next() handed out, until its reply. */
    private ?Job $running = null;
    /** What Job::cancelled() calls: reads the lines waiting on fd 3. */
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
        $this->poll = function (): void {
            while (($l = $this->line(false)) !== null) {
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

    /** Says ready: one job at a time. */
    public function ready(): void
    {
        Worker::send($this->out, ['type' => 'ready', 'protocol' => Worker::PROTOCOL, 'inflight' => 1]);
    }

    /**
     * The next job to run, blocking until one comes; null when fd 3 ends
     * (punctual wants the program to exit). Its cancel, if one comes
     * before reply(), marks it (Job::cancelled()). A job cancelled before
     * it was handed out is not: it is answered retry, "cancelled by an
     * operator", here.
     */
    public function next(): ?Job
    {
        $this->running = null;
        while (true) {
            if ($this->waiting === []) {
                $l = $this->line(true);
                if ($l === null) {
                    return null;
                }
                $this->take($l);
                continue;
            }
            $job = array_shift($this->waiting);
            if ($job->cancelled()) {
                Worker::send($this->out, Worker::replyFor($job->id, new \RuntimeException('cancelled by an operator')));
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

    /** The next line of fd 3; null at its end, or with !$block when no whole line is there yet. */
    private function line(bool $block): ?string
    {
        while (true) {
            $i = strpos($this->buf, "\n");
            if ($i !== false) {
                $l = substr($this->buf, 0, $i);
                $this->buf = substr($this->buf, $i + 1);
                return $l;
            }
            if ($this->eof) {
                [$l, $this->buf] = [$this->buf, ''];
                return $l === '' ? null : $l;
            }
            $chunk = fread($this->in, 65536);
            if ($chunk !== false && $chunk !== '') {
                $this->buf .= $chunk;
            } elseif (feof($this->in)) {
                $this->eof = true;
            } elseif (!$block) {
                return null;
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
            $this->waiting[] = $job;
        } elseif (($msg['type'] ?? null) === 'cancel') {
            // For a job already replied to (or not sent): nothing to do.
            foreach ([$this->running, ...$this->waiting] as $job) {
                if ($job !== null && $job->id === (string) ($msg['id'] ?? '')) {
                    $job->markCancelled();
                }
            }
        } // later versions may add message types
    }
}
