#!/usr/bin/env bash
# Benchmark: what templates cost the generator. One Stampede agent, measured alone (its CPU time
# over the run, from /proc/PID/stat, divided by the requests it completed), against
# `stampede target http` on loopback, for:
#
#   static     GET /data                                       (rendered once per run)
#   templated  GET /data?user=${users.name|url}&n=${session.index}, header x-run: ${run.id}
#              (one data column and two variables, rendered per request from a 10,000-row file)
#   base       the static case with the binary of BASE (a git revision), when BASE is set
#
# under a closed load (50 keep-alive connections, as fast as the target answers) and a constant
# rate (5,000 req/s over 50 connections). The cases alternate, REPS times each, and the medians
# are printed, with the templated/static ratio of CPU per request (the zero-cost claim: the
# static case unchanged against BASE, the templated one within 15 % of it).
#
# The target runs pinned to SERVER_CPU, the controller and the agent to LOAD_CPU.
# Usage: bench/sessions.sh [closed|constant ...]
# Environment: DURATION (10s), REPS (3), BASE (unset; e.g. 9266564), SERVER_CPU (0), LOAD_CPU (1),
# HTTP_PORT (18091), CTL_PORT (17991).
# Loopback only; not part of CI; every process it starts is stopped by PID on exit.
set -euo pipefail

DURATION=${DURATION:-10s}
REPS=${REPS:-3}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
HTTP_PORT=${HTTP_PORT:-18091}
CTL_PORT=${CTL_PORT:-17991}
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(closed constant)

source "$(dirname "$0")/common.sh"
target_dir=${CARGO_TARGET_DIR:-$root/target}


# The base binary: its sources exported from git into target/bench-base/REV and built there with
# a target directory of its own (kept for the next run). Not the tree's: cargo tells workspace
# crates apart by their path within the workspace and by mtimes, and git archive's files carry
# the commit's time, so sharing one target directory would mix the two builds up.
if [ -n "${BASE:-}" ]; then
    base_dir="$target_dir/bench-base/$BASE"
    if [ ! -f "$base_dir/src/Cargo.toml" ]; then
        mkdir -p "$base_dir/src"
        git -C "$root" archive "$BASE" | tar -x -C "$base_dir/src"
    fi
    cargo build --release -q -p stampede --manifest-path "$base_dir/src/Cargo.toml" \
        --target-dir "$base_dir/target"
    cp "$base_dir/target/release/stampede" "$work/stampede-base"
fi
cargo build --release -q -p stampede --manifest-path "$root/Cargo.toml" --target-dir "$target_dir"
BIN="$target_dir/release/stampede"

RUST_LOG=warn taskset -c "$SERVER_CPU" "$BIN" target http --listen "127.0.0.1:$HTTP_PORT" \
    >"$work/target.log" 2>&1 &
pids+=($!)
wait_port "$HTTP_PORT"
URL="http://127.0.0.1:$HTTP_PORT"

python3 -c "print('name');[print(f'user {i}') for i in range(10000)]" >"$work/users.csv"

scenario() { # kind load-yaml
    local f="$work/$1-$RANDOM.yaml"
    {
        echo "name: bench-$1"
        echo "target: $URL"
        echo "agents: 1"
        echo "load: $2"
        if [ "$1" = templated ]; then
            echo "data: { users: { file: $work/users.csv, order: shuffle, on_exhausted: wrap } }"
            echo "session:"
            echo "  - http: { path: '/data?user=\${users.name|url}&n=\${session.index}', headers: { x-run: '\${run.id}' } }"
        else
            echo "session:"
            echo "  - http: { path: /data }"
        fi
    } >"$f"
    echo "$f"
}

# Runs SCENARIO with BINARY (its own controller and agent); prints "completed cpu_s failed".
stampede_case() {
    local bin=$1 scenario=$2 ctl agent c0 c1
    RUST_LOG=warn taskset -c "$LOAD_CPU" "$bin" controller --listen "127.0.0.1:$CTL_PORT" \
        --data-dir "$work/data" >"$work/controller.log" 2>&1 &
    ctl=$!
    pids+=("$ctl")
    wait_port "$CTL_PORT"
    RUST_LOG=warn taskset -c "$LOAD_CPU" "$bin" agent --controller "http://127.0.0.1:$CTL_PORT" \
        --id bench-agent >"$work/agent.log" 2>&1 &
    agent=$!
    pids+=("$agent")
    sleep 0.5
    c0=$(cpu_ticks "$agent")
    "$bin" run "$scenario" --controller "http://127.0.0.1:$CTL_PORT" --quiet --output json \
        --report "$work/report.json" >/dev/null || true
    c1=$(cpu_ticks "$agent")
    kill "$agent" "$ctl"
    wait "$agent" "$ctl" 2>/dev/null || true
    python3 - "$work/report.json" "$((c1 - c0))" "$hz" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["totals"]
print(t["completed"], int(sys.argv[2]) / int(sys.argv[3]), t["failed"])
PY
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo "target on cpu $SERVER_CPU; controller and agent on cpu $LOAD_CPU; $DURATION per run, $REPS runs per case"
for case in "${CASES[@]}"; do
    case "$case" in
    closed) load="{ model: closed, connections: 50, duration: $DURATION }" ;;
    constant) load="{ model: constant, rate: 5000, connections: 50, duration: $DURATION }" ;;
    *) echo "unknown case $case" >&2; exit 2 ;;
    esac
    echo "== $case: $load"
    kinds=(static templated)
    [ -n "${BASE:-}" ] && kinds=(base static templated)
    for rep in $(seq 1 "$REPS"); do
        for kind in "${kinds[@]}"; do
            bin=$BIN
            scen_kind=$kind
            if [ "$kind" = base ]; then bin="$work/stampede-base"; scen_kind=static; fi
            read -r done cpu failed < <(stampede_case "$bin" "$(scenario "$scen_kind" "$load")")
            us=$(awk -v c="$cpu" -v n="$done" 'BEGIN {printf "%.2f", (n > 0 ? c * 1e6 / n : 0)}')
            printf '  run %d  %-9s %9d requests  cpu %6.2f s  %6s us cpu/req  failed %s\n' \
                "$rep" "$kind" "$done" "$cpu" "$us" "$failed"
            echo "$us" >>"$work/$case-$kind.us"
        done
    done
    for kind in "${kinds[@]}"; do
        printf '  median %-9s %6s us cpu/req\n' "$kind" "$(median <"$work/$case-$kind.us")"
    done
    s=$(median <"$work/$case-static.us")
    t=$(median <"$work/$case-templated.us")
    echo "  templated / static: $(awk -v a="$t" -v b="$s" 'BEGIN {printf "%.3f", a / b}')"
    if [ -n "${BASE:-}" ]; then
        b=$(median <"$work/$case-base.us")
        echo "  static / base:      $(awk -v a="$s" -v b="$b" 'BEGIN {printf "%.3f", a / b}')"
    fi
done
