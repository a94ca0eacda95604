#!/usr/bin/env bash
# Runs every scenario in examples/ with `stampede run --local` against the matching
# `stampede target` on loopback, and prints each report's summary. Usage:
#   examples/run-all.sh [NAME ...]        (default: all; a release build is made first)
# Each target is started here and stopped by PID when its example is done.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cargo build --release -q -p stampede --manifest-path "$root/Cargo.toml"
BIN="${CARGO_TARGET_DIR:-$root/target}/release/stampede"
work=$(mktemp -d)
target_pid=
stop_target() {
    if [ -n "$target_pid" ]; then
        kill "$target_pid" 2>/dev/null || true
        wait "$target_pid" 2>/dev/null || true
        target_pid=
    fi
}
trap 'stop_target; rm -rf "$work"' EXIT

# The target each example is written against (see the comment at the top of each file).
target_for() {
    case $1 in
        tcp-login | tcp-login-users) echo "login --listen 127.0.0.1:7000" ;;
        echo-tcp) echo "echo-tcp --listen 127.0.0.1:7001 --framing length" ;;
        echo-udp) echo "echo-udp --listen 127.0.0.1:7002" ;;
        echo-unix) echo "echo-unix --listen /tmp/stampede-echo.sock --framing length" ;;
        https-h2) echo "http --listen 127.0.0.1:8443 --tls-self-signed /tmp/stampede-example-ca.pem" ;;
        grpc | grpc-streams) echo "grpc --listen 127.0.0.1:50051" ;;
        *) echo "http --listen 127.0.0.1:8080" ;;
    esac
}

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for f in "$root"/examples/*.yaml; do names+=("$(basename "$f" .yaml)"); done
fi
status=0
for name in "${names[@]}"; do
    # shellcheck disable=SC2046 # the target's arguments are words
    RUST_LOG=warn "$BIN" target $(target_for "$name") >"$work/$name-target.log" 2>&1 &
    target_pid=$!
    sleep 0.5
    echo "=== $name  (target: stampede target $(target_for "$name"))"
    if "$BIN" run --local --quiet --report "$work/$name.json" "$root/examples/$name.yaml" >"$work/$name.txt" 2>&1; then
        rc=0
    else
        rc=$?
        status=1
    fi
    grep -E "^Run |^Requests|^Sessions|^Errors|^Load|^  response time|^  service time|^Generator|^Thresholds|^  (pass|FAIL) |^  [a-z0-9-]+ +[0-9.]+s +[0-9]" "$work/$name.txt" || cat "$work/$name.txt"
    echo "    exit $rc"
    stop_target
done
exit $status
