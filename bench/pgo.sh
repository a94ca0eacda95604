#!/usr/bin/env bash
# The release binary optimised with a profile of the project's own load (profile-guided
# optimisation), for the images: an instrumented build runs the three shapes of
# docs/performance.md against `stampede target http` on loopback (50 keep-alive connections, a
# constant 5,000/s, a new connection per request) and every scenario in examples/ against its
# own target (examples/run-all.sh: h1, h2 over TLS, tcp, udp, unix, gRPC, sessions, mixes), so
# that no driver is left out of the profile and laid out as cold; then the release build again,
# with that profile. Most of an agent's user-space time is spread thin over tokio, the session
# and the head parser, run after each wake-up on cold caches: the profile puts the hot paths
# together and their rare branches out of the way (the figures are in docs/performance.md).
#
# Usage: bench/pgo.sh [OUT]   (default: target/pgo/stampede; the Dockerfile passes its own)
# Needs rustc's llvm-profdata (`rustup component add llvm-tools`, added here when missing) and
# ports 8080, 8443, 7000-7002, 50051 and PGO_PORT (18095) free on 127.0.0.1. Two release builds:
# about 20 minutes on 2 cores. Nothing is sent anywhere but loopback.
set -euo pipefail
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"
target=${CARGO_TARGET_DIR:-$root/target}
out=${1:-$target/pgo/stampede}
port=${PGO_PORT:-18095}
prof=$target/pgo/profiles

host=$(rustc -vV | sed -n 's/^host: //p')
profdata=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [ ! -x "$profdata" ]; then
    rustup component add llvm-tools
fi

echo "=== instrumented build ($target/pgo/gen)"
rm -rf "$prof"
mkdir -p "$prof"
gen_flags="-Cprofile-generate=$prof"
RUSTFLAGS=$gen_flags CARGO_TARGET_DIR=$target/pgo/gen \
    cargo build --release --locked -q -p stampede --manifest-path "$root/Cargo.toml"
gen=$target/pgo/gen/release/stampede
# The build scripts and proc macros built with the same flags wrote profiles of their own
# while the build ran: only the training's belong in the profile.
rm -f "$prof"/*.profraw

echo "=== training: three load shapes against stampede target http on 127.0.0.1:$port"
RUST_LOG=warn "$gen" target http --listen "127.0.0.1:$port" >"$work/target.log" 2>&1 &
target_pid=$!
pids+=("$target_pid")
wait_port "$port"
shape() { # NAME LOAD [STEP-OPTIONS]
    cat >"$work/$1.yaml" <<EOF
name: pgo-$1
target: http://127.0.0.1:$port
request_timeout: 10s
load: $2
session:
  - http: { method: GET, path: / }
    ${3:-}
EOF
    "$gen" run "$work/$1.yaml" --local --agents 1 --quiet --report "$work/$1.json" >/dev/null
    echo "    $1: done"
}
shape closed "{ model: closed, connections: 50, duration: 5s }"
shape constant "{ model: constant, rate: 5000, connections: 50, duration: 5s }"
shape newconn "{ model: closed, connections: 50, duration: 5s }" "new_connection: true"
# Stopped before the examples, by SIGTERM: it exits cleanly, which writes its profile.
kill "$target_pid"
wait "$target_pid" 2>/dev/null || true

echo "=== training: examples/run-all.sh"
# A threshold an instrumented binary misses still leaves its counts in the profile.
if ! RUSTFLAGS=$gen_flags CARGO_TARGET_DIR=$target/pgo/gen "$root/examples/run-all.sh" >"$work/examples.log" 2>&1; then
    grep -E '^===|exit [1-9]' "$work/examples.log" | grep -B1 'exit [1-9]' || tail -20 "$work/examples.log"
    echo "    (the examples above exited non-zero under the instrumented build; their runs are in the profile)"
fi

echo "=== merging the profile"
"$profdata" merge -o "$prof/stampede.profdata" "$prof"/*.profraw

echo "=== release build with the profile ($target/pgo/use)"
RUSTFLAGS="-Cprofile-use=$prof/stampede.profdata" CARGO_TARGET_DIR=$target/pgo/use \
    cargo build --release --locked -q -p stampede --manifest-path "$root/Cargo.toml"
mkdir -p "$(dirname "$out")"
install -m 0755 "$target/pgo/use/release/stampede" "$out"
echo "=== $out"
