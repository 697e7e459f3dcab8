<?php

declare(strict_types=1);

// The package's PSR-4 autoloader without Composer (Composer's vendor/autoload.php does the same).
spl_autoload_register(static function (string $class): void {
    if (str_starts_with($class, 'Punctual\\')) {
        $file = __DIR__ . '/../src/' . str_replace('\\', '/', substr($class, strlen('Punctual\\'))) . '.php';
        if (is_file($file)) {
            require $file;
        }
    }
});

/** A connection to PUNCTUAL_TEST_REDIS_URL (redis://host:port), the private Redis of the tests. */
function test_redis(): Redis
{
    $url = getenv('PUNCTUAL_TEST_REDIS_URL');
    if (!$url) {
        fwrite(STDERR, "set PUNCTUAL_TEST_REDIS_URL to a scratch Redis (the Rust test does this)\n");
        exit(2);
    }
    $u = parse_url($url);
    $r = new Redis();
    $r->connect($u['host'] ?? '127.0.0.1', $u['port'] ?? 6379, 5.0);
    return $r;
}
