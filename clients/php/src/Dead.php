<?php

declare(strict_types=1);

namespace Punctual;

/** Throw from a handler to send the job straight to the dead set. */
class Dead extends \RuntimeException
{
    public function __construct(string $reason = '')
    {
        parent::__construct($reason);
    }
}
