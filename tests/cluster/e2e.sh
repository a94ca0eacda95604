#!/usr/bin/env bash
# Stampede's Kubernetes end-to-end tests: one entry point.
#
# usage: tests/cluster/e2e.sh [CASE...]     CASE = a file in tests/cluster/cases/ (default: all *.sh there, in order)
#
# With $KUBECONFIG pointing at a reachable cluster, the cases run against it (nothing is started or stopped; the
# images must be pullable there: set STAMPEDE_IMAGE, STAMPEDE_PROBE_IMAGE and STAMPEDE_IMAGE_PULL_POLICY).
# Otherwise it builds what is missing, brings the local cluster up (tests/cluster/up.sh), runs the cases, and
# always tears the cluster down (trap), then checks that down.sh left nothing behind.
#
# Every case is a bash script run with a time limit and these variables:
#   KUBECONFIG  KUBECTL (kubectl binary)  HELM (helm binary)  STAMPEDE_IMAGE  STAMPEDE_IMAGE_REPOSITORY
#   STAMPEDE_IMAGE_TAG  STAMPEDE_IMAGE_PULL_POLICY  STAMPEDE_PROBE_IMAGE  STAMPEDE_E2E_LOCAL (1 for the local
#   cluster)  STAMPEDE_E2E_POD_CIDR (pod network to check, empty on a foreign cluster)  REPO_ROOT
# and may source tests/cluster/cases/lib.sh for helpers (own namespace, waits, diagnostics on failure).
#
# env: STAMPEDE_E2E_CASE_TIMEOUT  seconds per case (default 600)
#      STAMPEDE_E2E_BUILD_TIMEOUT seconds for building binaries and images (default 3600: a cold Go build)
#      STAMPEDE_E2E_KEEP=1        leave the local cluster running afterwards (no teardown, no leak check)
# exit: 0 all cases passed; 1 a case or the leak check failed; 3 this machine cannot run the cluster (see ci.sh)
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CASE_TIMEOUT=${STAMPEDE_E2E_CASE_TIMEOUT:-600}
BUILD_TIMEOUT=${STAMPEDE_E2E_BUILD_TIMEOUT:-3600}
T0=$(date +%s)

cases=()
if [ $# -gt 0 ]; then
  for c in "$@"; do
    if [ -f "$c" ]; then cases+=("$c"); elif [ -f "$CLUSTER_DIR/cases/$c" ]; then cases+=("$CLUSTER_DIR/cases/$c"); else die "no such case: $c"; fi
  done
else
  for c in "$CLUSTER_DIR"/cases/[0-9]*.sh; do cases+=("$c"); done
fi
[ ${#cases[@]} -gt 0 ] || die "no cases in $CLUSTER_DIR/cases"

external=0
if [ -n "${KUBECONFIG:-}" ] && [ -f "${KUBECONFIG%%:*}" ]; then
  if timeout 15 "$(kubectl_bin)" get --raw /readyz >/dev/null 2>&1; then
    external=1
  else
    log "KUBECONFIG=$KUBECONFIG does not reach a cluster: using the local test cluster instead"
  fi
fi

export REPO_ROOT
if [ "$external" = 1 ]; then
  log "running against the cluster in KUBECONFIG=$KUBECONFIG"
  export KUBECTL=${KUBECTL:-$(kubectl_bin)}
  export HELM=${HELM:-$(if [ -x "$BIN/helm" ]; then echo "$BIN/helm"; else command -v helm || true; fi)}
  export STAMPEDE_IMAGE_PULL_POLICY=${STAMPEDE_IMAGE_PULL_POLICY:-IfNotPresent}
  export STAMPEDE_E2E_LOCAL=0 STAMPEDE_E2E_POD_CIDR=${STAMPEDE_E2E_POD_CIDR:-}
else
  need_root "e2e.sh (local cluster)"
  ensure_packages "${NODE_PACKAGES[@]}" || exit 3
  log "building cluster binaries and images (timeout ${BUILD_TIMEOUT}s)"
  timeout "$BUILD_TIMEOUT" "$CLUSTER_DIR/build.sh" || die "building the cluster binaries failed"
  timeout "$BUILD_TIMEOUT" "$CLUSTER_DIR/images.sh" build || die "building the images failed"
  if cluster_running; then
    log "a local test cluster is already running (pids in $PIDS); it is not ours to stop."
    log "run against it with KUBECONFIG=$KUBECONFIG_OUT $0, or stop it first with tests/cluster/down.sh"
    exit 3
  fi
  baseline=$(mktemp -d)
  pidcopy=$(mktemp -d)
  "$CLUSTER_DIR/check-clean.sh" snapshot "$baseline"
  # shellcheck disable=SC2317  # invoked by the EXIT trap
  teardown() {
    local rc=$?
    trap - EXIT INT TERM
    if [ "${STAMPEDE_E2E_KEEP:-0}" = 1 ]; then
      log "STAMPEDE_E2E_KEEP=1: the cluster stays up (KUBECONFIG=$KUBECONFIG_OUT); tear down with tests/cluster/down.sh"
      exit "$rc"
    fi
    cp "$PIDS"/* "$pidcopy/" 2>/dev/null || true
    timeout 300 "$CLUSTER_DIR/down.sh" || rc=1
    # down.sh must be idempotent: a second run finds nothing to do and succeeds.
    timeout 120 "$CLUSTER_DIR/down.sh" || { log "a second down.sh failed"; rc=1; }
    if ! "$CLUSTER_DIR/check-clean.sh" verify "$baseline" "$pidcopy"/*; then rc=1; fi
    rm -rf "$baseline" "$pidcopy"
    log "e2e finished in $(($(date +%s) - T0))s (exit $rc)"
    exit "$rc"
  }
  trap teardown EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  up_rc=0
  # The images were just built: up.sh must not run cargo again (the tree may have changed since).
  export STAMPEDE_IMAGE_SKIP_CARGO=1
  timeout 600 "$CLUSTER_DIR/up.sh" || up_rc=$?
  if [ "$up_rc" = 3 ]; then
    trap - EXIT
    log "the machine is busy (another cluster or its ports): not starting one"
    exit 3
  elif [ "$up_rc" != 0 ]; then
    # up.sh tore its own half-started cluster down; nothing else runs (checked above), so retrying is safe.
    log "up.sh failed (exit $up_rc); retrying once from a clean state"
    timeout 300 "$CLUSTER_DIR/down.sh" || true
    timeout 600 "$CLUSTER_DIR/up.sh" || die "the local cluster did not come up"
  fi
  export KUBECONFIG=$KUBECONFIG_OUT
  export KUBECTL=$BIN/kubectl HELM=$BIN/helm
  export STAMPEDE_IMAGE STAMPEDE_IMAGE_PULL_POLICY=Never STAMPEDE_PROBE_IMAGE=$PROBE_IMAGE
  export STAMPEDE_E2E_LOCAL=1 STAMPEDE_E2E_POD_CIDR=$POD_CIDR
fi
export STAMPEDE_IMAGE=${STAMPEDE_IMAGE} STAMPEDE_PROBE_IMAGE=${STAMPEDE_PROBE_IMAGE:-$PROBE_IMAGE}
export STAMPEDE_IMAGE_REPOSITORY=${STAMPEDE_IMAGE%:*} STAMPEDE_IMAGE_TAG=${STAMPEDE_IMAGE##*:}

passed=0
failed=0
failed_names=()
for c in "${cases[@]}"; do
  name=$(basename "$c" .sh)
  log "=== case $name (timeout ${CASE_TIMEOUT}s)"
  start=$(date +%s)
  if timeout -k 30 "$CASE_TIMEOUT" bash "$c"; then
    passed=$((passed + 1))
    log "=== case $name: PASS ($(($(date +%s) - start))s)"
  else
    rc=$?
    failed=$((failed + 1))
    failed_names+=("$name")
    if [ "$rc" = 124 ]; then log "=== case $name: FAIL (timed out after ${CASE_TIMEOUT}s)"; else log "=== case $name: FAIL (exit $rc)"; fi
  fi
done

echo "e2e: $passed passed, $failed failed"
if [ "$failed" -gt 0 ]; then
  log "failed cases: ${failed_names[*]}"
  exit 1
fi
exit 0
