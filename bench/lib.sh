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

# start_nginx_tls PORT: a second one-worker nginx answering `GET /` over TLS 1.3 on PORT (HTTP/1.1
# and h2 by ALPN, session tickets and a session cache, as a real server resumes) and h2 in
# cleartext on PORT+1 (prior knowledge, h2c), pinned to SERVER_CPU. The certificate is made here
# for 127.0.0.1 (RSA-2048, signed by a test CA written to $work/tls-ca.pem); returns once both
# ports accept.
start_nginx_tls() {
    local port=$1
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$work/tls-ca.key" -out "$work/tls-ca.pem" \
        -days 2 -subj /CN=stampede-bench-ca >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -keyout "$work/tls.key" -out "$work/tls.csr" \
        -subj /CN=127.0.0.1 >/dev/null 2>&1
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' \
        >"$work/tls.ext"
    openssl x509 -req -in "$work/tls.csr" -CA "$work/tls-ca.pem" -CAkey "$work/tls-ca.key" \
        -CAcreateserial -out "$work/tls.pem" -days 2 -extfile "$work/tls.ext" >/dev/null 2>&1
    cat > "$work/nginx-tls.conf" <<CONF
worker_processes 1;
worker_rlimit_nofile 5000;
daemon off;
pid $work/nginx-tls.pid;
error_log $work/nginx-tls-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    default_type text/plain;
    client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work;
    uwsgi_temp_path $work; scgi_temp_path $work;
    ssl_protocols TLSv1.3;
    ssl_certificate $work/tls.pem;
    ssl_certificate_key $work/tls.key;
    ssl_session_cache shared:bench:10m;
    ssl_session_tickets on;
    server {
        listen 127.0.0.1:$port ssl http2 backlog=4096;
        location = / { return 200 "hello from stampede\n"; }
    }
    server {
        listen 127.0.0.1:$((port + 1)) http2 backlog=4096;
        location = / { return 200 "hello from stampede\n"; }
    }
}
CONF
    taskset -c "${SERVER_CPU:-0}" "$NGINX" -c "$work/nginx-tls.conf" -e "$work/nginx-tls-error.log" &
    pids+=($!)
    wait_port "$port"
    wait_port "$((port + 1))"
}
