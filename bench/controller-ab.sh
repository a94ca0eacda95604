#!/usr/bin/env bash
# Two builds' controllers against the same simulated fleet, alternated: what a change did to
# the controller's CPU per agent-interval (one agent's 1 Hz Progress merged), measured in the
# same minutes so the machine's drift falls on both. Each repeat runs bench/controller-scale.sh
# once per build (A first in odd repeats, B first in even ones); prints every run, the medians
# and B's median over A's. The fleet is built once, from this tree.
#
# Usage: bench/controller-ab.sh BIN_A BIN_B   (two release `stampede` binaries)
# Environment: AGENTS (1000), DURATION_S (30), REPS (3), FLEET_BIN (a prebuilt fleet example).
# Loopback only; not part of CI.
set -euo pipefail
[ $# = 2 ] || { sed -n 2,10p "$0" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
AGENTS=${AGENTS:-1000}
DURATION_S=${DURATION_S:-30}
REPS=${REPS:-3}
if [ -z "${FLEET_BIN:-}" ]; then
    (cd "$root" && cargo build --release -q -p stampede-agent --example fleet)
    FLEET_BIN=${CARGO_TARGET_DIR:-$root/target}/release/examples/fleet
fi
declare -A runs=([A]="" [B]="")
for rep in $(seq 1 "$REPS"); do
    order=(A B)
    if [ $((rep % 2)) = 0 ]; then order=(B A); fi
    for which in "${order[@]}"; do
        bin=$1
        [ "$which" = B ] && bin=$2
        line=$(STAMPEDE_BIN=$bin FLEET_BIN=$FLEET_BIN "$here/controller-scale.sh" "$AGENTS" "$DURATION_S" 2>/dev/null)
        echo "rep $rep $which: $line"
        us=$(sed -n 's/.* us_per_agent_interval=\([0-9.]*\).*/\1/p' <<<"$line")
        [ -n "$us" ] || { echo "no figure from build $which" >&2; exit 1; }
        runs[$which]+="$us "
    done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
a=$(median "${runs[A]}")
b=$(median "${runs[B]}")
echo "controller us per agent-interval: A $a (${runs[A]% }), B $b (${runs[B]% }), B/A $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", b / a }')"
