# shellcheck shell=bash
# shellcheck disable=SC2034  # variables are used by the scripts that source this file
# Common settings for the Stampede test-cluster scripts. Sourced, never run.
#
# Everything the harness makes lives in three places, all outside the repository:
#   $STAMPEDE_CLUSTER_CACHE  built binaries and images (kept between runs; default /var/cache/stampede-cluster as root)
#   $STAMPEDE_CLUSTER_STATE  one cluster's PKI, etcd data, containerd and kubelet roots, logs, PIDs
#   $STAMPEDE_CLUSTER_RUN    containerd's state and socket (must be on a local, non-overlay filesystem)

set -Eeuo pipefail
# Never fail silently: name the command that failed.
trap 'echo "[cluster $(date +%T)] ERROR: command failed (exit $?): $BASH_COMMAND (${BASH_SOURCE[0]##*/}:$LINENO)" >&2' ERR

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$CLUSTER_DIR/../.." && pwd)
# Where cargo puts binaries: CARGO_TARGET_DIR if set (relative to the repo), else <repo>/target.
case "${CARGO_TARGET_DIR:-}" in
  "") CARGO_TARGET=$REPO_ROOT/target ;;
  /*) CARGO_TARGET=$CARGO_TARGET_DIR ;;
  *) CARGO_TARGET=$REPO_ROOT/$CARGO_TARGET_DIR ;;
esac

if [ "$(id -u)" = 0 ]; then _default_cache=/var/cache/stampede-cluster; else _default_cache=${XDG_CACHE_HOME:-$HOME/.cache}/stampede-cluster; fi
CACHE=${STAMPEDE_CLUSTER_CACHE:-$_default_cache}
STATE=${STAMPEDE_CLUSTER_STATE:-/var/lib/stampede-cluster}
RUN=${STAMPEDE_CLUSTER_RUN:-/run/stampede-cluster}
BIN=$CACHE/bin
IMAGES=$CACHE/images
LOGS=$STATE/logs
PIDS=$STATE/pids
PKI=$STATE/pki
KUBECONFIG_OUT=$STATE/kubeconfig

# Pinned versions. The Go module proxy reachable here is filtered: check with `go list -m -versions MODULE`.
K8S_VERSION=v1.33.13
ETCD_VERSION=v3.5.21
COREDNS_VERSION=v1.14.7
HELM_VERSION=v3.19.5

# Networks: the benchmarking range 198.18.0.0/15 only. Pods get no route outside it and nothing is masqueraded.
CLUSTER_NET=198.18.0.0/15
POD_CIDR=198.18.0.0/16
NODE_POD_SUBNET=198.18.0.0/24
BRIDGE=stampede0
BRIDGE_IP=198.18.0.1
SERVICE_CIDR=198.19.0.0/16
KUBERNETES_SVC_IP=198.19.0.1
DNS_SVC_IP=198.19.0.10
CLUSTER_DOMAIN=cluster.local
NODE_NAME=127.0.0.1

# Ports (loopback or the bridge address only).
APISERVER_PORT=16443
ETCD_CLIENT_PORT=12379
ETCD_PEER_PORT=12380

# Images imported into the node's containerd (no registry is ever contacted).
STAMPEDE_IMAGE=${STAMPEDE_IMAGE:-localhost/stampede:dev}
PAUSE_IMAGE=localhost/stampede-pause:3.10
COREDNS_IMAGE=localhost/stampede-coredns:${COREDNS_VERSION#v}
PROBE_IMAGE=localhost/stampede-probe:dev

CONTAINERD_SOCK=$RUN/containerd.sock
CNI_BIN_DIR=/usr/lib/cni

# Debian packages the node needs.
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack umoci openssl curl gcc libc6-dev)

log() { printf '[cluster %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { printf '[cluster %s] ERROR: %s\n' "$(date +%T)" "$*" >&2; exit 1; }

need_root() { [ "$(id -u)" = 0 ] || die "$1 must run as root (it starts containerd, kubelet and changes iptables)"; }

ctr_k8s() { timeout 120 ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# kubectl v1.33 built by build.sh (the machine's own kubectl, if any, is not needed).
kubectl_bin() { if [ -x "$BIN/kubectl" ]; then echo "$BIN/kubectl"; else command -v kubectl; fi; }
kc() { timeout 120 "$(kubectl_bin)" --kubeconfig "$KUBECONFIG_OUT" "$@"; }

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND once a second until it succeeds.
wait_for() {
  local secs=$1 what=$2 i
  shift 2
  for ((i = 0; i < secs; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  log "timed out after ${secs}s waiting for $what"
  return 1
}

# start_daemon NAME LOGFILE COMMAND...: start COMMAND in the background in its own session, record its PID.
start_daemon() {
  local name=$1 logfile=$2
  shift 2
  mkdir -p "$PIDS" "$LOGS"
  setsid "$@" >"$logfile" 2>&1 </dev/null &
  echo $! >"$PIDS/$name"
  log "started $name (pid $!)"
}

# cluster_running: any process recorded by up.sh is still alive.
cluster_running() {
  local f
  for f in "$PIDS"/*; do
    [ -f "$f" ] || continue
    if kill -0 "$(cat "$f")" 2>/dev/null; then return 0; fi
  done
  return 1
}

# busy_ports: the cluster's ports that something already listens on (empty if none).
busy_ports() {
  { ss -Hltn 2>/dev/null || true; } | awk '{print $4}' |
    grep -E ":($APISERVER_PORT|$ETCD_CLIENT_PORT|$ETCD_PEER_PORT|10248|10249|10250|10256|10257|10259)\$" | tr '\n' ' ' || true
}

# pid_alive NAME: the recorded process is still running.
pid_alive() {
  local f=$PIDS/$1
  [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null
}

# Apt packages: `apt-get update` once per harness run, then install what is missing.
ensure_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} = 0 ] && return 0
  need_root "installing ${missing[*]}"
  log "apt-get install ${missing[*]}"
  local stamp=/var/tmp/.stampede-cluster-apt-updated
  if [ -z "$(find "$stamp" -mmin -360 2>/dev/null)" ]; then
    timeout 300 apt-get update -qq && touch "$stamp"
  fi
  if ! DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    log "apt-get install failed; refreshing the package lists and retrying once"
    timeout 300 apt-get update -qq && touch "$stamp"
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}
