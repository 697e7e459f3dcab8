<?php

namespace App\Jobs;

use App\Support\Recorder;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;
use Punctual\Laravel\PunctualJob;

/**
 * The test job: records each run (with Redis's clock, its attempt and its
 * punctual id), then does what $do says: ok, release (release(1) on the
 * first attempt), fail ($this->fail(...)), throw (always), crash (the
 * process exits, status 3), hang (sleeps 60 s: past its $timeout), wait
 * (looks whether an operator cancelled it every 20 ms, up to 30 s, and
 * returns when it was). With LT_RECORDS set, also appends `job TAG PID`
 * to that file at the start, and `cancelled TAG PID` when told.
 */
class Probe implements ShouldQueue
{
    use Dispatchable, InteractsWithQueue, Queueable;

    public $tries;

    /** Seconds, or a list of them (test:dispatch --backoff=1,5). */
    public $backoff;

    /** Seconds (test:dispatch --timeout). */
    public $timeout;

    /** Epoch seconds (test:dispatch --retry-until-s, from now). */
    public $retryUntil;

    public function __construct(public string $tag, public string $do = 'ok', ?int $tries = null)
    {
        $this->tries = $tries;
    }

    public function middleware()
    {
        return [new RecordMiddleware()];
    }

    public function handle(): void
    {
        Recorder::record([
            'what' => 'handle', 'tag' => $this->tag, 'attempt' => $this->attempts(),
            'id' => $this->job->getJobId(), 'queue' => $this->job->getQueue(),
        ]);
        $this->note('job');
        if ($this->do === 'release' && $this->attempts() === 1) {
            $this->release(1);
        } elseif ($this->do === 'fail') {
            $this->fail(new \RuntimeException("bad order {$this->tag}"));
        } elseif ($this->do === 'throw') {
            throw new \DomainException("boom {$this->tag}");
        } elseif ($this->do === 'crash') {
            exit(3);
        } elseif ($this->do === 'hang') {
            sleep(60);
        } elseif ($this->do === 'wait') {
            $deadline = microtime(true) + 30;
            while (!($this->job instanceof PunctualJob && $this->job->cancelled())) {
                if (microtime(true) > $deadline) {
                    throw new \RuntimeException("never told {$this->tag}");
                }
                usleep(20000);
            }
            $this->note('cancelled');
        }
    }

    private function note(string $what): void
    {
        $file = getenv('LT_RECORDS');
        if ($file) {
            file_put_contents($file, "$what {$this->tag} " . getmypid() . "\n", FILE_APPEND);
        }
    }

    public function failed(\Throwable $e): void
    {
        Recorder::record(['what' => 'failed', 'tag' => $this->tag, 'error' => get_class($e) . ': ' . $e->getMessage()]);
    }
}
