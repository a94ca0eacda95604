#!/usr/bin/env bash
# Endurance: one controller, one agent and one HTTP target as separate processes on loopback,
# one open-model run at a constant arrival rate for a long time, and every minute one line with
# the resident memory (VmRSS) of the controller and the agent. After warm-up both must stay
# flat: nothing may grow with the run's length (histograms are sparse, the replay buffer holds
# only what the controller has not acknowledged, finished runs leave memory).
#
#   bench/soak.sh [DURATION] [RATE]          (defaults: 2h 2000; e.g. bench/soak.sh 10m 500)
#   STAMPEDE_BIN=...                          use a prebuilt binary instead of building it
#   GROWTH_MAX_MIB=16                         fail when RSS grows more than this after warm-up
#
# Prints `soak minute=M controller_rss_mib=X agent_rss_mib=Y` every minute, then the run's
# summary and `soak duration=D rate=R controller_growth_mib=X agent_growth_mib=Y ok=yes|no`
# (growth: the last minute's RSS minus the RSS at the end of the first quarter of the run).
# Everything is bounded in time and stops by itself; processes are ended by PID.
set -euo pipefail

duration=${1:-2h}
rate=${2:-2000}
growth_max=${GROWTH_MAX_MIB:-16}
source "$(dirname "$0")/common.sh"

secs=$(python3 -c "
import re,sys
m=re.fullmatch(r'\s*([0-9.]+)\s*(ms|s|m|h)\s*', sys.argv[1])
if not m: sys.exit('duration: a number followed by ms, s, m or h')
print(int(float(m.group(1))*{'ms':0.001,'s':1,'m':60,'h':3600}[m.group(2)]))" "$duration")
[ "$secs" -ge 60 ] || { echo "soak: run at least 1m" >&2; exit 2; }

bin=$(stampede_bin)
export STAMPEDE_TOKEN=soak-user-$RANDOM$RANDOM STAMPEDE_AGENT_TOKEN=soak-agent-$RANDOM$RANDOM

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
rss_mib() { awk '/^VmRSS/{printf "%.1f", $2/1024}' "/proc/$1/status" 2>/dev/null || echo 0; }

tport=$(free_port); cport=$(free_port)
"$bin" target http --listen "127.0.0.1:$tport" >"$work/target.log" 2>&1 & pids+=($!)
"$bin" controller --listen "127.0.0.1:$cport" --data-dir "$work/data" >"$work/controller.log" 2>&1 &
controller=$!; pids+=("$controller")
wait_port "$tport"; wait_port "$cport"
"$bin" agent --controller "http://127.0.0.1:$cport" --id soak-1 >"$work/agent.log" 2>&1 &
agent=$!; pids+=("$agent")

cat >"$work/soak.yaml" <<YAML
name: soak
target: http://127.0.0.1:$tport
agents: 1
phases:
  - { name: soak, duration: ${secs}s, arrival_rate: $rate }
session:
  - http: { method: GET, path: / }
YAML
timeout $((secs + 300)) "$bin" run "$work/soak.yaml" --controller "http://127.0.0.1:$cport" \
    --quiet --report "$work/soak.json" >"$work/run.out" 2>&1 &
run=$!; pids+=("$run")

warm=$(( (secs / 60) / 4 )); [ "$warm" -ge 1 ] || warm=1
minute=0; c_base=""; a_base=""
while kill -0 "$run" 2>/dev/null; do
    for _ in $(seq 1 60); do kill -0 "$run" 2>/dev/null || break; sleep 1; done
    kill -0 "$run" 2>/dev/null || break
    minute=$((minute + 1))
    c=$(rss_mib "$controller"); a=$(rss_mib "$agent")
    echo "soak minute=$minute controller_rss_mib=$c agent_rss_mib=$a"
    if [ "$minute" -eq "$warm" ]; then c_base=$c; a_base=$a; fi
    c_last=$c; a_last=$a
done
rc=0; wait "$run" || rc=$?
cat "$work/run.out"
[ "$rc" -eq 0 ] || { echo "soak: the run exited $rc" >&2; }
c_growth=$(python3 -c "print(round(${c_last:-0}-${c_base:-${c_last:-0}},1))")
a_growth=$(python3 -c "print(round(${a_last:-0}-${a_base:-${a_last:-0}},1))")
ok=$(python3 -c "print('yes' if $rc==0 and $c_growth<=$growth_max and $a_growth<=$growth_max else 'no')")
echo "soak duration=$duration rate=$rate controller_growth_mib=$c_growth agent_growth_mib=$a_growth ok=$ok"
[ "$ok" = yes ]
