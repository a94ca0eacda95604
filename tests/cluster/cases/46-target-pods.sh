#!/usr/bin/env bash
# The pods behind a Service target in the report: split, slow pod, CPU per pod and req/s per target core.
#  1. `helm install` with 2 agents and the HTTP target at 2 replicas burning 4 ms of CPU per `GET /data`
#     (--work-ms 4, no CPU limit), plus a second Deployment behind the same Service selector: one pod with
#     --work-ms 4 --delay-ms 50 and a 50m CPU limit (slow, and throttled).
#  2. A closed run of 6 connections over the 2 agents with `endpoints: service`: each pod's endpoint row holds 2 ± 1
#     connections, the text report names the slow pod, `target_resources.pods` has the 3 pods with their CPU, and
#     the req/s per target core (the pods' CPU from the kubelet's resource metrics) is within 10 % of 250
#     (1 / 4 ms); the 50m pod's `throttled` (from cAdvisor's CFS periods) is above 0 and the others have none.
#  3. The same target loaded through its Service address (no `endpoints:`): the report still has the 3 pods' CPU.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CHART=$REPO_ROOT/helm/stampede
REL=tp
FULL=$REL-stampede
CRD=loadtests.stampede.dev
tmp=$(mktemp -d)

host_stampede_bin
unset STAMPEDE_CONTROLLER STAMPEDE_TOKEN
st() { timeout 180 "$STAMPEDE_BIN" "$@" --namespace "$NS"; }

case_diagnostics() {
  kn logs -l app.kubernetes.io/component=controller --tail=80 || true
}
release_trap

say "helm install $REL (2 agents, the HTTP target at 2 replicas with --work-ms 4)"
helm_install_stampede --set agents.replicas=2 --set targets.http.enabled=true --set targets.http.replicas=2 \
  --set-string 'targets.http.extraArgs={--work-ms,4}'
# The slow pod: the chart's target labels, so the Service selects it too.
kn apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: slow-target}
spec:
  replicas: 1
  selector: {matchLabels: {app.kubernetes.io/instance: $REL, app.kubernetes.io/component: target-http, variant: slow}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: stampede, app.kubernetes.io/instance: $REL, app.kubernetes.io/component: target-http, variant: slow}
    spec:
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, seccompProfile: {type: RuntimeDefault}}
      containers:
        - name: http
          image: $STAMPEDE_IMAGE
          imagePullPolicy: $STAMPEDE_IMAGE_PULL_POLICY
          args: [target, http, --listen, "0.0.0.0:8080", --work-ms, "4", --delay-ms, "50"]
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /readyz, port: http}, periodSeconds: 2}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
          resources: {requests: {cpu: 50m, memory: 32Mi}, limits: {cpu: 50m, memory: 128Mi}}
YAML
[ "$(kn get svc "$FULL-target-http" -o jsonpath='{.spec.selector.app\.kubernetes\.io/name}')" = stampede ] ||
  fail "the target Service's selector is not the one the slow Deployment copies"
for d in "$FULL-controller" "$FULL-agent" "$FULL-target-http" slow-target; do
  kn rollout status "deployment/$d" --timeout=180s >/dev/null || fail "deployment $d did not roll out"
done
for ((i = 0; i < 60; i++)); do
  st agents --output json >"$tmp/agents.json" 2>"$tmp/agents.err" || true
  [ "$(jq '[.[] | select(.state != "not-attached" and .pod_status == "Ready")] | length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 1
done
slow=$(kn get pods -l variant=slow -o jsonpath='{.items[0].metadata.name}')
for ((i = 0; i < 30; i++)); do
  [ "$(kn get endpointslices -l "kubernetes.io/service-name=$FULL-target-http" -o json | jq '[.items[].endpoints[] | select(.conditions.ready)] | length')" = 3 ] && break
  sleep 1
done

cat >"$tmp/pods.yaml" <<YAML
name: k8s-target-pods
target: http://$FULL-target-http.$NS.svc.cluster.local:8080
endpoints: service
agents: 2
load: { model: closed, connections: 6, duration: ${STAMPEDE_E2E_PODS_DURATION:-20s} }
session:
  - name: data
    http: { method: GET, path: /data }
thresholds:
  - error_rate < 1%
YAML
say "stampede run: 6 connections over 2 agents and 3 pods (one slow, CPU-limited), endpoints: service"
st run "$tmp/pods.yaml" --report "$tmp/pods.json" >"$tmp/pods.txt" 2>"$tmp/pods.err" || {
  cat "$tmp/pods.txt" "$tmp/pods.err" >&2
  fail "stampede run failed"
}
cat "$tmp/pods.txt" >&2
r=$tmp/pods.json
[ "$(jq -r .outcome "$r")" = succeeded ] || fail "outcome $(jq -r .outcome "$r")"
jq -c '.endpoints[] | {pod, connections, completed, p99_us}' "$r" >&2
jq -c '.target_resources | {cpu: .cpu_cores.total, pods: [.pods[] | {pod, cpu_cores, throttled, max_working_set_bytes, restarts}], ready_replicas, pods_unavailable}' "$r" >&2
[ "$(jq '.endpoints | length' "$r")" = 3 ] || fail "$(jq '.endpoints | length' "$r") endpoint rows, not 3"
jq -e '[.endpoints[].connections] | all(. >= 1 and . <= 3) and add == 6' "$r" >/dev/null ||
  fail "connections per pod $(jq -c '[.endpoints[].connections]' "$r"), not 2 ± 1 adding up to 6"
grep -q "slow endpoint .*($slow)" "$tmp/pods.txt" || fail "the text report does not name the slow pod $slow"
[ "$(jq '.target_resources.pods | length' "$r")" = 3 ] || fail "$(jq '.target_resources.pods | length' "$r") pod rows, not 3"
jq -e '.target_resources.pods | all(.cpu_cores > 0)' "$r" >/dev/null || fail "a pod without CPU: $(jq -c '[.target_resources.pods[].cpu_cores]' "$r")"
per_core=$(jq '.totals.throughput_rps / .target_resources.cpu_cores.total' "$r")
awk -v x="$per_core" 'BEGIN { exit !(x >= 225 && x <= 275) }' ||
  fail "req/s per target core $per_core, not within 10 % of 250"
throttled=$(jq --arg p "$slow" '.target_resources.pods[] | select(.pod == $p) | .throttled // 0' "$r")
awk -v x="$throttled" 'BEGIN { exit !(x > 0) }' || fail "the 50m pod $slow was not throttled ($throttled)"
jq -e --arg p "$slow" '[.target_resources.pods[] | select(.pod != $p) | .throttled] | all(. == null)' "$r" >/dev/null ||
  fail "a pod without a CPU limit has a throttled share: $(jq -c '[.target_resources.pods[].throttled]' "$r")"
say "split $(jq -r '[.endpoints[] | "\(.pod)=\(.connections)"] | join(" ")' "$r"); slow $slow; \
$(jq -r '.totals.throughput_rps | floor' "$r") req/s on $(jq -r '.target_resources.cpu_cores.total * 1000 | floor' "$r") mcores: \
$(printf %.0f "$per_core") req/s per target core; $slow throttled $(awk -v x="$throttled" 'BEGIN { printf "%.1f %%", x * 100 }')"

sed '/^endpoints: service$/d; s/duration: [0-9a-z]*/duration: 6s/' "$tmp/pods.yaml" >"$tmp/via.yaml"
say "stampede run through the Service address (no endpoints:): its pods are still sampled"
st run "$tmp/via.yaml" --report "$tmp/via.json" >"$tmp/via.txt" 2>"$tmp/via.err" || {
  cat "$tmp/via.txt" "$tmp/via.err" >&2
  fail "stampede run through the Service address failed"
}
v=$tmp/via.json
[ "$(jq '.endpoints | length' "$v")" -le 1 ] || fail "$(jq '.endpoints | length' "$v") endpoint rows without endpoints:"
[ "$(jq '.target_resources.pods | length' "$v")" = 3 ] ||
  fail "$(jq '.target_resources.pods | length' "$v") pod rows through the Service address, not 3 ($(jq -c .target_resources.pods_unavailable "$v"))"
jq -e '.target_resources.pods | all(.cpu_cores > 0)' "$v" >/dev/null || fail "a pod without CPU through the Service address"
say "through the Service address: $(jq -r '[.target_resources.pods[] | "\(.pod)=\(.cpu_cores * 1000 | floor)m"] | join(" ")' "$v")"
