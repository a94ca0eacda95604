#!/usr/bin/env bash
# Benchmark: unary gRPC calls per generator CPU-second. A closed load of CONNECTIONS connections,
# each making calls back to back for DURATION, against the same target on loopback:
#
#   grpc   Stampede: `stampede run --local` (the CLI, a controller and one agent in one process;
#          all of its CPU time counts) calling stampede.target.v1.Target/Echo on
#          `stampede target grpc`, the message encoded once by the CLI
#   ghz    the same calls with ghz (`-c CONNECTIONS --connections CONNECTIONS`, the same .proto and
#          message), when `ghz` is on PATH or in ~/go/bin (GOFLAGS=-mod=mod go install
#          github.com/bojand/ghz/cmd/ghz@latest); its process's CPU time
#   h2     Stampede's own HTTP/2 path for reference: GET /data (http_version "2", 16-byte
#          bodies) against `stampede target http`
#
# CPU time is the finished generator's (getrusage of the child). The cases alternate, REPS times
# each; the medians of calls per CPU-second are printed, with the ratios grpc/ghz and grpc/h2.
# The targets run pinned to SERVER_CPU, the generators to LOAD_CPU.
# Usage: bench/grpc.sh [grpc|ghz|h2 ...]
# Environment: DURATION (10s), REPS (3), CONNECTIONS (50), SERVER_CPU (0), LOAD_CPU (1),
# GRPC_PORT (18151), HTTP_PORT (18152).
# Loopback only; not part of CI; every process it starts is stopped by PID on exit.
set -euo pipefail

DURATION=${DURATION:-10s}
REPS=${REPS:-3}
CONNECTIONS=${CONNECTIONS:-50}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
GRPC_PORT=${GRPC_PORT:-18151}
HTTP_PORT=${HTTP_PORT:-18152}
CASES=("$@")

source "$(dirname "$0")/common.sh"
target_dir=${CARGO_TARGET_DIR:-$root/target}
cargo build --release -q -p stampede --manifest-path "$root/Cargo.toml" --target-dir "$target_dir"
BIN="$target_dir/release/stampede"
GHZ=$(command -v ghz || echo "$HOME/go/bin/ghz")
if [ ${#CASES[@]} -eq 0 ]; then
    CASES=(grpc h2)
    if [ -x "$GHZ" ]; then CASES=(grpc ghz h2); fi
fi
PROTO_DIR="$root/target-servers/proto"
PROTO=stampede/target/v1/target.proto
MESSAGE='{"text":"hello","id":42}'

RUST_LOG=warn taskset -c "$SERVER_CPU" "$BIN" target grpc --listen "127.0.0.1:$GRPC_PORT" \
    >"$work/grpc-target.log" 2>&1 &
pids+=($!)
RUST_LOG=warn taskset -c "$SERVER_CPU" "$BIN" target http --listen "127.0.0.1:$HTTP_PORT" \
    --bytes 16 >"$work/http-target.log" 2>&1 &
pids+=($!)
wait_port "$GRPC_PORT"
wait_port "$HTTP_PORT"

# cpu_of OUT CMD...: runs CMD on LOAD_CPU (stdout to OUT) and prints its CPU seconds.
cpu_of() {
    local out=$1
    shift
    python3 - "$out" taskset -c "$LOAD_CPU" "$@" <<'PY'
import resource, subprocess, sys
with open(sys.argv[1], "w") as out:
    subprocess.run(sys.argv[2:], stdout=out, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(r.ru_utime + r.ru_stime)
PY
}

# One run of CASE; prints "calls cpu_s failed".
run_case() {
    local f="$work/$1.yaml" cpu
    local load="{ model: closed, connections: $CONNECTIONS, duration: $DURATION }"
    case $1 in
    grpc | h2)
        {
            echo "name: bench-$1"
            echo "agents: 1"
            echo "load: $load"
            echo "max_error_rate: none"
            if [ "$1" = grpc ]; then
                echo "target: grpc://127.0.0.1:$GRPC_PORT"
                echo "grpc: { proto_files: [$PROTO_DIR/$PROTO] }"
                echo "session: [ { grpc: { method: stampede.target.v1.Target/Echo, message: $MESSAGE } } ]"
            else
                echo "target: http://127.0.0.1:$HTTP_PORT"
                echo 'http_version: "2"'
                echo "session: [ { http: { path: /data } } ]"
            fi
        } >"$f"
        cpu=$(RUST_LOG=warn cpu_of "$work/$1.out" "$BIN" run "$f" --local --quiet --report "$work/$1.json")
        python3 - "$work/$1.json" "$cpu" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
print(t["completed"], sys.argv[2], t["failed"])
PY
        ;;
    ghz)
        cpu=$(cpu_of "$work/ghz.json" "$GHZ" --insecure --import-paths "$PROTO_DIR" --proto "$PROTO" \
            --call stampede.target.v1.Target/Echo -d "$MESSAGE" -c "$CONNECTIONS" \
            --connections "$CONNECTIONS" -z "$DURATION" -O json "127.0.0.1:$GRPC_PORT")
        python3 - "$work/ghz.json" "$cpu" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ok = d.get("statusCodeDistribution", {}).get("OK", 0)
print(ok, sys.argv[2], d["count"] - ok)
PY
        ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
    esac
}

echo "targets on cpu $SERVER_CPU; generators on cpu $LOAD_CPU; closed load, $CONNECTIONS connections, $DURATION per run, $REPS runs per case"
for rep in $(seq 1 "$REPS"); do
    for c in "${CASES[@]}"; do
        read -r calls cpu failed < <(run_case "$c")
        rate=$(awk -v n="$calls" -v c="$cpu" 'BEGIN {printf "%.0f", (c > 0 ? n / c : 0)}')
        printf '  run %d  %-5s %9d calls  cpu %6.2f s  %8s calls/cpu-s  failed %s\n' \
            "$rep" "$c" "$calls" "$cpu" "$rate" "$failed"
        echo "$rate" >>"$work/$c.rate"
    done
done
for c in "${CASES[@]}"; do
    median <"$work/$c.rate" >"$work/$c.median"
    printf '  median %-5s %8s calls/cpu-s\n' "$c" "$(cat "$work/$c.median")"
done
for other in ghz h2; do
    if [ -f "$work/$other.median" ] && [ -f "$work/grpc.median" ]; then
        echo "  grpc / $other: $(awk -v a="$(cat "$work/grpc.median")" -v b="$(cat "$work/$other.median")" \
            'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}')"
    fi
done
