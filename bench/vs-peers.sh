#!/usr/bin/env bash
# The one way to measure generator efficiency: Stampede next to its peers, against the same
# target, in the same run (driver: bench/vs_peers.py, which says how each figure is taken).
#
# The target runs pinned to SERVER_CPU, each generator in turn pinned to LOAD_CPU: Stampede as
# `run --local` (controller and agent in one process) and as a separate `stampede agent` next to
# a `stampede controller` process, then wrk, oha, hey and vegeta when installed, and in the
# closed and constant cases `bench/mingen` (floor-mingen): one epoll set, a send and a recv per
# request and nothing else (no parsing, no timing), the floor that the kernel's share sets for
# any epoll generator on the same connections. REPS repeats; the table gives medians, the ratios
# to wrk, oha and the floor, and which side was the limit.
#
# Cases (all by default, or name them):
#   closed       50 keep-alive connections, max rate, nginx (one worker): requests per CPU-second
#   closed-fast  the same against `stampede target http` (the project's own target), so that
#                the generator rather than nginx's worker is the limit
#   constant     5,000 requests/s over 50 connections: generator CPU per request
#   newconn      a new connection per request: connections/s, p99, TIME_WAIT on each side
#   conns        10,000 concurrent keep-alive connections: peak RSS
#   tls          50 keep-alive connections over TLS 1.3 (RSA-2048, a test CA): requests per CPU-s
#   tls-newconn  a new TLS connection per request, resuming sessions (what clients do): per CPU-s
#   tls-full     the same with every handshake a full one (`tls: { resumption: false }`); beside
#                `openssl s_time -new`, since wrk and oha always resume
#   h2           h2 over TLS, 10 connections x 10 streams: requests per CPU-second (and h2load)
#   h2c          the same in cleartext (prior knowledge)
#   sessions     a login with a data row, its token extracted from JSON and sent on three checked
#                requests: sessions per CPU-second, beside Locust (FastHttpUser) and Artillery
#   ws           WebSocket echo round trips (16-byte text) over 50 connections to the project's
#                target: messages per CPU-second, beside its HTTP/1.1 keep-alive GET
#   sse          server-sent events, 100 per reply, over 50 connections: events per CPU-second,
#                beside the same HTTP/1.1 reference
#
# Usage: bench/vs-peers.sh [CASE ...]
# Environment: DURATION (10), REPS (3), SERVER_CPU (0), LOAD_CPU (1), NGINX_PORT (18090),
# FAST_PORT (18091), TLS_PORT (18092, and the next port for h2c), CTL_PORT (17990), OUT (where the raw results go, JSON lines), STAMPEDE_BIN
# (a prebuilt binary instead of the release build, e.g. bench/pgo.sh's).
# Needs nginx, wrk, openssl and /usr/bin/time (installed from Debian when missing), and h2load
# (Debian's nghttp2-client) for the h2 cases, Locust (PyPI, into a venv under ~/.cache) and
# Artillery (npm, when npm is here) for the sessions case, installed when missing; oha (cargo install oha), hey (Debian) and vegeta
# are used when on PATH, and the floor when a C compiler (cc) is.
# Loopback only; not part of CI; every process it starts is stopped by PID on exit. A machine
# busy with other work skews the throughput figures; the CPU-time ones (per CPU-second, per
# request) much less.
set -euo pipefail

source "$(dirname "$0")/lib.sh"
command -v taskset >/dev/null && [ -x /usr/bin/time ] || {
    apt-get update -qq
    apt-get install -y -qq time util-linux >/dev/null
}

# 10,000 connections need descriptors on both sides (20,000 is this machine's ceiling).
ulimit -n 20000

tls_cases=""
for c in "$@"; do case $c in tls*|h2*) tls_cases=1 ;; esac; done
[ $# -eq 0 ] && tls_cases=1
if [ -n "$tls_cases" ] && ! command -v h2load >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq nghttp2-client openssl >/dev/null
fi

session_case=""
for c in "$@"; do [ "$c" = sessions ] && session_case=1; done
[ $# -eq 0 ] && session_case=1
LOCUST=""
if [ -n "$session_case" ]; then
    LOCUST=$(command -v locust || true)
    venv=$HOME/.cache/stampede-bench/locust
    if [ -z "$LOCUST" ]; then
        [ -x "$venv/bin/locust" ] || { python3 -m venv "$venv" && "$venv/bin/pip" install -q locust; }
        LOCUST=$venv/bin/locust
    fi
    if ! command -v artillery >/dev/null && command -v npm >/dev/null; then
        # Its browser engine (for browser flows, not used here) would download from outside.
        PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install -g -s artillery >/dev/null 2>&1 || echo "artillery did not install: its row is left out" >&2
    fi
fi

BIN=$(stampede_bin)
MINGEN=""
if command -v cc >/dev/null; then
    cc -O2 -o "$work/mingen" "$root/bench/mingen/mingen.c" && MINGEN=$work/mingen
fi
NGINX_PORT=${NGINX_PORT:-18090}
FAST_PORT=${FAST_PORT:-18091}
CTL_PORT=${CTL_PORT:-17990}
TLS_PORT=${TLS_PORT:-18092}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}

start_nginx "$NGINX_PORT" 16000
nginx_master=${pids[-1]}
TLS_PIDS=""
if [ -n "$tls_cases" ]; then
    start_nginx_tls "$TLS_PORT"
    tls_master=${pids[-1]}
    TLS_PIDS=$(cat "/proc/$tls_master/task/$tls_master/children")
fi
taskset -c "$SERVER_CPU" "$BIN" target http --listen "127.0.0.1:$FAST_PORT" >"$work/target.log" 2>&1 &
pids+=($!)
fast=$!
taskset -c "$LOAD_CPU" "$BIN" controller --listen "127.0.0.1:$CTL_PORT" --data-dir "$work/data" \
    >"$work/controller.log" 2>&1 &
pids+=($!)
wait_port "$FAST_PORT"
wait_port "$CTL_PORT"
sleep 0.5
# A port held by something else answers wait_port too: make sure the ones started here serve.
for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "a target or the controller did not start (its port in use?)" >&2; exit 1; }
done
# nginx's workers are the master's children: their CPU is the target's.
NGINX_PIDS=$(cat "/proc/$nginx_master/task/$nginx_master/children")

WORK=$work BIN=$BIN MINGEN=$MINGEN NGINX_PORT=$NGINX_PORT FAST_PORT=$FAST_PORT CTL_PORT=$CTL_PORT \
    SERVER_CPU=$SERVER_CPU LOAD_CPU=$LOAD_CPU NGINX_PIDS=$NGINX_PIDS FAST_PID=$fast \
    TLS_PORT=$TLS_PORT TLS_PIDS="$TLS_PIDS" TLS_CA=$work/tls-ca.pem LOCUST=$LOCUST \
    python3 "$root/bench/vs_peers.py" "$@"
