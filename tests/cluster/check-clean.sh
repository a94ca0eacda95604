#!/usr/bin/env bash
# Leak check for up.sh/down.sh: after down.sh, nothing the cluster made may remain.
#
#   check-clean.sh snapshot DIR      record the machine's state before up.sh
#   check-clean.sh verify DIR [PIDFILE...]
#       compare with the snapshot: no cluster process (recorded PIDs, or anything running our binaries, our
#       containerd socket or state directory), no mount under the cluster's directories, no new network namespace,
#       no new network interface (bridge or veth), no new iptables/ip6tables chain, no cluster directory.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

snapshot_to() { # DIR
  mkdir -p "$1"
  ip netns list 2>/dev/null | awk '{print $1}' | sort >"$1/netns"
  ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | sort >"$1/links"
  {
    for t in filter nat mangle raw; do iptables -t "$t" -S 2>/dev/null | awk -v t="$t" '/^-N /{print "ip4", t, $2}'; done
    for t in filter nat mangle raw; do ip6tables -t "$t" -S 2>/dev/null | awk -v t="$t" '/^-N /{print "ip6", t, $2}'; done
  } | sort >"$1/chains"
  # Rules in the built-in chains of every table (a leftover jump to a deleted chain would show here).
  for t in filter nat mangle raw; do
    iptables -t "$t" -S 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) ' | sed "s/^/$t /" || true
  done | sort >"$1/rules"
}

case ${1:-} in
  snapshot)
    snapshot_to "$2"
    ;;
  verify)
    before=$2
    shift 2
    now=$(mktemp -d)
    trap 'rm -rf "$now"' EXIT
    snapshot_to "$now"
    leaks=0
    leak() { log "LEAK: $*"; leaks=$((leaks + 1)); }
    for f in "$@"; do
      [ -f "$f" ] || continue
      pid=$(cat "$f")
      if kill -0 "$pid" 2>/dev/null; then leak "process $(basename "$f") (pid $pid) still runs"; fi
    done
    for p in /proc/[0-9]*; do
      cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
      case $cmd in
        *"$BIN/"* | *"$CONTAINERD_SOCK"* | *"$STATE/"*) leak "process ${p#/proc/} still runs: ${cmd:0:200}" ;;
      esac
    done
    while read -r mp; do leak "mount $mp"; done < <(awk '{print $5}' /proc/self/mountinfo | grep -E "^($STATE|$RUN)(/|$)" || true)
    # Only what looks like ours counts: other programs on a shared machine may add their own namespaces etc.
    while read -r x; do leak "network namespace $x"; done < <(comm -13 "$before/netns" "$now/netns" | grep '^cni-' || true)
    while read -r x; do leak "network interface $x"; done < <(comm -13 "$before/links" "$now/links" | grep -E "^($BRIDGE|veth)" || true)
    while read -r x; do leak "iptables chain $x"; done < <(comm -13 "$before/chains" "$now/chains" | grep -E ' (KUBE-|STAMPEDE-|CNI-)' || true)
    while read -r x; do leak "iptables rule $x"; done < <(comm -13 "$before/rules" "$now/rules" | grep -E 'KUBE-|STAMPEDE-|CNI-|198\.1[89]\.' || true)
    for d in "$STATE" "$RUN"; do
      if [ -e "$d" ]; then leak "directory $d"; fi
    done
    if [ "$leaks" = 0 ]; then
      log "leak check: nothing left behind (processes, mounts, netns, interfaces, iptables chains, directories)"
    else
      die "leak check: $leaks leftovers after down.sh"
    fi
    ;;
  *) die "usage: $0 snapshot DIR | verify DIR [PIDFILE...]" ;;
esac
