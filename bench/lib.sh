# Shared by the benchmark scripts (bench/vs-peers.sh, target-servers/bench/vs-nginx.sh):
# what bench/common.sh gives, plus nginx and wrk from Debian and an nginx config with one
# worker (`start_nginx` starts it). Source it; it also sets `NGINX`.

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

have_nginx() { command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; }
if ! command -v wrk >/dev/null || ! have_nginx; then
    apt-get update -qq
    apt-get install -y -qq nginx-light wrk >/dev/null 2>&1 || apt-get install -y -qq nginx wrk >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

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

# start_nginx PORT [CONNECTIONS]: that configuration's nginx, pinned to SERVER_CPU (0 when unset),
# stopped on exit like every process in `pids`; returns once it accepts.
start_nginx() {
    write_nginx_conf "$1" "${2:-4096}"
    taskset -c "${SERVER_CPU:-0}" "$NGINX" -c "$work/nginx.conf" -e "$work/nginx-error.log" &
    pids+=($!)
    wait_port "$1"
}
