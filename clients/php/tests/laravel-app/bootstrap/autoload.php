<?php

// Laravel from Composer's vendor/ when there is one, else Debian's
// php-laravel-framework (/usr/share/php/Illuminate); this package's classes
// from clients/php/src and the app's from app/, both PSR-4.

$vendor = __DIR__ . '/../vendor/autoload.php';
if (is_file($vendor)) {
    require $vendor;
} elseif (stream_resolve_include_path('Illuminate/autoload.php') !== false) {
    require_once 'Illuminate/autoload.php';
} else {
    fwrite(STDERR, "laravel-app: Laravel is not installed (Debian: apt-get install php-laravel-framework)\n");
    exit(3);
}

spl_autoload_register(static function (string $class): void {
    foreach (['Punctual\\' => __DIR__ . '/../../../src/', 'App\\' => __DIR__ . '/../app/'] as $ns => $dir) {
        if (str_starts_with($class, $ns)) {
            $file = $dir . str_replace('\\', '/', substr($class, strlen($ns))) . '.php';
            if (is_file($file)) {
                require $file;
            }
            return;
        }
    }
});
