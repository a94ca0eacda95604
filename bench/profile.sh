#!/usr/bin/env bash
# Where a load case's generator CPU goes: `stampede run --local` pinned to LOAD_CPU against
# nginx (one worker) pinned to SERVER_CPU, under `perf stat` (syscalls and context switches
# per request) and `perf record -g` (the CPU by object: kernel, stampede, libc; then the top
# symbols). With `inferno` on PATH (cargo install inferno) it also writes a flame graph.
#
# Usage: bench/profile.sh [closed|constant|newconn|conns]   (default closed)
# Environment: DURATION (5), SERVER_CPU (0), LOAD_CPU (1), NGINX_PORT (18090), OUT (the
# directory for perf.data and the flame graph; default a temporary one, removed on exit),
# BIN (a stampede binary to profile instead of building `--profile profiling`: release code
# with line tables). Needs perf (apt-get install linux-perf). Loopback only.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CASE=${1:-closed}
DURATION=${DURATION:-5}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
NGINX_PORT=${NGINX_PORT:-18090}
OUT=${OUT:-$work}
mkdir -p "$OUT"
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
ulimit -n 20000
if [ -z "${BIN:-}" ]; then
    cargo build --profile profiling -q -p stampede --manifest-path "$root/Cargo.toml"
    BIN="${CARGO_TARGET_DIR:-$root/target}/profiling/stampede"
fi

conns=50 model=closed extra=""
case $CASE in
closed) ;;
constant) model="constant, rate: 5000" ;;
newconn) extra=$'\n    new_connection: true' ;;
conns) conns=10000 ;;
*) echo "unknown case $CASE" >&2; exit 2 ;;
esac
cat >"$work/case.yaml" <<YAML
name: profile-$CASE
target: http://127.0.0.1:$NGINX_PORT
agents: 1
request_timeout: 10s
load: { model: $model, connections: $conns, duration: ${DURATION}s }
session:
  - http: { method: GET, path: / }$extra
YAML

write_nginx_conf "$NGINX_PORT" 16000
taskset -c "$SERVER_CPU" "$NGINX" -c "$work/nginx.conf" -e "$work/nginx-error.log" &
pids+=($!)
wait_port "$NGINX_PORT"

run() { taskset -c "$LOAD_CPU" "$@" "$BIN" run "$work/case.yaml" --local --agents 1 --quiet --report "$work/report.json" >/dev/null; }
completed() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["totals"]["completed"])' "$work/report.json"; }

run perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -o "$work/stat.csv"
n=$(completed)
echo "== $CASE: $n requests; per request:"
awk -F, -v n="$n" '$3 == "task-clock" {printf "  CPU            %8.2f us\n", $1 * 1000 / n}
    $3 == "context-switches" {printf "  context switch %8.2f\n", $1 / n}
    $3 ~ /sys_enter/ {printf "  syscalls       %8.2f\n", $1 / n}' "$work/stat.csv"

run perf record -q -F 2000 -g -o "$OUT/perf.data"
echo "== CPU by object"
perf report -i "$OUT/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' | head -6
echo "== top symbols (self)"
perf report -i "$OUT/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep '%' | head -25
if command -v inferno-collapse-perf >/dev/null && command -v inferno-flamegraph >/dev/null; then
    perf script -i "$OUT/perf.data" 2>/dev/null | inferno-collapse-perf | inferno-flamegraph >"$OUT/$CASE.svg"
    echo "flame graph: $OUT/$CASE.svg"
fi
