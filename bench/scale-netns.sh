#!/usr/bin/env bash
# bench/scale-netns.sh — one Stampede run holding CONNS (default 100,000) concurrent
# connections to ONE target ip:port, more than one source IP's ephemeral port range allows
# (28,232 ports by default, 64,512 at most) and more than one process may hold (20,000 open
# files here).
#
# Usage (as root; needs `ip`, `ss`, `jq`):
#   bench/scale-netns.sh              # hold CONNS connections from AGENTS agents, one source IP each
#   bench/scale-netns.sh shared-ip    # the same agents in ONE namespace sharing ONE source IP:
#                                     # shows what the controller says (the port budget)
# Settings (environment): CONNS=100000 AGENTS=6 TARGETS=8 DURATION=30s (shared-ip: 5s)
#   RAMP (unset: every connection opens at T0; `RAMP=20s`: a closed stage ramp from 0 to CONNS
#   over that long, then DURATION at CONNS, with the connect times per stage in the report),
#   THINK_MIN=5s THINK_MAX=15s, PORT_RANGE="1024 65535" (the agents' ip_local_port_range: with
#   the default 28,232 ports, connect()'s port probing took most of the agents' CPU in the
#   kernel and starved their control streams), LEASE=10s (the controller's agent lease),
#   PROTO=ws (each connection a WebSocket to the targets' /ws echo: one upgrade, then an echo
#   every THINK_MIN-THINK_MAX; prints the agents' RSS per held connection above their idle RSS,
#   and their anonymous memory per held connection, without the code pages a first run maps),
#   STAMPEDE_BIN (default target/release/stampede, built with
#   `cargo build --release -p stampede` when missing), KEEP=1 keeps the work directory.
#
# What it builds (all of it created here and removed on exit, also on failure or Ctrl-C):
#   netns stmp-t      bridge stmp-br 198.18.0.1/15; the controller (198.18.0.1:7070), TARGETS
#                     `stampede target http --listen 198.18.0.1:8080 --reuse-port` processes
#                     sharing that one ip:port (SO_REUSEPORT), each under 20,000 open files,
#                     and `stampede run` (the CLI), which reaches the controller there
#   netns stmp-aN     eth0 198.18.1.N/15, a veth into the bridge; agent aN
#                     (shared-ip: one namespace stmp-a1, every agent in it, one source IP)
# Addresses are in 198.18.0.0/15 (the benchmarking range) only, and no namespace has a route
# beyond its /15 link, so no other address can receive traffic. The root namespace is not
# touched: veth pairs are created directly inside the namespaces.
#
# The scenario is a closed load (`load: {model: closed, connections: CONNS, duration}`), each
# connection sending keep-alive `GET /` with a think time between requests so the CPU stays
# low. While it runs the script counts established server-side sockets on :8080 with `ss`
# (in stmp-t), and prints the report's `connections.peak_open` (the maximum over intervals
# of the sum of the agents' per-interval peaks) beside it:
#   held N concurrent connections to 198.18.0.1:8080
#   ss saw M
# It exits non-zero when N < CONNS. Every step is bounded (`timeout`, bounded waits): after the
# build, at most about 7 minutes; a 100,000-connection run takes about a minute and a half.
# Interrupted with SIGKILL it cannot clean up: `ip netns del stmp-t stmp-a1 ...` then.
set -euo pipefail

MODE=${1:-spread}
CONNS=${CONNS:-100000}
AGENTS=${AGENTS:-6}
TARGETS=${TARGETS:-8}
THINK_MIN=${THINK_MIN:-5s}
THINK_MAX=${THINK_MAX:-15s}
if [ "$MODE" = shared-ip ]; then DURATION=${DURATION:-5s}; else DURATION=${DURATION:-30s}; fi
RAMP=${RAMP:-} # e.g. 20s: open the connections over a ramp instead of all at T0
PROTO=${PROTO:-http}
case $PROTO in http | ws) ;; *)
    echo "PROTO is http or ws" >&2
    exit 2
    ;;
esac
case $MODE in spread | shared-ip) ;; *)
    echo "usage: $0 [spread|shared-ip]" >&2
    exit 2
    ;;
esac

PORT_RANGE=${PORT_RANGE:-1024 65535} # agents' ephemeral ports (per netns)
TARGET_IP=198.18.0.1
TARGET_PORT=8080
CTRL=$TARGET_IP:7070
PER_PROCESS=17000 # connections one process may hold (limit 20,000 open files)
NS_T=stmp-t
BRIDGE=stmp-br

[ "$(id -u)" = 0 ] || {
    echo "run as root (it creates network namespaces)" >&2
    exit 2
}
for tool in ip ss jq timeout; do command -v $tool >/dev/null || {
    echo "missing $tool" >&2
    exit 2
}; done
per_agent=$(((CONNS + AGENTS - 1) / AGENTS))
per_target=$(((CONNS + TARGETS - 1) / TARGETS))
if [ "$per_agent" -gt $PER_PROCESS ] || [ "$per_target" -gt $PER_PROCESS ]; then
    echo "$CONNS connections need more processes: $per_agent per agent, $per_target per target (at most $PER_PROCESS each)" >&2
    exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${STAMPEDE_BIN:-$root/target/release/stampede}
if [ ! -x "$BIN" ]; then
    echo "building $BIN"
    (cd "$root" && timeout 1800 cargo build --release -p stampede)
    BIN=$root/target/release/stampede
fi

# ------------------------------------------------------------------ cleanup of what we made
work=$(mktemp -d /tmp/stmp-scale.XXXXXX)
pids=()
namespaces=()
cleanup() {
    local rc=$? p i
    set +e
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for i in $(seq 1 100); do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    for ((i = ${#namespaces[@]} - 1; i >= 0; i--)); do ip netns del "${namespaces[i]}"; done
    if [ "${KEEP:-0}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

export STAMPEDE_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
ulimit -Sn "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge 20000 ] || echo "note: open-file limit is $(ulimit -n)" >&2

# ------------------------------------------------------------------ network
add_ns() {
    if ip netns list | grep -qw "$1"; then
        echo "network namespace $1 already exists (an earlier run killed hard?): remove it with 'ip netns del $1'" >&2
        exit 2
    fi
    ip netns add "$1"
    namespaces+=("$1")
    ip -n "$1" link set lo up
    # Cubic, not the host's default (often BBR, which paces every socket with its own
    # hrtimer when the device has no fq qdisc, as veth has not): cheaper for 100,000 sockets.
    ip netns exec "$1" sysctl -qw net.ipv4.tcp_congestion_control=cubic 2>/dev/null || true
}
add_ns $NS_T
ip -n $NS_T link add $BRIDGE type bridge
ip -n $NS_T addr add $TARGET_IP/15 dev $BRIDGE
ip -n $NS_T link set $BRIDGE up
ip netns exec $NS_T sysctl -qw net.core.somaxconn=65535 net.ipv4.tcp_max_syn_backlog=65535

agent_ns=()
if [ "$MODE" = shared-ip ]; then n_ns=1; else n_ns=$AGENTS; fi
for i in $(seq 1 "$n_ns"); do
    ns=stmp-a$i
    add_ns "$ns"
    ip link add "stmp-a$i-p" netns $NS_T type veth peer name eth0 netns "$ns"
    ip -n $NS_T link set "stmp-a$i-p" master $BRIDGE up
    ip -n "$ns" addr add "198.18.1.$i/15" dev eth0
    ip -n "$ns" link set eth0 up
    # The whole unprivileged range: connect() looks for a free port by probing, and its cost
    # (the kernel's __inet_hash_connect/__inet_check_established, profiled at ~70% of the
    # agents' CPU with the default 28,232 ports) grows with the share of the range in use.
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_local_port_range="$PORT_RANGE"
    agent_ns+=("$ns")
done
echo "ephemeral ports per source IP: $(ip netns exec stmp-a1 cat /proc/sys/net/ipv4/ip_local_port_range | awk '{print $2 - $1 + 1}')" \
    "(ip_local_port_range $(ip netns exec stmp-a1 cat /proc/sys/net/ipv4/ip_local_port_range | tr '\t' ' '))"

# Foreground only: started with `&`, a function runs in a subshell whose PID is not the
# command's (background processes are started with `ip netns exec` directly, which execs).
in_t() { ip netns exec $NS_T "$@"; }
wait_for() { # wait_for SECONDS WHAT COMMAND...: until COMMAND succeeds
    local limit=$1 what=$2
    shift 2
    for _ in $(seq 1 $((limit * 5))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    echo "timed out waiting for $what" >&2
    return 1
}

# ------------------------------------------------------------------ processes
# The controller gets CPU first: the connection storm at T0 (every connection opens at once)
# keeps 2 cores busy for seconds, and the agents' control streams must keep their keepalives.
nice -n -10 ip netns exec $NS_T "$BIN" controller --listen $CTRL --data-dir "$work/data" --kube off --lease "${LEASE:-10s}" >"$work/controller.log" 2>&1 &
pids+=($!)
target_pids=()
for j in $(seq 1 "$TARGETS"); do
    nice -n 5 ip netns exec $NS_T "$BIN" target http --listen $TARGET_IP:$TARGET_PORT --reuse-port \
        --max-connections 19000 --read-timeout 60s >"$work/target$j.log" 2>&1 &
    pids+=($!)
    target_pids+=($!)
done
listeners() { [ "$(in_t timeout 10 ss -Hltn "( sport = :$TARGET_PORT )" | wc -l)" -ge "$TARGETS" ]; }
wait_for 30 "$TARGETS listeners on $TARGET_IP:$TARGET_PORT" listeners
wait_for 30 "the controller" in_t timeout 5 "$BIN" agents --controller "http://$CTRL"

agent_pids=()
for i in $(seq 1 "$AGENTS"); do
    ns=${agent_ns[$(((i - 1) % n_ns))]}
    ip netns exec "$ns" "$BIN" agent --controller "http://$CTRL" --id "a$i" --capacity 19000 \
        >"$work/agent$i.log" 2>&1 &
    pids+=($!)
    agent_pids+=($!)
done
attached() { [ "$(in_t timeout 5 "$BIN" agents --controller "http://$CTRL" --output json | jq length)" -ge "$AGENTS" ]; }
wait_for 30 "$AGENTS agents" attached
echo "$AGENTS agents in ${n_ns} namespace(s), $TARGETS target processes on $TARGET_IP:$TARGET_PORT (--reuse-port)"
# The agents' resident memory before any load: what a held connection adds is measured above it.
# Their anonymous memory too (RSS less the binary's pages): the first run also pages in the
# code of the load path, a few MiB per agent once, whatever the number of connections.
sum_status() { # sum_status FIELD: FIELD of /proc/PID/status (kB) summed over the agents
    local total=0 p v
    for p in "${agent_pids[@]}"; do
        v=$(awk -v f="$1:" '$1 == f {print $2}' "/proc/$p/status" 2>/dev/null)
        total=$((total + ${v:-0}))
    done
    echo $total
}
idle_kib=$(sum_status VmRSS)
idle_anon_kib=$(sum_status RssAnon)

if [ -n "$RAMP" ]; then
    load="load: { model: closed, stages: [ { connections: $CONNS, duration: $RAMP }, { connections: $CONNS, duration: $DURATION } ] }"
else
    load="load: { model: closed, connections: $CONNS, duration: $DURATION }"
fi
if [ "$PROTO" = ws ]; then
    # One upgrade, then echoes far apart: the connections are held, and mostly idle. The session
    # outlasts the run, so nothing reconnects.
    session="  - name: connect
    ws: { connect: { path: /ws } }"
    for _ in $(seq 1 12); do
        session+="
  - think_time: { min: $THINK_MIN, max: $THINK_MAX }
  - name: echo
    ws: { send: { text: 0123456789abcdef }, receive: 1 }"
    done
else
    session="  - name: hello
    http: { method: GET, path: / }
  - think_time: { min: $THINK_MIN, max: $THINK_MAX }"
fi
cat >"$work/scale.yaml" <<YAML
name: scale-netns-$MODE
target: $PROTO://$TARGET_IP:$TARGET_PORT
agents: $AGENTS
request_timeout: 30s
$load
session:
$session
YAML

# ------------------------------------------------------------------ the run
start=$(date +%s.%N)
ip netns exec $NS_T timeout 300 "$BIN" run "$work/scale.yaml" --controller "http://$CTRL" --report "$work/report.json" \
    --quiet >"$work/run.txt" 2>&1 &
run_pid=$!
pids+=($run_pid)
ss_max=0
anon_max=0
held_anon=() # the agents' anonymous memory while every connection is held
held_rss=()  # and their whole resident memory then
while kill -0 $run_pid 2>/dev/null; do
    a=$(sum_status RssAnon)
    r=$(sum_status VmRSS)
    [ "$a" -gt "$anon_max" ] && anon_max=$a
    n=$(in_t timeout 20 ss -Htn state established "( sport = :$TARGET_PORT )" | wc -l)
    [ "$n" -ge "$CONNS" ] && held_anon+=("$a") && held_rss+=("$r")
    [ "$n" -gt "$ss_max" ] && ss_max=$n &&
        printf '  ss: %d established on :%d at %.0f s\n' "$n" $TARGET_PORT "$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN { print n - s }')"
    sleep 2
done
set +e
wait $run_pid
run_rc=$?
set -e
elapsed=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")
cat "$work/run.txt"

rss() { awk '/^VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo "?"; }
echo "peak RSS (MiB) per agent:  $(for p in "${agent_pids[@]}"; do printf '%s ' "$(rss "$p")"; done)"
echo "peak RSS (MiB) per target: $(for p in "${target_pids[@]}"; do printf '%s ' "$(rss "$p")"; done)"
echo "run took ${elapsed}s (stampede run exit $run_rc)"

if [ "$MODE" = shared-ip ] && grep -q "port budget" "$work/run.txt"; then
    echo "shared-ip: $AGENTS agents on one source IP were refused up front by the port budget:"
    grep -o "port budget.*" "$work/run.txt" | head -1
    exit 0
fi
if [ ! -s "$work/report.json" ]; then
    echo "no report (stampede run exit $run_rc)" >&2
    exit 1
fi
peak=$(jq '.connections.peak_open' "$work/report.json")
[ -n "$RAMP" ] && jq -r '"stages: \(.load.stages)"' "$work/report.json"
jq -r '"report: opened \(.connections.opened), peak_open \(.connections.peak_open), per agent \([.agents[].peak_open]), errors \(.totals.errors), completed \(.totals.completed)"' "$work/report.json"
echo "held $peak concurrent connections to $TARGET_IP:$TARGET_PORT"
hwm_kib=0
for p in "${agent_pids[@]}"; do
    hwm_kib=$((hwm_kib + $(awk '/^VmHWM/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
done
[ "$peak" -gt 0 ] && awk -v h="$hwm_kib" -v i="$idle_kib" -v n="$peak" -v p="$PROTO" \
    'BEGIN { printf "agents: %.0f MiB idle, %.0f MiB at peak: %.2f KiB per held %s connection\n", i / 1024, h / 1024, (h - i) / n, p }'
# Sampled every 2 s with the `ss` count above: the connections are held for the whole run.
[ "$peak" -gt 0 ] && awk -v h="$anon_max" -v i="$idle_anon_kib" -v n="$peak" -v t="$hwm_kib" -v ti="$idle_kib" -v a="$AGENTS" \
    'BEGIN { printf "agents: anonymous memory %.0f MiB idle, %.0f MiB at peak: %.2f KiB per held connection (the rest of the peak, %.1f MiB per agent, is mostly the code pages of the run)\n", i / 1024, h / 1024, (h - i) / n, ((t - ti) - (h - i)) / 1024 / a }'
# Once every connection is up and waiting between its echoes (the peak above is the connection
# storm, when every connection is also mid-connect): the median of those samples.
if [ "$peak" -gt 0 ] && [ ${#held_anon[@]} -gt 0 ]; then
    median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
    med=$(median "${held_anon[@]}")
    awk -v m="$med" -v i="$idle_anon_kib" -v n="$peak" -v k=${#held_anon[@]} \
        'BEGIN { printf "agents: anonymous memory with every connection held (median of %d samples) %.0f MiB: %.2f KiB per idle connection\n", k, m / 1024, (m - i) / n }'
    # The same for the whole RSS: the anonymous memory and the code pages the run mapped.
    med=$(median "${held_rss[@]}")
    awk -v m="$med" -v i="$idle_kib" -v n="$peak" -v k=${#held_rss[@]} \
        'BEGIN { printf "agents: RSS with every connection held (median of %d samples) %.0f MiB: %.2f KiB per idle connection\n", k, m / 1024, (m - i) / n }'
fi
echo "ss saw $ss_max"
if [ "$MODE" = shared-ip ]; then
    echo "shared-ip: NOT refused up front by this build: $AGENTS agents on one source IP held $peak of $CONNS;" \
        "addr_not_available errors: $(jq '.totals.errors.addr_not_available // 0' "$work/report.json")"
    exit 1
fi
[ "$peak" -ge "$CONNS" ] || {
    echo "FAILED: held $peak < $CONNS" >&2
    exit 1
}
