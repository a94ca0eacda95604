# Shared by every benchmark script (source it): `root` (the repository), `work` (a temporary
# directory) and `pids` (the processes the script started), all cleaned up on exit; `hz` (clock
# ticks per second) and small helpers: wait_port PORT, cpu_ticks PID..., cpu_of CMD...,
# write_get_case FILE NAME PORT LOAD, median (of stdin's lines), stampede_bin.

# The repository, found from this file rather than by git: an image build has no .git.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)

# wait_port PORT: until something accepts on 127.0.0.1:PORT (10 s at most).
wait_port() {
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "port $1 did not open" >&2
    return 1
}

# cpu_ticks PID...: the sum of utime+stime (clock ticks) of these processes (all their threads).
cpu_ticks() {
    local total=0 p
    for p in "$@"; do
        if [ -r "/proc/$p/stat" ]; then
            total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
        fi
    done
    echo "$total"
}

# cpu_of CMD...: runs CMD (its output to $work/out and $work/err) and prints the CPU seconds,
# user and system, that it and its children used.
cpu_of() {
    local t
    t=$( { "$@" >"$work/out" 2>"$work/err"; times; } | tail -1)
    # `times` prints the children's "XmY.YYYs XmY.YYYs" (user, system).
    awk '{ split($1, u, "m"); split($2, s, "m"); print u[1] * 60 + u[2] + s[1] * 60 + s[2] }' <<<"$t"
}

# write_get_case FILE NAME PORT LOAD [EXTRA]: a one-agent scenario, one `GET /` per session
# against 127.0.0.1:PORT under LOAD (a flow mapping), EXTRA appended to the step (its own lines).
write_get_case() {
    cat >"$1" <<YAML
name: $2
target: http://127.0.0.1:$3
agents: 1
request_timeout: 10s
load: $4
session:
  - http: { method: GET, path: / }${5:-}
YAML
}

# median: the median of the numbers on standard input, one per line (the mean of the middle
# two when there is an even count).
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# stampede_bin: the path of the binary to measure: STAMPEDE_BIN when set (a prebuilt one, e.g.
# bench/pgo.sh's), else the release build of this checkout, built first.
stampede_bin() {
    if [ -n "${STAMPEDE_BIN:-}" ]; then
        echo "$STAMPEDE_BIN"
    else
        cargo build --release -q -p stampede --manifest-path "$root/Cargo.toml"
        echo "${CARGO_TARGET_DIR:-$root/target}/release/stampede"
    fi
}
