# shellcheck shell=bash
# Helpers for e2e cases (sourced). A case gets its own namespace, deleted on exit; on failure the namespace's
# state, events and pod logs are printed first.
set -euo pipefail

: "${KUBECTL:?run cases through tests/cluster/e2e.sh}"
CASE_NAME=$(basename "$0" .sh)
NS=e2e-$(echo "$CASE_NAME" | tr -c 'a-z0-9\n' '-' | sed 's/^[0-9-]*//' | cut -c1-40)-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')

say() { printf '[%s %s] %s\n' "$CASE_NAME" "$(date +%T)" "$*" >&2; }
fail() {
  say "FAIL: $*"
  exit 1
}
k() { timeout 120 "$KUBECTL" "$@"; }
kn() { timeout 120 "$KUBECTL" -n "$NS" "$@"; }

diagnostics() {
  say "diagnostics for namespace $NS"
  kn get all,events -o wide >&2 || true
  local p
  for p in $(kn get pods -o name 2>/dev/null); do
    echo "--- logs $p" >&2
    kn logs "$p" --all-containers --tail=50 >&2 || true
  done
}

case_exit() {
  local rc=$?
  if [ "$rc" != 0 ]; then diagnostics; fi
  timeout 120 "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  exit "$rc"
}
trap case_exit EXIT
k create namespace "$NS" >/dev/null
say "namespace $NS"

# ip_in_cidr IP CIDR (IPv4 only)
ip_in_cidr() {
  local ip=$1 net=${2%/*} bits=${2#*/} a b c d n
  IFS=. read -r a b c d <<<"$ip"
  local x=$(((a << 24) | (b << 16) | (c << 8) | d))
  IFS=. read -r a b c d <<<"$net"
  n=$(((a << 24) | (b << 16) | (c << 8) | d))
  local mask=$(((0xffffffff << (32 - bits)) & 0xffffffff))
  [ $((x & mask)) = $((n & mask)) ]
}

# run_pod NAME IMAGE ARGS...: run a one-shot pod to completion (120 s), print its log, fail unless it succeeded.
run_pod() {
  local phase
  phase=$(pod_phase "$@")
  [ "$phase" = Succeeded ] || fail "pod $1 ended in phase '${phase:-unknown}'"
}

# pod_phase NAME IMAGE ARGS...: run_pod that prints the phase the pod ended in instead of failing.
pod_phase() {
  local name=$1 image=$2 phase i
  shift 2
  local args=""
  local a
  for a in "$@"; do args+="\"$a\","; done
  kn apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata: {name: $name, labels: {app: $name}}
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}
  containers:
    - name: main
      image: $image
      imagePullPolicy: $STAMPEDE_IMAGE_PULL_POLICY
      command: [${args%,}]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
      resources: {requests: {cpu: 10m, memory: 16Mi}, limits: {memory: 64Mi}}
EOF
  for ((i = 0; i < 120; i++)); do
    phase=$(kn get pod "$name" -o jsonpath='{.status.phase}')
    case $phase in Succeeded | Failed) break ;; esac
    sleep 1
  done
  kn logs "$name" >&2 || true
  echo "$phase"
}

# helm_install_stampede [HELM ARGS...]: `helm install` of the chart as $REL in $NS with the image under test and
# the given values, waiting for it; helm's output goes to $tmp/install.txt and is shown when the install fails.
helm_install_stampede() {
  timeout 300 "$HELM" install "$REL" "$CHART" -n "$NS" --wait --timeout 240s \
    --set image.repository="$STAMPEDE_IMAGE_REPOSITORY" --set image.tag="$STAMPEDE_IMAGE_TAG" \
    --set image.pullPolicy="$STAMPEDE_IMAGE_PULL_POLICY" "$@" \
    >"$tmp/install.txt" 2>&1 || { cat "$tmp/install.txt" >&2; fail "helm install"; }
}

# helm_uninstall_clean REL CRD [SECRET]: `helm uninstall` the release, then check that nothing of it is left in $NS
# and that the CRD, which the chart documents as kept, is still there. SECRET: the generated token Secret, which the
# chart keeps by default (auth.retainSecret, helm.sh/resource-policy: keep): it must be left, and is then deleted.
helm_uninstall_clean() {
  local rel=$1 crd=$2 secret=${3:-} left
  timeout 150 "$HELM" uninstall "$rel" -n "$NS" --wait --timeout 120s >&2 || fail "helm uninstall"
  kn wait --for=delete pod -l "app.kubernetes.io/instance=$rel" --timeout=90s >/dev/null 2>&1 || true
  if [ -n "$secret" ]; then
    [ "$(kn get secret "$secret" -o jsonpath='{.metadata.annotations.helm\.sh/resource-policy}' 2>/dev/null)" = keep ] ||
      fail "the token Secret $secret should be kept by helm uninstall (documented), but is gone or not marked keep"
    kn delete secret "$secret" --wait >/dev/null || fail "deleting the kept Secret $secret"
  fi
  left=$(kn get all,secrets,configmaps,serviceaccounts,roles,rolebindings,pvc,endpointslices -o name 2>/dev/null |
    grep -v -e '^configmap/kube-root-ca.crt$' -e '^serviceaccount/default$' || true)
  [ -z "$left" ] || fail "left behind after helm uninstall: $(echo "$left" | tr '\n' ' ')"
  k get crd "$crd" >/dev/null || fail "the CRD $crd should be kept by helm uninstall (documented), but is gone"
}

# release_trap: for a case that installs the chart as release $REL (its CRD $CRD, its scratch directory $tmp), replaces
# case_exit with release_exit. On exit: on failure the diagnostics, then the case's own `case_diagnostics` when it
# defines one; always the case's `case_cleanup` when it defines one, the LoadTests deleted (and the finalizers of any a
# failed run left dropped, so they cannot block the namespace), the release uninstalled, the CRD deleted when this case
# created it (it is cluster-wide and the chart keeps it), the namespace, and $tmp.
release_trap() {
  crd_preexisting=0
  if k get crd "$CRD" >/dev/null 2>&1; then crd_preexisting=1; fi
  trap release_exit EXIT
}

release_exit() {
  local rc=$? lt
  trap - EXIT
  if [ "$rc" != 0 ]; then
    diagnostics
    if declare -F case_diagnostics >/dev/null; then case_diagnostics >&2 || true; fi
  fi
  if declare -F case_cleanup >/dev/null; then case_cleanup || true; fi
  timeout 60 "$KUBECTL" -n "$NS" delete loadtests --all --wait=false >/dev/null 2>&1 || true
  timeout 120 "$HELM" uninstall "$REL" -n "$NS" --wait --timeout 100s >/dev/null 2>&1 || true
  for lt in $(timeout 30 "$KUBECTL" -n "$NS" get loadtests -o name 2>/dev/null); do
    timeout 30 "$KUBECTL" -n "$NS" patch "$lt" --type=merge -p '{"metadata":{"finalizers":null}}' >/dev/null 2>&1 || true
  done
  if [ "$crd_preexisting" = 0 ]; then timeout 60 "$KUBECTL" delete crd "$CRD" --ignore-not-found >/dev/null 2>&1 || true; fi
  timeout 120 "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$tmp"
  exit "$rc"
}

# host_stampede_bin: sets STAMPEDE_BIN, the stampede binary cases run on the host (default: the one images.sh packed,
# from the cargo target directory, of profile STAMPEDE_IMAGE_PROFILE), and fails when it is not there.
host_stampede_bin() {
  if [ -z "${STAMPEDE_BIN:-}" ]; then
    local tdir=${CARGO_TARGET_DIR:-$REPO_ROOT/target}
    case $tdir in /*) ;; *) tdir=$REPO_ROOT/$tdir ;; esac
    if [ "${STAMPEDE_IMAGE_PROFILE:-release}" = dev ]; then STAMPEDE_BIN=$tdir/debug/stampede; else STAMPEDE_BIN=$tdir/release/stampede; fi
  fi
  [ -x "$STAMPEDE_BIN" ] || fail "no stampede binary at $STAMPEDE_BIN (cargo build --release -p stampede)"
}
