#!/usr/bin/env bash
# Redis's own cost of one enqueue call from each client (PHP's
# Punctual\Producer::enqueue, Python's punctual.Producer.enqueue, Node's
# Producer.enqueue) against the Rust library's (Queue::enqueue): N
# single-job calls from each side, payloads payload-<n>, no options, one
# topic each.
#
#     [SIDES="php python node"] clients/php/bench/single-enqueue.sh [N=10000] [ROUNDS=3]
#
# Two measures, each printed per side and round, then each side's ratio to
# rust:
#
# - usec: one private redis-server for the whole run, `CONFIG RESETSTAT`
#   before each side, evalsha's usec_per_call from `INFO commandstats`
#   after it; rounds alternate which side goes first. Wall-clock time inside
#   the script: on a loaded machine it counts the times Redis was preempted
#   too, and the side whose client burns more CPU meanwhile looks slower.
# - instructions (CALLGRIND=1): each side against its own fresh
#   redis-server under valgrind's callgrind, collecting only inside
#   processInputBuffer (parsing the request, running the script, writing
#   the reply); the total divided by N. Deterministic up to the ids.
#
# Builds the Rust side with `cargo build -p punctual --example enqueue_each`
# (or set ENQUEUE_EACH to the binary). Needs redis-server, bc, valgrind for
# CALLGRIND=1, and per side: php with php-redis, python3 with redis-py, node
# with the redis package installed in clients/node (`npm ci`). The bench's
# `calls` phase reports the same per client by time (client_enqueue).
set -euo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
N="${1:-10000}"
ROUNDS="${2:-3}"
SIDES="${SIDES:-php python node}"
each="${ENQUEUE_EACH:-}"
if [ -z "$each" ]; then
    (cd "$root" && cargo build -q -p punctual --example enqueue_each --locked)
    each="$root/target/debug/examples/enqueue_each"
fi
dir="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"' EXIT

start_redis() { # port [valgrind args...]: starts a private redis-server
    local port="$1"; shift
    "$@" redis-server --port "$port" --save '' --appendonly no --dir "$dir" \
        >"$dir/redis-$port.log" 2>&1 &
    pids+=("$!")
    until redis-cli -p "$port" PING >/dev/null 2>&1; do sleep 0.1; done
}
client() { # side topic port
    case "$1" in
        php) PUNCTUAL_REDIS_URL="redis://127.0.0.1:$3" php "$root/clients/php/bench/enqueue-each.php" "$2" "$N" ;;
        python) PUNCTUAL_REDIS_URL="redis://127.0.0.1:$3" PYTHONPATH="$root/clients/python" \
            python3 "$root/clients/python/bench/enqueue_each.py" "$2" "$N" ;;
        node) PUNCTUAL_REDIS_URL="redis://127.0.0.1:$3" node "$root/clients/node/bench/enqueue-each.js" "$2" "$N" ;;
        rust) PUNCTUAL_REDIS_URL="redis://127.0.0.1:$3" "$each" "$2" "$N" ;;
    esac
}

if [ "${CALLGRIND:-0}" = 1 ]; then
    ratios=()
    for r in $(seq 1 "$ROUNDS"); do
        declare -A ins=()
        for side in rust $SIDES; do
            port=$((20000 + RANDOM % 20000))
            out="$dir/callgrind.$side.$r"
            start_redis "$port" valgrind --tool=callgrind --callgrind-out-file="$out" \
                --toggle-collect=processInputBuffer
            client "$side" "$side-$r" "$port" >/dev/null
            redis-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
            while [ ! -s "$out" ] || ! grep -q '^totals:' "$out"; do sleep 0.2; done
            total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$out")
            ins[$side]=$((total / N))
            echo "$side round $r: $total instructions in processInputBuffer, $((total / N)) per call" >&2
        done
        for side in $SIDES; do
            ratios+=("$side/rust $(echo "scale=3; ${ins[$side]} / ${ins[rust]}" | bc)")
        done
    done
    echo "instructions per call over rust's, per round: ${ratios[*]}"
    exit 0
fi

port=$((20000 + RANDOM % 20000))
start_redis "$port"
per_call() { # usec_per_call and calls of evalsha since the last RESETSTAT
    redis-cli -p "$port" INFO commandstats | tr -d '\r' |
        sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),usec=[0-9]*,usec_per_call=\([0-9.]*\).*/\2 \1/p'
}
run() { # side round
    redis-cli -p "$port" CONFIG RESETSTAT >/dev/null
    client "$1" "$1-$2" "$port" >/dev/null
    read -r usec calls <<<"$(per_call)"
    echo "$1 round $2: $calls evalsha calls, $usec usec_per_call" >&2
    echo "$usec"
}
ratios=()
for r in $(seq 1 "$ROUNDS"); do
    # Rust first in odd rounds, last in even ones.
    order="rust $SIDES"
    [ $((r % 2)) -eq 0 ] && order="$SIDES rust"
    declare -A us=()
    for side in $order; do us[$side]=$(run "$side" "$r"); done
    for side in $SIDES; do
        ratios+=("$side/rust $(echo "scale=3; ${us[$side]} / ${us[rust]}" | bc)")
    done
done
echo "evalsha usec_per_call over rust's, per round: ${ratios[*]}"
