#!/usr/bin/env bash
# Stampede's constant case against the least a generator can do (docs/performance.md, "Constant
# rate: wake-ups and ticks"): `bench/mingen/mingen.c` (one epoll set, a 1 ms
# timerfd, one send and one recv per request, nothing else) and `stampede run --local --agents 1`
# at the same rate over the same keep-alive connections, against `stampede target http`, the
# two alternated REPS times. Prints each run's CPU per answered request and the medians: what
# Stampede's tasks, timers, parsing and histograms cost above the syscalls both make. RATE=0
# compares the closed loop instead (each connection's next request sent on its answer).
#
# The target runs pinned to SERVER_CPU, both generators to LOAD_CPU.
# Environment: RATE (5000), CONNS (50), DURATION_S (5), REPS (3), SERVER_CPU (0), LOAD_CPU (1),
# HTTP_PORT (18093), STAMPEDE_BIN (a prebuilt binary instead of building one).
# Needs a C compiler. Loopback only; not part of CI; every process it starts is stopped by PID.
set -euo pipefail
RATE=${RATE:-5000}
CONNS=${CONNS:-50}
DURATION_S=${DURATION_S:-5}
REPS=${REPS:-3}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
HTTP_PORT=${HTTP_PORT:-18093}
# shellcheck source=bench/common.sh
source "$(dirname "$0")/common.sh"

BIN=$(stampede_bin)
cc -O2 -o "$work/mingen" "$root/bench/mingen/mingen.c"

RUST_LOG=warn taskset -c "$SERVER_CPU" "$BIN" target http --listen "127.0.0.1:$HTTP_PORT" \
    --threads 1 >"$work/target.log" 2>&1 &
pids+=($!)
wait_port "$HTTP_PORT"

if [ "$RATE" = 0 ]; then
    load="{ model: closed, connections: $CONNS, duration: ${DURATION_S}s }"
else
    load="{ model: constant, rate: $RATE, connections: $CONNS, duration: ${DURATION_S}s }"
fi
write_get_case "$work/constant.yaml" min-generator "$HTTP_PORT" "$load"

mingen_us=()
stampede_us=()
for rep in $(seq 1 "$REPS"); do
    for tool in mingen stampede; do
        # Alternate which goes first.
        if [ $((rep % 2)) = 0 ]; then tool=$([ "$tool" = mingen ] && echo stampede || echo mingen); fi
        if [ "$tool" = mingen ]; then
            taskset -c "$LOAD_CPU" "$work/mingen" "$HTTP_PORT" "$RATE" "$CONNS" "$DURATION_S" >"$work/out"
            us=$(grep -oE '= [0-9.]+ us/request' "$work/out" | tr -dc '0-9.')
            answered=$(grep -oE 'answered [0-9]+' "$work/out" | tr -dc 0-9)
            mingen_us+=("$us")
        else
            cpu=$(cpu_of taskset -c "$LOAD_CPU" "$BIN" run "$work/constant.yaml" --local --agents 1 --output json)
            answered=$(grep -oE '"completed": ?[0-9]+' "$work/out" | head -1 | tr -dc 0-9)
            us=$(awk -v c="$cpu" -v n="$answered" 'BEGIN { printf "%.2f", c / n * 1e6 }')
            stampede_us+=("$us")
        fi
        echo "rep $rep $tool: $answered answered, $us us of CPU per request"
    done
done

m=$(printf '%s\n' "${mingen_us[@]}" | median)
s=$(printf '%s\n' "${stampede_us[@]}" | median)
what=$([ "$RATE" = 0 ] && echo "closed" || echo "$RATE/s")
echo "median: mingen $m us, stampede $s us of CPU per request ($(awk -v s="$s" -v m="$m" 'BEGIN { printf "%.2f", s / m }')x; $what over $CONNS connections, ${DURATION_S} s runs)"
