#!/usr/bin/env bash
# Build and cache the test cluster's binaries, from the Go module proxy and Debian only:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl, coredns, helm,
#   probe (the smoke test's in-pod checker) and pause (the pod sandbox, C, static).
# Each binary is rebuilt only when its inputs change (Go version, go.mod/go.sum, sources, flags), so a warm run
# takes seconds. Outputs go to $STAMPEDE_CLUSTER_CACHE/bin.
#
# usage: tests/cluster/build.sh [NAME...]     (default: all)
# env:   STAMPEDE_CLUSTER_CACHE   cache directory (default /var/cache/stampede-cluster as root)
#        STAMPEDE_CLUSTER_GO_P    go build -p (parallel compile jobs; default: the number of CPUs)
# A cold build needs about 4 GB of Go build cache and module downloads, and 10-30 minutes on 2 cores.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

command -v go >/dev/null || die "go is not installed (a Go toolchain >= 1.25 is needed to build the cluster binaries)"
GO_DIR=$CLUSTER_DIR/go
mkdir -p "$BIN"

k8s_ldflags() {
  local v=$K8S_VERSION minor
  minor=$(echo "$v" | cut -d. -f2)
  local x="-X k8s.io/component-base/version"
  local y="-X k8s.io/client-go/pkg/version"
  echo "-s -w $x.gitVersion=$v $x.gitMajor=1 $x.gitMinor=$minor $x.gitTreeState=clean $x.buildDate=1970-01-01T00:00:00Z" \
    "$y.gitVersion=$v $y.gitMajor=1 $y.gitMinor=$minor"
}

# name | module dir | package | ldflags
components() {
  local k8s
  k8s=$(k8s_ldflags)
  cat <<EOF
etcd|etcd|.|-s -w
kube-apiserver|k8s|./cmd/kube-apiserver|$k8s
kube-controller-manager|k8s|./cmd/kube-controller-manager|$k8s
kube-scheduler|k8s|./cmd/kube-scheduler|$k8s
kubelet|k8s|./cmd/kubelet|$k8s
kube-proxy|k8s|./cmd/kube-proxy|$k8s
kubectl|k8s|./cmd/kubectl|$k8s
coredns|coredns|.|-s -w -X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION
helm|helm|helm.sh/helm/v3/cmd/helm|-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION
probe|probe|.|-s -w
EOF
}

# input_key MODULE_DIR LDFLAGS: hash of everything that determines the binary.
input_key() {
  local dir=$GO_DIR/$1
  {
    go version
    echo "$2"
    (cd "$dir" && find . -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) | LC_ALL=C sort | xargs sha256sum)
  } | sha256sum | cut -d' ' -f1
}

build_go() { # name moddir pkg ldflags
  local name=$1 moddir=$2 pkg=$3 ldflags=$4 key tmp start
  key=$(input_key "$moddir" "$ldflags")
  if [ -x "$BIN/$name" ] && [ "$(cat "$BIN/.$name.key" 2>/dev/null)" = "$key" ]; then
    log "$name: cached"
    return 0
  fi
  log "$name: building (this can take minutes)"
  tmp=$BIN/.$name.tmp
  start=$(date +%s)
  (cd "$GO_DIR/$moddir" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" timeout 3600 \
    go build -p "${STAMPEDE_CLUSTER_GO_P:-$(nproc)}" -trimpath -ldflags "$ldflags" -o "$tmp" "$pkg")
  mv -f "$tmp" "$BIN/$name"
  echo "$key" >"$BIN/.$name.key"
  log "$name: built in $(($(date +%s) - start))s ($(du -h "$BIN/$name" | cut -f1))"
}

build_pause() {
  local key src=$CLUSTER_DIR/images/pause.c
  key=$( { gcc --version | head -1; sha256sum "$src"; } | sha256sum | cut -d' ' -f1)
  if [ -x "$BIN/pause" ] && [ "$(cat "$BIN/.pause.key" 2>/dev/null)" = "$key" ]; then
    log "pause: cached"
    return 0
  fi
  command -v gcc >/dev/null || die "gcc is needed for the pause binary"
  gcc -static -Os -o "$BIN/.pause.tmp" "$src"
  strip "$BIN/.pause.tmp"
  mv -f "$BIN/.pause.tmp" "$BIN/pause"
  echo "$key" >"$BIN/.pause.key"
  log "pause: built"
}

want=("$@")
wanted() {
  [ ${#want[@]} = 0 ] && return 0
  local w
  for w in "${want[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

t0=$(date +%s)
if wanted pause; then build_pause; fi
while IFS='|' read -r name moddir pkg ldflags; do
  if wanted "$name"; then build_go "$name" "$moddir" "$pkg" "$ldflags"; fi
done < <(components)
log "build done in $(($(date +%s) - t0))s; binaries in $BIN"
