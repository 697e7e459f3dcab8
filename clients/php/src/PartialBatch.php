<?php

declare(strict_types=1);

namespace Punctual;

/**
 * A batch that took several script calls failed part way: $written maps batch
 * indexes to their result (['id' => ..., 'status' => ...]), $failed lists the
 * indexes not written; getPrevious() says why.
 */
final class PartialBatch extends \RuntimeException
{
    /**
     * @param array<int, array{id: string, status: string}> $written
     * @param list<int> $failed
     */
    public function __construct(
        public readonly int $total,
        public readonly array $written,
        public readonly array $failed,
        \Throwable $source,
    ) {
        parent::__construct(sprintf(
            '%s (the batch of %d jobs went in calls of up to 1,000: %d written, %d not; enqueue those again, ids make that safe)',
            $source->getMessage(),
            $total,
            count($written),
            count($failed),
        ), 0, $source);
    }
}
