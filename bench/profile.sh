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
# with line tables), TOOL (stampede, or wrk for the same case side by side: closed, newconn
# and conns; wrk has no constant rate), FLAME_STATIC (set: the flame graph without its script,
# as docs/flame keeps it). Needs perf (apt-get install linux-perf). Loopback only.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CASE=${1:-closed}
DURATION=${DURATION:-5}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
NGINX_PORT=${NGINX_PORT:-18090}
OUT=${OUT:-$work}
TOOL=${TOOL:-stampede}
mkdir -p "$OUT"
command -v perf >/dev/null || { echo "perf is not installed (apt-get install linux-perf)" >&2; exit 2; }
case $TOOL/$CASE in
stampede/* | wrk/closed | wrk/newconn | wrk/conns) ;;
*) echo "TOOL=$TOOL cannot run the $CASE case" >&2; exit 2 ;;
esac
ulimit -n 20000
if [ "$TOOL" = stampede ] && [ -z "${BIN:-}" ]; then
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
write_get_case "$work/case.yaml" "profile-$CASE" "$NGINX_PORT" \
    "{ model: $model, connections: $conns, duration: ${DURATION}s }" "$extra"

start_nginx "$NGINX_PORT" 16000

if [ "$TOOL" = wrk ]; then
    # The same load as the scenario: one thread, the same connections, the server asked to
    # close after each response in the newconn case.
    close=()
    [ "$CASE" = newconn ] && close=(-H "Connection: close")
    run() { taskset -c "$LOAD_CPU" "$@" wrk -t1 -c"$conns" -d"${DURATION}s" "${close[@]}" "http://127.0.0.1:$NGINX_PORT/" >"$work/wrk.out"; }
    completed() { awk '/requests in/ {print $1}' "$work/wrk.out"; }
else
    run() { taskset -c "$LOAD_CPU" "$@" "$BIN" run "$work/case.yaml" --local --agents 1 --quiet --report "$work/report.json" >/dev/null; }
    completed() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["totals"]["completed"])' "$work/report.json"; }
fi

run perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -o "$work/stat.csv"
n=$(completed)
echo "== $TOOL $CASE: $n requests; per request:"
awk -F, -v n="$n" '$3 == "task-clock" {printf "  CPU            %8.2f us\n", $1 * 1000 / n}
    $3 == "context-switches" {printf "  context switch %8.2f\n", $1 / n}
    $3 ~ /sys_enter/ {printf "  syscalls       %8.2f\n", $1 / n}' "$work/stat.csv"

run perf record -q -F 2000 -g -o "$OUT/perf.data"
# `head` closes the pipe before perf has written everything: under pipefail that is not a
# failure of the script.
top() { perf report -i "$OUT/perf.data" --no-children --sort "$1" --stdio -g none 2>/dev/null | grep '%' | head -"$2" || true; }
echo "== CPU by object"
top dso 6
echo "== top symbols (self)"
top sym 25
if command -v inferno-collapse-perf >/dev/null && command -v inferno-flamegraph >/dev/null; then
    us=$(awk -F, -v n="$n" '$3 == "task-clock" {printf "%.2f", $1 * 1000 / n}' "$work/stat.csv")
    # Frames narrower than a pixel are left out: the graph stays small enough to keep in docs/.
    perf script -i "$OUT/perf.data" 2>/dev/null | inferno-collapse-perf |
        inferno-flamegraph --minwidth 1 --title "$TOOL, $CASE: $us us of CPU per request" >"$OUT/$TOOL-$CASE.svg"
    echo "flame graph: $OUT/$TOOL-$CASE.svg"
    if [ -n "${FLAME_STATIC:-}" ]; then
        # The form kept in docs/flame: the picture and each frame's tooltip, without the
        # generator's script (zoom and search) or its comments.
        python3 - "$OUT/$TOOL-$CASE.svg" <<'PY'
import re, sys
path = sys.argv[1]
svg = open(path).read()
svg = re.sub(r"<script.*?</script>|<!--.*?-->", "", svg, flags=re.S)
svg = svg.replace(' onload="init(evt)"', "")
svg = re.sub(r'<text id="(unzoom|search|matched)"[^>]*>[^<]*</text>', "", svg)
open(path, "w").write(svg)
PY
    fi
fi
