#!/usr/bin/env bash
# CI step for Stampede's Kubernetes end-to-end tests (called by .ci/run).
#
# Runs tests/cluster/e2e.sh on a local single-node cluster when this machine can host one: root, Linux with bridge
# and netns support, Debian packages installable, Go and its module proxy reachable, enough disk. When it cannot,
# it prints a loud SKIPPED banner saying why and exits 0: an unusable machine is not a product bug. Once the
# environment checks pass, any failure (build of the stampede image, cluster start, a case, the leak check) fails CI.
#
# usage: tests/cluster/ci.sh [--build-only]
#   --build-only  the same checks, then only the cluster binaries (tests/cluster/build.sh, cached by their inputs):
#                 .ci/run starts this early at low priority, so the Go builds use the CPU the Rust build and tests
#                 leave idle, and the later full run finds them built.
# env: STAMPEDE_K8S_E2E=0        skip on purpose (still loudly)
#      STAMPEDE_K8S_E2E_MIN_DISK_GB  free disk needed for caches (default 12)
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

T0=$(date +%s)
build_only=0
[ "${1:-}" != --build-only ] || build_only=1

skip() {
  local bar='###########################################################################################'
  {
    echo
    echo "$bar"
    echo "###  SKIPPED: Stampede Kubernetes e2e tests (tests/cluster/ci.sh) -- NOT RUN ON THIS MACHINE"
    echo "###  reason: $*"
    echo "###  The smoke test, the chart and the controller's Kubernetes behaviour were NOT verified."
    echo "###  To run them: as root on Linux with Debian packages and the Go module proxy reachable,"
    echo "###  run: bash tests/cluster/e2e.sh"
    echo "$bar"
    echo
  }
  exit 0
}

echo "=== Kubernetes e2e (tests/cluster/ci.sh): checking whether this machine can run a local cluster"

[ "${STAMPEDE_K8S_E2E:-1}" != 0 ] || skip "STAMPEDE_K8S_E2E=0 was set"
[ "$(uname -s)" = Linux ] || skip "not Linux ($(uname -s))"
[ "$(id -u)" = 0 ] || skip "not root (the cluster runs containerd and kubelet and changes iptables)"
[ "$(uname -m)" = x86_64 ] || skip "images are built for amd64 only, this is $(uname -m)"
{ command -v apt-get && command -v dpkg-query; } >/dev/null || skip "no apt-get/dpkg (Debian packages are needed)"
command -v go >/dev/null || skip "no Go toolchain (needed to build the cluster binaries)"
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
[ "${go_minor:-0}" -ge 25 ] 2>/dev/null || skip "Go $(go env GOVERSION) is too old (>= 1.25 needed for CoreDNS 1.14)"
command -v cargo >/dev/null || skip "no cargo"

need_gb=${STAMPEDE_K8S_E2E_MIN_DISK_GB:-12}
mkdir -p "$CACHE"
for d in "$CACHE" "$(go env GOCACHE)" "$(go env GOMODCACHE)" /var/lib; do
  mkdir -p "$d" 2>/dev/null || true
  free_kb=$(df -Pk "$d" 2>/dev/null | awk 'NR==2{print $4}')
  [ -n "$free_kb" ] || continue
  [ "$free_kb" -ge $((need_gb * 1024 * 1024)) ] || skip "only $((free_kb / 1024 / 1024)) GB free on the filesystem of $d, ${need_gb} GB needed (Go build cache ~4 GB, binaries, images, cluster)"
done

if ! ensure_packages "${NODE_PACKAGES[@]}"; then
  skip "could not install the Debian packages: ${NODE_PACKAGES[*]}"
fi
for c in containerd runc ctr iptables ip6tables ip ss openssl curl umoci; do
  command -v "$c" >/dev/null || skip "$c is missing after installing packages"
done

# Kernel features: a bridge, a network namespace with a veth, overlayfs, cgroups, writable sysctls.
probe_br=stampedeprobe0
probe_ns=stampede-ci-probe-$$
# shellcheck disable=SC2317  # invoked by the trap
cleanup_probe() { ip link delete "$probe_br" 2>/dev/null || true; ip netns delete "$probe_ns" 2>/dev/null || true; }
trap cleanup_probe EXIT
ip link add "$probe_br" type bridge 2>/dev/null || skip "cannot create a network bridge (no CAP_NET_ADMIN or no bridge support)"
ip netns add "$probe_ns" 2>/dev/null || skip "cannot create a network namespace"
cleanup_probe
trap - EXIT
grep -qw overlay /proc/filesystems || skip "the kernel has no overlayfs (containerd's snapshotter needs it)"
grep -q cgroup /proc/filesystems || skip "the kernel has no cgroups"
[ -w /proc/sys/net/ipv4/ip_forward ] || skip "/proc/sys/net/ipv4/ip_forward is not writable"
iptables -S >/dev/null 2>&1 || skip "iptables does not work here"

# Nothing else may hold the cluster's ports (another engineer's cluster, say).
# Nothing else may be using the cluster's place: another test cluster of this harness (someone else's, perhaps:
# it is never stopped from here), or other programs on its ports.
if cluster_running; then
  skip "a test cluster is already running on this machine (pids in $PIDS); it is left alone"
fi
busy=$(busy_ports)
[ -z "$busy" ] || skip "ports the cluster needs are in use by something else: $busy"

# The Go module proxy must serve the pinned modules (download only; a build failure after this is a real failure).
for m in "$CLUSTER_DIR"/go/*/; do
  if ! (cd "$m" && GOFLAGS="-mod=readonly -buildvcs=false" timeout 900 go mod download >/dev/null 2>&1); then
    skip "the Go module proxy did not serve the modules of $(basename "$m") (network or proxy unavailable)"
  fi
done

if [ "$build_only" = 1 ]; then
  echo "=== Kubernetes e2e: machine OK ($(($(date +%s) - T0))s of checks); building the cluster binaries only"
  rc=0
  "$CLUSTER_DIR/build.sh" || rc=$?
  echo "=== Kubernetes e2e: cluster binaries, exit $rc after $(($(date +%s) - T0))s"
  exit "$rc"
fi
echo "=== Kubernetes e2e: machine OK ($(($(date +%s) - T0))s of checks); running tests/cluster/e2e.sh"
unset KUBECONFIG # CI always uses the local cluster
rc=0
"$CLUSTER_DIR/e2e.sh" || rc=$?
if [ "$rc" = 3 ]; then
  skip "e2e.sh found the machine unusable for a cluster"
fi
echo "=== Kubernetes e2e: exit $rc after $(($(date +%s) - T0))s"
exit "$rc"
