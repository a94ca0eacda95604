#!/usr/bin/env bash
# What a wake-up costs a thread on this machine, the figure that decides the constant-rate
# model's CPU per request (docs/performance.md): a timer wake-up, a wake-up from the other core,
# and reprogramming the CPU's timer (an exit to the hypervisor on a virtual machine). Two small
# C programs, the waiting thread pinned to WAIT_CPU (1), the writer to OTHER_CPU (0). Needs a C
# compiler. Runs about 10 s, no network.
set -euo pipefail
WAIT_CPU=${WAIT_CPU:-1}
OTHER_CPU=${OTHER_CPU:-0}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -o "$work/timer" "$here/wakeup/timer.c"
cc -O2 -pthread -o "$work/cross" "$here/wakeup/cross.c"
taskset -c "$WAIT_CPU" "$work/timer"
taskset -c "$WAIT_CPU" "$work/cross" "$OTHER_CPU"
