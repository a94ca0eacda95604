#!/usr/bin/env bash
# Build the test cluster's container images without any registry, and load them into the node's containerd.
#
#   localhost/stampede:dev              the stampede binary (cargo build -p stampede) plus the glibc libraries it
#                                       links, glibc's NSS config for DNS, getent, /etc/passwd with user 65532
#   localhost/stampede-pause:3.10       the pod sandbox (tests/cluster/images/pause.c, static)
#   localhost/stampede-coredns:1.14.7   cluster DNS (built by build.sh)
#   localhost/stampede-probe:dev        the smoke test's in-pod HTTP/DNS checker (static Go)
#
# Images are OCI layouts made with umoci (Debian), tarred, and imported with `ctr images import`. A "localhost/"
# name never resolves to a registry, and pods use imagePullPolicy: Never (or IfNotPresent) so no pull is tried.
#
# usage: tests/cluster/images.sh [build|load|all]    (default all: build, then load if the cluster is up)
# env:   STAMPEDE_IMAGE_PROFILE   cargo profile for the stampede binary: release (default) or dev
#        STAMPEDE_IMAGE_SKIP_CARGO=1  pack the binary already in target/ without running cargo
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PROFILE=${STAMPEDE_IMAGE_PROFILE:-release}
case $PROFILE in
  release) TARGET_SUBDIR=release ;;
  dev) TARGET_SUBDIR=debug ;;
  *) die "STAMPEDE_IMAGE_PROFILE must be release or dev, not $PROFILE" ;;
esac
mkdir -p "$IMAGES"

# copy_with_libs ROOTFS FILE DEST: copy an ELF binary and every shared library ldd names, at the same paths.
copy_with_libs() {
  local rootfs=$1 file=$2 dest=$3 lib
  install -D -m 0755 "$file" "$rootfs$dest"
  while read -r lib; do
    [ -n "$lib" ] || continue
    install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
  done < <(ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}')
}

# pack NAME:TAG ROOTFS ENTRYPOINT USER: make $IMAGES/<file>.tar from ROOTFS unless the same content is packed.
pack() {
  local ref=$1 rootfs=$2 entry=$3 user=$4 file key layout
  file=$(echo "$ref" | tr '/:' '__')
  key=$( { echo "$ref $entry $user"; umoci --version; cd "$rootfs" && find . -printf '%p %m %s %l\n' | LC_ALL=C sort;
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
  if [ -f "$IMAGES/$file.tar" ] && [ "$(cat "$IMAGES/.$file.key" 2>/dev/null)" = "$key" ]; then
    log "image $ref: cached"
    rm -rf "$rootfs"
    return 0
  fi
  layout=$IMAGES/.$file.layout
  rm -rf "$layout"
  umoci init --layout "$layout"
  umoci new --image "$layout:${ref##*:}"
  umoci insert --image "$layout:${ref##*:}" "$rootfs" /
  umoci config --image "$layout:${ref##*:}" --architecture amd64 --os linux \
    --config.entrypoint "$entry" --config.user "$user" --config.env PATH=/usr/local/bin:/usr/bin:/bin \
    --config.workingdir / --author stampede-cluster
  umoci gc --layout "$layout"
  tar -C "$layout" -cf "$IMAGES/.$file.tar" .
  mv -f "$IMAGES/.$file.tar" "$IMAGES/$file.tar"
  echo "$key" >"$IMAGES/.$file.key"
  rm -rf "$layout" "$rootfs"
  log "image $ref: packed ($(du -h "$IMAGES/$file.tar" | cut -f1))"
}

etc_files() { # ROOTFS: the /etc a glibc program needs for users and DNS (resolv.conf and hosts come from kubelet)
  local r=$1
  mkdir -p "$r/etc" "$r/tmp"
  chmod 1777 "$r/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$r/etc/group"
  printf 'passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\nservices: files\nprotocols: files\n' >"$r/etc/nsswitch.conf"
  printf 'tcp 6 TCP\nudp 17 UDP\n' >"$r/etc/protocols"
}

build_stampede() {
  local bin=$CARGO_TARGET/$TARGET_SUBDIR/stampede rootfs=$IMAGES/.rootfs-stampede nss
  if [ "${STAMPEDE_IMAGE_SKIP_CARGO:-0}" != 1 ]; then
    log "cargo build --profile $PROFILE -p stampede"
    (cd "$REPO_ROOT" && timeout 3600 cargo build --profile "$PROFILE" -p stampede)
  fi
  [ -x "$bin" ] || die "no stampede binary at $bin"
  rm -rf "$rootfs"
  copy_with_libs "$rootfs" "$bin" /usr/local/bin/stampede
  # getent resolves names exactly as the stampede binary does (same glibc, same NSS), for DNS checks in pods.
  copy_with_libs "$rootfs" "$(command -v getent)" /usr/bin/getent
  # glibc >= 2.34 has files/dns NSS built in; ship the modules anyway for a libc that still dlopen()s them.
  for nss in libnss_files.so.2 libnss_dns.so.2; do
    if [ -f "/lib/x86_64-linux-gnu/$nss" ]; then install -D -m 0644 "/lib/x86_64-linux-gnu/$nss" "$rootfs/lib/x86_64-linux-gnu/$nss"; fi
  done
  etc_files "$rootfs"
  mkdir -p "$rootfs/home/nonroot"
  chown 65532:65532 "$rootfs/home/nonroot"
  # The image's own loader and libraries must be complete: run the binary inside the rootfs.
  if [ "$(id -u)" = 0 ]; then
    local out rc=0
    out=$(chroot --userspec=65532:65532 "$rootfs" /usr/local/bin/stampede --help 2>&1) || rc=$?
    if [ "$rc" = 126 ] || [ "$rc" = 127 ] || grep -q 'error while loading shared libraries' <<<"$out"; then
      die "the stampede binary does not start inside its image root (exit $rc): $out"
    fi
    chroot --userspec=65532:65532 "$rootfs" /usr/bin/getent passwd nonroot >/dev/null || die "getent does not work inside the image root"
  fi
  pack "$STAMPEDE_IMAGE" "$rootfs" /usr/local/bin/stampede 65532:65532
}

build_simple() { # REF BINARY ENTRY USER
  local rootfs
  rootfs=$IMAGES/.rootfs-$(echo "$1" | tr '/:' '__')
  [ -x "$2" ] || die "missing $2: run tests/cluster/build.sh"
  rm -rf "$rootfs"
  install -D -m 0755 "$2" "$rootfs$3"
  etc_files "$rootfs"
  pack "$1" "$rootfs" "$3" "$4"
}

build_all() {
  ensure_packages umoci
  build_simple "$PAUSE_IMAGE" "$BIN/pause" /pause 65535:65535
  build_simple "$COREDNS_IMAGE" "$BIN/coredns" /coredns 65532:65532
  build_simple "$PROBE_IMAGE" "$BIN/probe" /probe 65532:65532
  build_stampede
}

# load: import every image into the node's containerd (namespace k8s.io, the one the kubelet uses).
load_all() {
  [ -S "$CONTAINERD_SOCK" ] || die "containerd is not running at $CONTAINERD_SOCK (run tests/cluster/up.sh)"
  local ref file
  for ref in "$PAUSE_IMAGE" "$COREDNS_IMAGE" "$PROBE_IMAGE" "$STAMPEDE_IMAGE"; do
    file=$(echo "$ref" | tr '/:' '__')
    [ -f "$IMAGES/$file.tar" ] || die "image $ref was not built"
    # The layout's index names only the tag; --base-name turns it into the full reference.
    ctr_k8s images import --base-name "${ref%:*}" "$IMAGES/$file.tar" >/dev/null
    # grep reads the whole list (no -q): exiting at the first match would let ctr's next line hit a closed pipe,
    # and pipefail would turn that SIGPIPE into a failed import.
    ctr_k8s images ls -q | grep -x "$ref" >/dev/null || die "import of $ref did not produce that name"
    log "image $ref: loaded into the node"
  done
}

case ${1:-all} in
  build) build_all ;;
  load) load_all ;;
  all)
    build_all
    if [ -S "$CONTAINERD_SOCK" ]; then load_all; fi
    ;;
  *) die "usage: $0 [build|load|all]" ;;
esac
