#!/usr/bin/env bash
# One controller against a fleet of simulated agents (agent/examples/fleet.rs): N real agent
# gRPC streams, one real run with `agents: N` submitted through the `stampede run` CLI, 1 Hz
# Progress with non-empty histograms of a 5-step session. Samples the controller's CPU
# (/proc/PID/stat) and peak RSS (VmHWM) over the run and prints exactly one line:
#
#   controller agents=N cpu_pct=X rss_mib=Y exact=yes|no us_per_agent_interval=Z
#
# cpu_pct is % of one core from submission to the report; us_per_agent_interval is the
# controller's CPU over the same span divided by the agent-intervals merged (the fleet's
# Progress messages), the figure to compare builds by (bench/controller-ab.sh); exact=yes
# when the report's totals (requests completed and failed, response/service/step histogram
# counts) equal what the fleet sent. Exits non-zero on any failure. Everything runs on loopback; the scenario's target
# (127.0.0.1:9) is never contacted.
#
#   bench/controller-scale.sh [AGENTS] [DURATION_S]       (defaults: 1000 60)
#   STAMPEDE_BIN=... FLEET_BIN=...  use prebuilt binaries instead of building them
#   LEASE=1s                         the controller's --lease
#   CPU_MAX_PCT / RSS_MAX_MIB        also fail when above these (unset: report only)
set -euo pipefail

agents=${1:-1000}
duration=${2:-60}
source "$(dirname "$0")/common.sh"
# The whole bench is bounded: the run itself, plus set-up and the report.
limit=$((duration + 300))
# Its sleep ends with it: a sleep left behind would hold this script's output open, and a
# caller reading it (bench/controller-ab.sh) would wait out the whole limit after every run.
(
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    sleep "$limit" &
    s=$!
    wait "$s"
    echo "controller-scale: timed out after ${limit}s" >&2
    kill -TERM $$
) &
watchdog=$!
pids+=("$watchdog")

if [ -z "${STAMPEDE_BIN:-}" ] || [ -z "${FLEET_BIN:-}" ]; then
    (cd "$root" && cargo build --release -q -p stampede --bin stampede \
        && cargo build --release -q -p stampede-agent --example fleet)
    target=${CARGO_TARGET_DIR:-$root/target}
fi
STAMPEDE_BIN=${STAMPEDE_BIN:-$target/release/stampede}
FLEET_BIN=${FLEET_BIN:-$target/release/examples/fleet}
export STAMPEDE_TOKEN=${STAMPEDE_TOKEN:-bench-$RANDOM$RANDOM}
export STAMPEDE_KUBE=off

ulimit -n 20000 2>/dev/null || true
"$STAMPEDE_BIN" controller --listen 127.0.0.1:0 --data-dir "$work/data" --lease "${LEASE:-1s}" \
    --agent-wait 120s >"$work/controller.out" 2>"$work/controller.err" &
ctl=$!
pids+=("$ctl")
for _ in $(seq 1 100); do
    grep -q 'listening on' "$work/controller.out" 2>/dev/null && break
    sleep 0.1
done
addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$work/controller.out" | head -1)
[ -n "$addr" ] || { echo "controller did not start" >&2; cat "$work/controller.err" >&2; exit 1; }
url="http://$addr"

"$FLEET_BIN" --controller "$url" --agents "$agents" --timeout-s "$limit" >"$work/fleet.out" 2>"$work/fleet.err" &
fleet=$!
pids+=("$fleet")
for _ in $(seq 1 1200); do
    grep -q '^fleet registered' "$work/fleet.out" 2>/dev/null && break
    kill -0 "$fleet" 2>/dev/null || { echo "fleet died" >&2; tail "$work/fleet.err" >&2; exit 1; }
    sleep 0.1
done
grep -q '^fleet registered' "$work/fleet.out" || { echo "fleet did not register" >&2; exit 1; }

cat >"$work/scenario.yaml" <<YAML
name: controller-scale
target: http://127.0.0.1:9
agents: $agents
load:
  model: closed
  connections: $agents
  duration: ${duration}s
session:
  - { name: login, http: { method: POST, path: /login, body: "{}" } }
  - { name: list, http: { method: GET, path: /items } }
  - { name: item, http: { method: GET, path: /items/1 } }
  - { name: cart, http: { method: POST, path: /cart, body: "{}" } }
  - { name: logout, http: { method: POST, path: /logout } }
YAML

ticks0=$(awk '{print $14 + $15}' "/proc/$ctl/stat")
t0=$(date +%s.%N)
set +e
"$STAMPEDE_BIN" run "$work/scenario.yaml" --controller "$url" --quiet --output json \
    --report "$work/report.json" >"$work/run.out" 2>"$work/run.err"
run_rc=$?
set -e
t1=$(date +%s.%N)
ticks1=$(awk '{print $14 + $15}' "/proc/$ctl/stat")
rss_kib=$(awk '/^VmHWM:/ {print $2}' "/proc/$ctl/status")
# The fleet exits by itself once every agent has sent Done.
wait "$fleet" || { echo "fleet failed" >&2; tail "$work/fleet.err" >&2; exit 1; }
fleet_line=$(grep '^fleet agents=' "$work/fleet.out")

cpu_pct=$(awk -v a="$ticks0" -v b="$ticks1" -v s="$t0" -v e="$t1" -v hz="$hz" \
    'BEGIN { printf "%.1f", (b - a) / hz / (e - s) * 100 }')
rss_mib=$((rss_kib / 1024))
progress=$(sed -n 's/.* progress=\([0-9]*\).*/\1/p' <<<"$fleet_line")
us_per=$(awk -v a="$ticks0" -v b="$ticks1" -v hz="$hz" -v n="${progress:-0}" \
    'BEGIN { if (n > 0) printf "%.1f", (b - a) / hz * 1e6 / n; else print "nan" }')

exact=no
if [ -s "$work/report.json" ]; then
    sent() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$fleet_line"; }
    got=$(python3 - "$work/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["totals"]
steps = sum(s["latency"]["response_time"]["count"] for s in r["steps"])
print(t["completed"], t["failed"], r["latency"]["response_time"]["count"],
      r["latency"]["service_time"]["count"], steps, r["outcome"])
PY
)
    want="$(sent requests_completed) $(sent requests_failed) $(sent response_count) $(sent service_count) $(sent step_response_count) succeeded"
    [ "$got" = "$want" ] && exact=yes
    [ "$exact" = yes ] || echo "report: $got; fleet sent: $want" >&2
fi
echo "$fleet_line" >&2
echo "controller agents=$agents cpu_pct=$cpu_pct rss_mib=$rss_mib exact=$exact us_per_agent_interval=$us_per"

[ "$run_rc" -eq 0 ] || { echo "stampede run exited $run_rc" >&2; tail "$work/run.err" >&2; exit 1; }
[ "$exact" = yes ] || exit 1
if [ -n "${CPU_MAX_PCT:-}" ] && awk -v c="$cpu_pct" -v m="$CPU_MAX_PCT" 'BEGIN { exit !(c > m) }'; then
    echo "cpu ${cpu_pct}% above ${CPU_MAX_PCT}%" >&2; exit 1
fi
if [ -n "${RSS_MAX_MIB:-}" ] && [ "$rss_mib" -gt "$RSS_MAX_MIB" ]; then
    echo "rss ${rss_mib} MiB above ${RSS_MAX_MIB} MiB" >&2; exit 1
fi
