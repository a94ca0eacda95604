#!/usr/bin/env bash
# Tear down the test cluster that up.sh started. Safe to run any number of times.
#
# Stops only the processes up.sh recorded (by PID, TERM then KILL), the container shims of *our* containerd (found by
# its private socket path), then removes pod network namespaces, mounts under the cluster's directories, the
# iptables chains that were not there before up.sh, the bridge, and restores the sysctls up.sh changed.
#
# usage: tests/cluster/down.sh
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root "down.sh"
set +e # best effort: every step runs even when an earlier one failed
trap - ERR
T0=$(date +%s)

# stop NAME [SECONDS]: TERM the recorded PID, wait, then KILL.
stop() {
  local name=$1 secs=${2:-20} pid i
  [ -f "$PIDS/$name" ] || return 0
  pid=$(cat "$PIDS/$name")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for ((i = 0; i < secs * 5; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name (pid $pid) ignored SIGTERM for ${secs}s: SIGKILL"
      kill -KILL "$pid" 2>/dev/null
      sleep 0.5
    fi
    log "stopped $name (pid $pid)"
  fi
  rm -f "$PIDS/$name"
}

# Network namespaces of our pods, read from our containerd's container specs.
pod_netns() {
  [ -S "$CONTAINERD_SOCK" ] || return 0
  local id
  for id in $(ctr_k8s containers ls -q 2>/dev/null); do
    ctr_k8s containers info "$id" 2>/dev/null | grep -o '"/var/run/netns/[^"]*"\|"/run/netns/[^"]*"' | tr -d '"'
  done | sort -u
}

# PIDs of containerd shims serving our containerd (their command line names its private socket).
our_shims() {
  local p
  for p in /proc/[0-9]*; do
    if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "-address $CONTAINERD_SOCK "; then echo "${p#/proc/}"; fi
  done
}

# 1. Let the kubelet stop the pods itself (CNI DEL, sandboxes, volumes) while everything still runs.
if pid_alive kube-apiserver && pid_alive kubelet && [ -f "$KUBECONFIG_OUT" ]; then
  log "draining the node"
  kc cordon "$NODE_NAME" >/dev/null 2>&1
  kc delete daemonsets,deployments,statefulsets,replicasets,jobs,cronjobs --all --all-namespaces --wait=false >/dev/null 2>&1
  kc delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1
  for ((i = 0; i < 45; i++)); do
    [ -z "$(ctr_k8s tasks ls -q 2>/dev/null)" ] && break
    sleep 1
  done
fi
NETNS=$(pod_netns)

# 2. Stop the daemons, node first.
stop kube-proxy
if [ -x "$BIN/kube-proxy" ]; then timeout 60 "$BIN/kube-proxy" --cleanup >/dev/null 2>&1; fi
stop kubelet
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver 30
stop etcd

# 3. Whatever containers remain in our containerd: kill and delete them, then stop containerd.
if pid_alive containerd && [ -S "$CONTAINERD_SOCK" ]; then
  for t in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks kill -s KILL "$t" >/dev/null 2>&1; done
  for ((i = 0; i < 10; i++)); do
    [ -z "$(ctr_k8s tasks ls 2>/dev/null | awk 'NR>1 && $3!="STOPPED"')" ] && break
    sleep 0.5
  done
  for t in $(ctr_k8s tasks ls -q 2>/dev/null); do ctr_k8s tasks delete -f "$t" >/dev/null 2>&1; done
  for c in $(ctr_k8s containers ls -q 2>/dev/null); do ctr_k8s containers delete "$c" >/dev/null 2>&1; done
fi
stop containerd
for pid in $(our_shims); do
  log "killing leftover shim of our containerd (pid $pid)"
  kill -KILL "$pid" 2>/dev/null
done
for f in "$PIDS"/*; do
  [ -f "$f" ] && stop "$(basename "$f")"
done

# 4. Pod network namespaces (normally already gone through CNI DEL).
for ns in $NETNS; do
  if [ -e "$ns" ]; then
    umount "$ns" 2>/dev/null || umount -l "$ns" 2>/dev/null
    rm -f "$ns"
    log "removed netns $ns"
  fi
done

# 5. Mounts under our directories (kubelet pod volumes and its self bind mount, containerd rootfs and shm), deepest first.
for ((round = 0; round < 3; round++)); do
  mps=$(awk '{print $5}' /proc/self/mountinfo | grep -E "^($STATE|$RUN)(/|$)" | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-)
  [ -z "$mps" ] && break
  while read -r mp; do
    umount "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null
  done <<<"$mps"
done

# 6. iptables: our guard, then KUBE-* chains that did not exist before up.sh (kube-proxy --cleanup removed most).
clean_chains() { # iptables|ip6tables FAMILY
  local ipt=$1 fam=$2 t rule chains c
  command -v "$ipt" >/dev/null || return 0
  for t in filter nat mangle raw; do
    chains=$("$ipt" -t "$t" -S 2>/dev/null | awk '/^-N (KUBE-|STAMPEDE-)/{print $2}')
    [ -n "$chains" ] || continue
    local ours=()
    for c in $chains; do
      if ! grep -qx "$fam $t $c" "$STATE/baseline-chains" 2>/dev/null; then ours+=("$c"); fi
    done
    [ ${#ours[@]} -gt 0 ] || continue
    # Remove every rule that jumps to one of our chains, from any chain, then flush and delete them.
    for c in "${ours[@]}"; do
      "$ipt" -t "$t" -S 2>/dev/null | grep -E -- "-j $c( |\$)" | grep '^-A ' | while read -r rule; do
        eval "$ipt -t $t -D ${rule#-A }" 2>/dev/null
      done
    done
    for c in "${ours[@]}"; do "$ipt" -t "$t" -F "$c" 2>/dev/null; done
    for c in "${ours[@]}"; do "$ipt" -t "$t" -X "$c" 2>/dev/null; done
  done
}
if [ -f "$STATE/baseline-chains" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then
  clean_chains iptables ip4
  clean_chains ip6tables ip6
fi

# 7. Bridge (pod veths went with their namespaces) and sysctls.
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link delete "$BRIDGE" && log "removed bridge $BRIDGE"
fi
if [ -f "$STATE/baseline-sysctl" ]; then
  while IFS='=' read -r key value; do
    echo "$value" >"/proc/sys/${key//.//}" 2>/dev/null
  done <"$STATE/baseline-sysctl"
fi

# 8. Files (only when nothing is mounted there any more).
# grep reads all of awk's output (no -q): under pipefail, awk killed by SIGPIPE after an early match would read as
# "nothing mounted" and remove files under a live mount.
if ! awk '{print $5}' /proc/self/mountinfo | grep -E "^($STATE|$RUN)(/|$)" >/dev/null; then
  rm -rf "$STATE" "$RUN"
else
  log "WARNING: mounts remain under $STATE or $RUN; not removing them"
  exit 1
fi
log "down in $(($(date +%s) - T0))s"
