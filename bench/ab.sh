#!/usr/bin/env bash
# Two builds of Stampede on one load case, alternated: what a change to the generator did to its
# CPU per request, measured the same minutes so that the machine's drift (10-30 % from one hour
# to the next on a small VM) falls on both. Each run is `stampede run --local --agents 1` against
# nginx (one worker); its CPU is the process's user + system time, divided by the requests it
# completed. Prints every run, the medians and B's median over A's.
#
# Usage: bench/ab.sh BIN_A BIN_B   (two release binaries, e.g. a base revision's and this one's)
# Environment: CASE (constant: RATE/s over CONNS connections; closed: CONNS connections; newconn:
# CONNS closed-loop connections, a new one per request),
# RATE (5000), CONNS (50), DURATION_S (5), REPS (5), SERVER_CPU (0), LOAD_CPU (1),
# NGINX_PORT (18094). Loopback only; not part of CI; every process it starts is stopped by PID.
set -euo pipefail
CASE=${CASE:-constant}
RATE=${RATE:-5000}
CONNS=${CONNS:-50}
DURATION_S=${DURATION_S:-5}
REPS=${REPS:-5}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
NGINX_PORT=${NGINX_PORT:-18094}
[ $# = 2 ] || { sed -n 2,11p "$0" >&2; exit 2; }
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"

case $CASE in
constant) load="{ model: constant, rate: $RATE, connections: $CONNS, duration: ${DURATION_S}s }" ;;
closed) load="{ model: closed, connections: $CONNS, duration: ${DURATION_S}s }" ;;
newconn)
    load="{ model: closed, connections: $CONNS, duration: ${DURATION_S}s }"
    extra=$'\n    new_connection: true'
    ;;
*) echo "unknown CASE $CASE" >&2; exit 2 ;;
esac
write_get_case "$work/case.yaml" "ab-$CASE" "$NGINX_PORT" "$load" "${extra:-}"

start_nginx "$NGINX_PORT" 4096

a_us=()
b_us=()
for rep in $(seq 1 "$REPS"); do
    # A first in odd repeats, B first in even ones.
    order=(A B)
    if [ $((rep % 2)) = 0 ]; then order=(B A); fi
    for which in "${order[@]}"; do
        bin=$([ "$which" = A ] && echo "$1" || echo "$2")
        cpu=$(cpu_of taskset -c "$LOAD_CPU" "$bin" run "$work/case.yaml" --local --agents 1 --quiet \
            --report "$work/report.json")
        done_n=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["totals"]["completed"])' \
            "$work/report.json")
        us=$(awk -v c="$cpu" -v n="$done_n" 'BEGIN { printf "%.2f", n ? c / n * 1e6 : 0 }')
        if [ "$which" = A ]; then a_us+=("$us"); else b_us+=("$us"); fi
        echo "rep $rep $which: $done_n requests, $us us of CPU per request"
    done
done
a=$(printf '%s\n' "${a_us[@]}" | median)
b=$(printf '%s\n' "${b_us[@]}" | median)
echo "median: A $a us, B $b us of CPU per request (B/A $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }'); $CASE, ${DURATION_S} s runs, $REPS each)"
