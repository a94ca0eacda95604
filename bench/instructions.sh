#!/usr/bin/env bash
# User-space instructions per request of a load case, counted by callgrind: numbers that do not
# drift with the machine, where the CPU-time measures (vs-peers.sh, profile.sh) move by 10-30 %
# from run to run on a small VM. It runs `stampede run --local` under valgrind twice against
# nginx (one worker), SHORT and LONG seconds, and divides the difference by the requests the
# longer run added, so start-up and the report do not count. Functions that run once per
# interval (histogram encoding, deflate, the controller's merge) are left out and shown apart:
# under valgrind their share per request depends on how fast valgrind ran, not on the request.
#
# Usage: bench/instructions.sh [closed|constant|newconn] [BIN...]   (default closed; BIN defaults
# to target/release/stampede, built if missing; several binaries are measured one after another)
# Environment: SHORT (1), LONG (4), LOAD_CPU (1), SERVER_CPU (0), NGINX_PORT (18091),
# TOP (15: the functions listed per binary). Needs valgrind (apt-get install valgrind). Loopback only.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
CASE=${1:-closed}
shift || true
SHORT=${SHORT:-1}
LONG=${LONG:-4}
LOAD_CPU=${LOAD_CPU:-1}
SERVER_CPU=${SERVER_CPU:-0}
NGINX_PORT=${NGINX_PORT:-18091}
TOP=${TOP:-15}
command -v valgrind >/dev/null || { apt-get update -qq; apt-get install -y -qq valgrind >/dev/null; }
bins=("$@")
if [ ${#bins[@]} -eq 0 ]; then
    bin="${CARGO_TARGET_DIR:-$root/target}/release/stampede"
    [ -x "$bin" ] || cargo build --release -q -p stampede --manifest-path "$root/Cargo.toml"
    bins=("$bin")
fi

model=closed extra=""
case $CASE in
closed) ;;
constant) model="constant, rate: 5000" ;;
newconn) extra=$'\n    new_connection: true' ;;
*) echo "unknown case $CASE" >&2; exit 2 ;;
esac
for d in "$SHORT" "$LONG"; do
    write_get_case "$work/case-$d.yaml" "instructions-$CASE" "$NGINX_PORT" \
        "{ model: $model, connections: 50, duration: ${d}s }" "$extra"
done

start_nginx "$NGINX_PORT" 4096

# Valgrind counts each byte that a `rep stosb` or `rep movsb` moves as one instruction, and glibc's
# memset and memcpy use those for blocks of a few KiB and more: zeroing a 188 KB histogram would
# count as 188,416 instructions where the vector loop takes about 10,000. With these thresholds
# glibc keeps to its vector loops, whose instructions are counted as they run.
no_rep="glibc.cpu.x86_rep_stosb_threshold=0xffffffffffffffff:glibc.cpu.x86_rep_movsb_threshold=0xffffffffffffffff"
for bin in "${bins[@]}"; do
    for d in "$SHORT" "$LONG"; do
        GLIBC_TUNABLES=$no_rep taskset -c "$LOAD_CPU" valgrind --tool=callgrind --callgrind-out-file="$work/cg-$d.out" \
            "$bin" run "$work/case-$d.yaml" --local --agents 1 --quiet --report "$work/r-$d.json" \
            >/dev/null 2>"$work/valgrind-$d.log"
        callgrind_annotate --auto=no --threshold=100 "$work/cg-$d.out" >"$work/cg-$d.txt" 2>/dev/null
    done
    python3 - "$bin" "$CASE" "$work" "$SHORT" "$LONG" "$TOP" <<'PY'
import json, re, sys
bin_, case, work, short, long_, top = sys.argv[1:]
# Run once per interval, not per request (the agent's encoding, the controller's merge).
per_interval = re.compile(r"memset|miniz|hist::|serializ|Percentiles|PromHist|Flatten|flate2|SparseStats"
                          r"|Accumulator|IntervalStats::(reset|with_steps|settle)|Histogram<T>::(add|resize|new)"
                          r"|crc32|adler|prost|tonic|h2::|hyper|serde|report::|controller")
# A line of the function table (`--auto=no`: no annotated source, whose lines could look like it)
# is `count (share) file:function`, then ` [object]` only where the object differs from the line
# above's: the object is optional. With line tables one function's instructions come
# on several lines, one per source file inlined into it: they are added up by function.
line_re = re.compile(r"\s*([\d,]+) \([ \d.]+%\)\s+[^:\s]*:(.*?)(?: \[[^\]]*\])?$")
def load(d):
    fns = {}
    for line in open(f"{work}/cg-{d}.txt"):
        m = line_re.match(line.rstrip("\n"))
        if m:
            fns[m.group(2)] = fns.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    done = json.load(open(f"{work}/r-{d}.json"))["totals"]["completed"]
    return fns, done
a, na = load(short)
b, nb = load(long_)
n = nb - na
if n <= 0:
    sys.exit(f"{bin_}: the longer run completed no more requests ({na}, {nb})")
diff = {k: (b.get(k, 0) - a.get(k, 0)) / n for k in set(a) | set(b)}
hot = {k: v for k, v in diff.items() if not per_interval.search(k)}
print(f"{bin_}  {case}: {na} and {nb} requests")
print(f"  user instructions per {'connection' if case == 'newconn' else 'request'}: {sum(hot.values()):,.0f}"
      f"  (once-per-interval work besides: {sum(diff.values()) - sum(hot.values()):,.0f})")
for k, v in sorted(hot.items(), key=lambda kv: -kv[1])[: int(top)]:
    print(f"  {v:8,.0f}  {k[:100]}")
PY
done
