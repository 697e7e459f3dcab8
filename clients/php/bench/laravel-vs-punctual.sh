#!/usr/bin/env bash
# Laravel's own redis queue driver against punctual's Laravel connector, in
# one run on one private redis-server, same no-op job (the test app's
# App\Jobs\Noop), same number of PHP processes:
#
#   laravel:  P x `php artisan queue:work redis --sleep=0`
#   punctual: `punctual serve` (workers = 1) running P x `php artisan punctual:work`
#
# 1. jobs/s: JOBS no-op jobs enqueued in bulk before the consumers start,
#    then drained; the rate is counted from the first job done to the last
#    (Redis's clock), so booting the consumers does not count.
# 2. lateness: the consumers running, DELAYED jobs dispatched one by one with
#    ->later(now()->addMilliseconds(d)), d random in 0..5000 ms; each job
#    notes (Redis's clock at its start) - (Redis's clock at dispatch + d):
#    p50, p99, max, and how many started early (below 0).
#
# Usage (from anywhere; Debian's php-laravel-framework and php-redis):
#
#     clients/php/bench/laravel-vs-punctual.sh [PROCS=4] [JOBS=20000] [DELAYED=2000]
#
# PUNCTUAL_BIN: the punctual binary (default target/release/punctual; build
# it with `cargo build --release -p punctual-cli`). Prints one line per
# figure. Nothing else may use the machine's CPU meanwhile for the figures
# to mean much.
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
app="$root/clients/php/tests/laravel-app"
PROCS="${1:-4}"
JOBS="${2:-20000}"
DELAYED="${3:-2000}"
SPREAD_MS=5000
BIN="${PUNCTUAL_BIN:-$root/target/release/punctual}"
[ -x "$BIN" ] || { echo "no punctual binary at $BIN: cargo build --release -p punctual-cli, or set PUNCTUAL_BIN" >&2; exit 2; }

scratch="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
redis-server --port "$port" --dir "$scratch" --save '' --appendonly no --daemonize yes \
  --pidfile "$scratch/redis.pid" --logfile "$scratch/redis.log"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$scratch"
}
trap cleanup EXIT
rc() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do rc ping >/dev/null 2>&1 && break; sleep 0.1; done

export REDIS_HOST=127.0.0.1 REDIS_PORT="$port" LT_RECORD_EVENTS=0
export APP_SERVICES_CACHE="$scratch/services.php" APP_PACKAGES_CACHE="$scratch/packages.php"
artisan() { (cd "$app" && php artisan "$@"); }

# Starts the consumers of driver $1 (laravel | punctual) in the background
# and waits until all P PHP processes are up.
start() {
  pids=()
  if [ "$1" = laravel ]; then
    for _ in $(seq "$PROCS"); do
      (cd "$app" && exec php artisan queue:work redis --sleep=0 --quiet) &
      pids+=($!)
    done
  else
    cat > "$scratch/punctual.toml" <<TOML
redis = "redis://127.0.0.1:$port"
workers = 1
[topics.default]
resident = ["php", "artisan", "punctual:work"]
cwd = "$app"
processes = $PROCS
timeout = "60s"
env = { REDIS_HOST = "127.0.0.1", REDIS_PORT = "$port", LT_RECORD_EVENTS = "0", APP_SERVICES_CACHE = "$scratch/services.php", APP_PACKAGES_CACHE = "$scratch/packages.php" }
TOML
    PUNCTUAL_LOG=warn "$BIN" serve --config "$scratch/punctual.toml" 2>>"$scratch/serve.log" &
    pids+=($!)
  fi
  # Up: P processes of this bench running artisan (queue:work or punctual:work).
  local want="queue:work"; [ "$1" = punctual ] && want="punctual:work"
  for _ in $(seq 300); do
    n=$(pgrep -f -c "artisan $want" || true)
    [ "$n" -ge "$PROCS" ] && break
    sleep 0.1
  done
  sleep 1 # the app's boot (about 0.1 s here) after the process appears
}

stop() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

throughput() {
  local driver="$1" conn="$1"
  [ "$driver" = laravel ] && conn=redis
  rc flushall >/dev/null
  artisan test:dispatch --noop="$JOBS" --connection="$conn" >/dev/null
  start "$driver"
  while [ "$(rc get bench:done)" != "$JOBS" ]; do sleep 0.2; done
  local first last
  first=$(rc get bench:first); last=$(rc get bench:last)
  stop
  python3 -c "print('$driver: $JOBS no-op jobs, $PROCS PHP processes: %.0f jobs/s' % (($JOBS - 1) * 1000.0 / max(1, $last - $first)))"
}

lateness() {
  local driver="$1" conn="$1"
  [ "$driver" = laravel ] && conn=redis
  rc flushall >/dev/null
  start "$driver"
  artisan test:dispatch --noop="$DELAYED" --spread-ms="$SPREAD_MS" --connection="$conn" >/dev/null
  while [ "$(rc llen bench:late)" -lt "$DELAYED" ]; do sleep 0.2; done
  stop
  rc lrange bench:late 0 -1 | python3 -c "
import sys
v = sorted(int(x) for x in sys.stdin.read().split())
q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
early = [x for x in v if x < 0]
print('$driver: %d jobs delayed 0-${SPREAD_MS} ms, $PROCS PHP processes: late p50 %d ms, p99 %d ms, max %d ms; started early: %d%s'
      % (len(v), q(0.5), q(0.99), v[-1], len(early), ' (by up to %d ms)' % -min(early) if early else ''))
"
}

echo "laravel-vs-punctual: $(php -r 'echo "PHP ", PHP_VERSION;'), Laravel $(cd "$app" && php artisan --version | sed 's/Laravel Framework //'), $(redis-server --version | cut -d' ' -f3), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
throughput laravel
throughput punctual
lateness laravel
lateness punctual
