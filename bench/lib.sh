# Shared by the benchmark scripts (bench/vs-peers.sh, target-servers/bench/vs-nginx.sh):
# a work directory and PID list cleaned up on exit, nginx and wrk from Debian, an nginx
# config with one worker, and small /proc readers. Source it; it sets `root`, `work`, `pids`,
# `NGINX` and `hz`.

root=$(git -C "$(dirname "${BASH_SOURCE[0]}")" rev-parse --show-toplevel)
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

have_nginx() { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }
if ! command -v wrk >/dev/null || ! have_nginx; then
    apt-get update -qq
    apt-get install -y -qq nginx-light wrk >/dev/null 2>&1 || apt-get install -y -qq nginx wrk >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
hz=$(getconf CLK_TCK)

# write_nginx_conf PORT [CONNECTIONS]: one worker answering `GET /` with the same 20-byte body
# as the http target, access log off, to $work/nginx.conf.
write_nginx_conf() {
    local port=$1 conns=${2:-4096}
    cat > "$work/nginx.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile $((conns + 1000));
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections $conns; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    default_type text/plain;
    server {
        listen 127.0.0.1:$port reuseport backlog=$conns;
        location = / { return 200 "hello from stampede\n"; }
    }
}
CONF
}

wait_port() {
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "port $1 did not open" >&2
    return 1
}

# Sum of utime+stime (clock ticks) of the given processes (all their threads).
cpu_ticks() {
    local total=0 p
    for p in "$@"; do
        if [ -r "/proc/$p/stat" ]; then
            total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat")))
        fi
    done
    echo "$total"
}
