#!/bin/sh
# Copies punctual's Lua scripts into the client packages, exactly as punctual
# loads them into Redis (`punctual script NAME`: the script's shebang line,
# the includes it names, then the rest of the script), so a client's
# EVALSHA uses the same SHA1 as the Rust library and `punctual script` lists.
#
# Run it after any change under crates/punctual/lua/, and commit the copies:
#
#     clients/sync-lua.sh
#
# The test `cargo test -p punctual-cli --test clients_lua` fails while any
# copy differs from what this script writes.
set -eu
cd "$(dirname "$0")/.."

# The scripts a producer needs. Keep in step with SCRIPTS in
# crates/punctual-cli/tests/clients_lua.rs.
SCRIPTS="enqueue get cancel reschedule unfire"
DIRS="clients/php/lua clients/python/punctual/lua clients/node/lua"
# The PHP package's Laravel connector also consumes (`queue:work punctual`
# pops). Keep in step with PHP_CONSUMER in clients_lua.rs.
PHP_CONSUMER="claim ack fail"

cargo build --quiet --locked -p punctual-cli
for name in $SCRIPTS; do
  for dir in $DIRS; do
    mkdir -p "$dir"
    cargo run --quiet --locked -p punctual-cli -- script "$name" > "$dir/$name.lua.tmp"
    mv "$dir/$name.lua.tmp" "$dir/$name.lua"
  done
done
for name in $PHP_CONSUMER; do
  cargo run --quiet --locked -p punctual-cli -- script "$name" > "clients/php/lua/$name.lua.tmp"
  mv "clients/php/lua/$name.lua.tmp" "clients/php/lua/$name.lua"
done
echo "sync-lua: wrote $SCRIPTS into $DIRS, and $PHP_CONSUMER into clients/php/lua"
