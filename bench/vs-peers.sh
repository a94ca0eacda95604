#!/usr/bin/env bash
# Benchmark: one Stampede agent next to its peers (wrk, and vegeta / oha where installed),
# against the same nginx, in the same script run.
#
# nginx (Debian, one worker, `return 200` of a 20-byte body, access log off) runs pinned to
# SERVER_CPU; each generator in turn runs pinned to LOAD_CPU. For Stampede, the controller runs
# as its own process (also on LOAD_CPU, it is idle during the run apart from merging one
# histogram a second) and the agent is measured alone: its CPU time over the run (from
# /proc/PID/stat) and its peak RSS (VmHWM) with recording on.
#
# Cases (all by default, or name them):
#   closed    closed model, 50 keep-alive connections, DURATION      vs  wrk -t1 -c50
#   constant  constant rate 5,000 req/s over 50 connections           vs  vegeta -rate 5000 / oha -q 5000
#             (wrk2 cannot be built here: its sources are not on a package registry)
#   conns     10,000 concurrent keep-alive connections: peak RSS      vs  wrk -t1 -c10000
#   newconn   a new connection per request (server closes)            vs  wrk -H "Connection: close"
#
# Usage: bench/vs-peers.sh [closed|constant|conns|newconn ...]
# Environment: DURATION (10s), SERVER_CPU (0), LOAD_CPU (1), NGINX_PORT (18090), CTL_PORT (17990).
# Needs nginx and wrk (apt-get install nginx-light wrk); vegeta (go install
# github.com/tsenart/vegeta/v12@latest) and oha (cargo install oha) are used when on PATH.
# Loopback only; not part of CI; every process it starts is stopped by PID on exit.
set -euo pipefail

DURATION=${DURATION:-10s}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
NGINX_PORT=${NGINX_PORT:-18090}
CTL_PORT=${CTL_PORT:-17990}
CASES=("$@")
[ ${#CASES[@]} -gt 0 ] || CASES=(closed constant conns newconn)
secs=${DURATION%s}

source "$(dirname "$0")/lib.sh"

# 10,000 connections need descriptors on both sides (20,000 is this machine's ceiling).
ulimit -n 20000

cargo build --release -q -p stampede --manifest-path "$root/Cargo.toml"
BIN="${CARGO_TARGET_DIR:-$root/target}/release/stampede"

write_nginx_conf "$NGINX_PORT" 16000
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }

taskset -c "$SERVER_CPU" "$NGINX" -c "$work/nginx.conf" -e "$work/nginx-error.log" &
pids+=($!)
taskset -c "$LOAD_CPU" "$BIN" controller --listen "127.0.0.1:$CTL_PORT" --data-dir "$work/data" \
    >"$work/controller.log" 2>&1 &
pids+=($!)
wait_port "$NGINX_PORT"
wait_port "$CTL_PORT"
URL="http://127.0.0.1:$NGINX_PORT"

# Runs SCENARIO_FILE with a fresh agent process; prints "completed seconds cpu_s rss_kb p99_ms achieved_ratio".
stampede_case() {
    local scenario=$1 agent out c0 c1 hwm
    RUST_LOG=warn taskset -c "$LOAD_CPU" "$BIN" agent --controller "http://127.0.0.1:$CTL_PORT" \
        --id bench-agent >"$work/agent.log" 2>&1 &
    agent=$!
    pids+=("$agent")
    sleep 0.5
    c0=$(cpu_ticks "$agent")
    "$BIN" run "$scenario" --controller "http://127.0.0.1:$CTL_PORT" --quiet --output json \
        --report "$work/report.json" >/dev/null || true
    c1=$(cpu_ticks "$agent")
    hwm=$(hwm_kb "$agent")
    kill "$agent"
    wait "$agent" 2>/dev/null || true
    python3 - "$work/report.json" "$((c1 - c0))" "$hz" "$hwm" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["totals"]
cpu = int(sys.argv[2]) / int(sys.argv[3])
p99 = r["latency"]["response_time"]["p99_us"] / 1000 if "response_time" in r["latency"] else float("nan")
print(t["completed"], r["duration_s"], cpu, sys.argv[4], p99, t.get("achieved_ratio", 1.0), t["failed"])
PY
}

# Runs a peer command pinned, prints "user+sys seconds" and "max rss kb" into $work/peer.time.
peer() {
    /usr/bin/time -f "%U %S %M" -o "$work/peer.time" taskset -c "$LOAD_CPU" "$@"
}
peer_cpu() { awk '{print $1 + $2}' "$work/peer.time"; }
peer_rss() { awk '{print $3}' "$work/peer.time"; }

scenario() { # name load-yaml [step-extra]
    cat > "$work/$1.yaml" <<YAML
name: bench-$1
target: $URL
agents: 1
request_timeout: 10s
load: $2
session:
  - name: get
    http: { method: GET, path: /${3:-} }
YAML
    echo "$work/$1.yaml"
}

echo "nginx on cpu $SERVER_CPU; generators on cpu $LOAD_CPU; $DURATION per run"
for case in "${CASES[@]}"; do
    case "$case" in
    closed)
        echo "== closed model, 50 keep-alive connections"
        taskset -c "$LOAD_CPU" wrk -t1 -c50 -d2s "$URL/" >/dev/null # warm-up
        f=$(scenario closed "{ model: closed, connections: 50, duration: $DURATION }")
        read -r done dur cpu rss p99 _ failed < <(stampede_case "$f")
        s_rps=$(awk -v n="$done" -v d="$dur" 'BEGIN {printf "%.0f", n / d}')
        printf '  stampede  %8s req/s  cpu %5.1f s  %5.2f us cpu/req  p99 %6.2f ms  failed %s\n' \
            "$s_rps" "$cpu" "$(awk -v c="$cpu" -v n="$done" 'BEGIN {print c * 1e6 / n}')" "$p99" "$failed"
        out=$(peer wrk -t1 -c50 -d"$DURATION" --latency "$URL/")
        w_rps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")
        w_req=$(awk '/requests in/ {print $1}' <<<"$out")
        printf '  wrk       %8s req/s  cpu %5.1f s  %5.2f us cpu/req  p99 %9s\n' \
            "$w_rps" "$(peer_cpu)" "$(awk -v c="$(peer_cpu)" -v n="$w_req" 'BEGIN {print c * 1e6 / n}')" \
            "$(awk '$1 == "99%" {print $2}' <<<"$out")"
        echo "  ratio stampede/wrk: $(awk -v a="$s_rps" -v b="$w_rps" 'BEGIN {printf "%.2f", a / b}')"
        ;;
    constant)
        echo "== constant rate, 5,000 req/s over 50 connections"
        f=$(scenario constant "{ model: constant, rate: 5000, connections: 50, duration: $DURATION }")
        read -r done dur cpu rss p99 ratio failed < <(stampede_case "$f")
        s_us=$(awk -v c="$cpu" -v n="$done" 'BEGIN {printf "%.1f", c * 1e6 / n}')
        printf '  stampede  %8.0f req/s achieved (ratio %s of planned)  %s us cpu/req  p99 %.2f ms  failed %s\n' \
            "$(awk -v n="$done" -v d="$dur" 'BEGIN {print n / d}')" "$ratio" "$s_us" "$p99" "$failed"
        if command -v vegeta >/dev/null; then
            echo "GET $URL/" > "$work/targets.txt"
            peer vegeta attack -cpus 1 -rate 5000 -duration "$DURATION" -connections 50 -max-connections 50 \
                -targets "$work/targets.txt" > "$work/vegeta.bin"
            out=$(vegeta report -type json "$work/vegeta.bin")
            v_n=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["requests"])' "$out")
            v_rate=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(round(r["throughput"]))' "$out")
            v_p99=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print(r["latencies"]["99th"]/1e6)' "$out")
            v_us=$(awk -v c="$(peer_cpu)" -v n="$v_n" 'BEGIN {printf "%.1f", c * 1e6 / n}')
            printf '  vegeta    %8s req/s achieved  %s us cpu/req  p99 %.2f ms\n' "$v_rate" "$v_us" "$v_p99"
            echo "  cpu per request, vegeta/stampede: $(awk -v a="$v_us" -v b="$s_us" 'BEGIN {printf "%.2f", a / b}')"
        fi
        if command -v oha >/dev/null; then
            peer oha --no-tui --output-format json -q 5000 -c 50 -z "$DURATION" "$URL/" > "$work/oha.json"
            o_n=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sum(r["statusCodeDistribution"].values()))' "$work/oha.json")
            o_us=$(awk -v c="$(peer_cpu)" -v n="$o_n" 'BEGIN {printf "%.1f", c * 1e6 / n}')
            printf '  oha       %8.0f req/s achieved  %s us cpu/req\n' "$(awk -v n="$o_n" -v d="$secs" 'BEGIN {print n / d}')" "$o_us"
            echo "  cpu per request, oha/stampede: $(awk -v a="$o_us" -v b="$s_us" 'BEGIN {printf "%.2f", a / b}')"
        fi
        ;;
    conns)
        echo "== 10,000 concurrent keep-alive connections: peak RSS"
        f=$(scenario conns "{ model: closed, connections: 10000, duration: $DURATION }")
        read -r done dur cpu rss p99 _ failed < <(stampede_case "$f")
        printf '  stampede agent  peak RSS %6.1f MB  (%s requests, %s failed)\n' \
            "$(awk -v k="$rss" 'BEGIN {print k / 1024}')" "$done" "$failed"
        peer wrk -t1 -c10000 -d"$DURATION" "$URL/" >/dev/null
        printf '  wrk             peak RSS %6.1f MB\n' "$(awk -v k="$(peer_rss)" 'BEGIN {print k / 1024}')"
        ;;
    newconn)
        echo "== a new connection per request (Connection: close, the server closes first)"
        cat > "$work/newconn.yaml" <<YAML
name: bench-newconn
target: $URL
agents: 1
load: { model: closed, connections: 50, duration: $DURATION }
session:
  - name: get
    new_connection: true
    http: { method: GET, path: /, headers: { Connection: close } }
YAML
        read -r done dur cpu rss p99 _ failed < <(stampede_case "$work/newconn.yaml")
        s_cps=$(awk -v n="$done" -v d="$dur" 'BEGIN {printf "%.0f", n / d}')
        printf '  stampede  %8s conn/s  failed %s\n' "$s_cps" "$failed"
        out=$(peer wrk -t1 -c50 -d"$DURATION" -H "Connection: close" "$URL/")
        w_cps=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' <<<"$out")
        printf '  wrk       %8s conn/s  (%s)\n' "$w_cps" "$(grep -o 'Socket errors.*' <<<"$out" || echo 'no socket errors')"
        echo "  ratio stampede/wrk: $(awk -v a="$s_cps" -v b="$w_cps" 'BEGIN {printf "%.2f", a / b}')"
        ;;
    *) echo "unknown case $case" >&2; exit 2 ;;
    esac
done
