<?php

declare(strict_types=1);

namespace Punctual;

/**
 * Throw from a handler to have the job retried, after $delayMs (null: the
 * topic's backoff ladder). The attempt is counted.
 */
class Retry extends \RuntimeException
{
    public function __construct(string $message = '', public readonly ?int $delayMs = null)
    {
        parent::__construct($message);
    }
}
