<?php

declare(strict_types=1);

namespace Punctual;

/** Bad input (topic, id, payload, delay, option): nothing was written. */
final class InvalidInput extends \InvalidArgumentException
{
}
