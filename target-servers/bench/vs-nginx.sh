#!/usr/bin/env bash
# Benchmark: the `http` target's `GET /` keep-alive throughput next to nginx's.
#
# nginx (Debian package, one worker, `return 200` of the same 20-byte body, access log off) and
# the http target each run pinned to CPU 0 with taskset; wrk (Debian package) drives each in turn
# from CPU 1. The script prints req/s, the server's CPU use during the run (near 100% means the
# server, not wrk, was the bottleneck), and the ratio target/nginx.
#
# Usage (from anywhere in the repo; needs root for apt-get unless nginx and wrk are installed):
#   target-servers/bench/vs-nginx.sh
# Environment: DURATION (default 15s), CONNECTIONS (64), ROUNDS (2), SERVER_CPU (0), LOAD_CPU (1),
#   NGINX_PORT (18080), TARGET_PORT (18081), RUNTIME (multi-thread | current-thread).
# Not part of CI. Loopback only.
set -euo pipefail

DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-2}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
NGINX_PORT=${NGINX_PORT:-18080}
TARGET_PORT=${TARGET_PORT:-18081}
RUNTIME=${RUNTIME:-multi-thread}

source "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)/bench/lib.sh"

# 2. The target, release build.
cargo build --release -q -p stampede-target-servers --example target --manifest-path "$root/Cargo.toml"
TARGET_BIN="$root/target/release/examples/target"

start_nginx "$NGINX_PORT"
STAMPEDE_TARGET_RUNTIME=$RUNTIME RUST_LOG=warn taskset -c "$SERVER_CPU" "$TARGET_BIN" http --listen "127.0.0.1:$TARGET_PORT" &
target_pid=$!
pids+=("$target_pid")
wait_port "$TARGET_PORT"
nginx_pids=$(pgrep -P "${pids[0]}" || true)   # the worker(s) of the nginx master we started
nginx_all="${pids[0]} $nginx_pids"

curl_check() { # a sanity check that both answer the same body
    local body
    body=$(exec 3<>"/dev/tcp/127.0.0.1/$1"; printf 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3; cat <&3)
    case "$body" in *"hello from stampede"*) ;; *) echo "unexpected answer on port $1: $body" >&2; exit 1;; esac
}
curl_check "$NGINX_PORT"
curl_check "$TARGET_PORT"

run() { # name port pids...
    local name=$1 port=$2; shift 2
    taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d2s "http://127.0.0.1:$port/" >/dev/null # warm-up
    local t0 c0 out t1 c1 rps cpu
    c0=$(cpu_ticks "$@"); t0=$(date +%s.%N)
    out=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency "http://127.0.0.1:$port/")
    c1=$(cpu_ticks "$@"); t1=$(date +%s.%N)
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    cpu=$(awk -v c="$((c1 - c0))" -v hz="$hz" -v t0="$t0" -v t1="$t1" 'BEGIN {printf "%.0f", 100 * c / hz / (t1 - t0)}')
    local p99
    p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
    local per_cpu
    per_cpu=$(awk -v r="$rps" -v c="$cpu" 'BEGIN {if (c > 0) printf "%.0f", r * 100 / c; else print 0}')
    printf '%-7s %9.0f req/s   server cpu %3s%%   %9s req per cpu-second   p99 %s\n' \
        "$name" "$rps" "$cpu" "$per_cpu" "$p99" >&2
    echo "$rps $per_cpu"
}

echo "wrk -t1 -c$CONNECTIONS -d$DURATION, servers on cpu $SERVER_CPU, wrk on cpu $LOAD_CPU, target runtime $RUNTIME" >&2
results=""
for r in $(seq 1 "$ROUNDS"); do
    results+="nginx $(run nginx "$NGINX_PORT" $nginx_all)"$'\n'
    results+="target $(run target "$TARGET_PORT" "$target_pid")"$'\n'
done
# Mean req/s, and mean req per server cpu-second (steadier when other work shares the machine).
awk -v rounds="$ROUNDS" '
    NF == 3 { rps[$1] += $2; eff[$1] += $3 }
    END {
        printf "mean over %d rounds: nginx %.0f req/s, target %.0f req/s, ratio target/nginx %.2f\n",
            rounds, rps["nginx"] / rounds, rps["target"] / rounds, rps["target"] / rps["nginx"]
        printf "per server cpu-second: nginx %.0f, target %.0f, ratio target/nginx %.2f\n",
            eff["nginx"] / rounds, eff["target"] / rounds, eff["target"] / eff["nginx"]
    }' <<<"$results"
