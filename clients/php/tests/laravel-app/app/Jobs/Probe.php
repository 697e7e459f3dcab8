<?php

namespace App\Jobs;

use App\Support\Recorder;
use Illuminate\Bus\Queueable;
use Illuminate\Contracts\Queue\ShouldQueue;
use Illuminate\Foundation\Bus\Dispatchable;
use Illuminate\Queue\InteractsWithQueue;

/**
 * The test job: records each run (with Redis's clock, its attempt and its
 * punctual id), then does what $do says: ok, release (release(1) on the
 * first attempt), fail ($this->fail(...)), throw (always), crash (the
 * process exits, status 3), hang (sleeps 60 s: past its $timeout).
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
        }
    }

    public function failed(\Throwable $e): void
    {
        Recorder::record(['what' => 'failed', 'tag' => $this->tag, 'error' => get_class($e) . ': ' . $e->getMessage()]);
    }
}
