#!/usr/bin/env bash
# gRPC in the cluster, and its calibration:
#  1. `helm install` with 2 agents and the gRPC target (`targets.grpc`: its Deployment, Service with appProtocol
#     kubernetes.io/h2c, probes on its metrics port, the targets NetworkPolicy admitting agents to port 50051).
#  2. `stampede run` with no --controller (kube port-forward, token from the Secret) of a closed load of a few seconds:
#     4 connections per agent, each with 4 streams (16 calls in flight per agent), calling Target/Echo against the
#     target's Service DNS name. The message comes from `proto_files` on the host and holds templates (the session
#     index, a UUID), rendered by the agents in their pods from the CLI's encoding program.
#  3. Calls counted exactly: the report's completed == the rise of the target's
#     stampede_target_grpc_calls_total{method="Echo",code="ok"} (read through the API server's service proxy), and no
#     errors. The calibration figures (calls/s, p50/p99, errors) are printed as `calibration:`.
#  4. The same calls as a LoadTest: the .proto file in a ConfigMap (`kubectl create configmap --from-file`), named by
#     `grpc.config_map`; the controller compiles it and encodes the templated message. Succeeded with DataReady=True
#     saying what was encoded, and the target served exactly the planned calls. A message that does not fit its method
#     fails the LoadTest at once, the field named, and no call is made.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CHART=$REPO_ROOT/helm/stampede
REL=gr
FULL=$REL-stampede
CRD=loadtests.stampede.dev
PROTO=$REPO_ROOT/target-servers/proto/stampede/target/v1/target.proto
DURATION=${STAMPEDE_E2E_GRPC_DURATION:-5s}
tmp=$(mktemp -d)

host_stampede_bin
unset STAMPEDE_CONTROLLER STAMPEDE_TOKEN
st() { timeout 180 "$STAMPEDE_BIN" "$@" --namespace "$NS"; }

# On failure, besides the namespace's state: the controller's log.
case_diagnostics() { kn logs -l app.kubernetes.io/component=controller --tail=80 || true; }
release_trap

say "helm install $REL (2 agents, the gRPC target)"
helm_install_stampede --set agents.replicas=2 --set targets.grpc.enabled=true
for d in controller agent target-grpc; do
  kn rollout status "deployment/$FULL-$d" --timeout=120s >/dev/null || fail "deployment $FULL-$d did not roll out"
done
[ "$(kn get service "$FULL-target-grpc" -o jsonpath='{.spec.ports[?(@.name=="grpc")].appProtocol}')" = kubernetes.io/h2c ] ||
  fail "the gRPC target's Service port has no appProtocol kubernetes.io/h2c"

for ((i = 0; i < 60; i++)); do
  st agents --output json >"$tmp/agents.json" 2>"$tmp/agents.err" || true
  [ "$(jq '[.[] | select(.state != "not-attached" and .pod_status == "Ready")] | length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 1
done
[ "$(jq '[.[] | select(.pod_status == "Ready")] | length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 2 ] ||
  fail "2 agents did not attach: $(cat "$tmp/agents.err")"

ok_calls() {
  k get --raw "/api/v1/namespaces/$NS/services/http:$FULL-target-grpc:9103/proxy/metrics" |
    awk '$1 ~ /^stampede_target_grpc_calls_total\{/ && $1 ~ /method="Echo"/ && $1 ~ /code="ok"/ {n += $2} END {print n + 0}'
}
before=$(ok_calls) || fail "cannot read the gRPC target's /metrics"

target=grpc://$FULL-target-grpc.$NS.svc.cluster.local:50051
cat >"$tmp/grpc.yaml" <<EOF
name: k8s-grpc
target: $target
grpc: { proto_files: [$PROTO] }
agents: 2
load:
  model: closed
  connections: 8
  duration: $DURATION
  streams_per_connection: 4
session:
  - name: echo
    grpc:
      method: stampede.target.v1.Target/Echo
      message: { text: 'k8s \${session.index} \${uuid()}', id: '\${session.index}', inner: { flag: true } }
      metadata: { x-session: '\${session.index}' }
thresholds:
  - error_rate < 0.1%
EOF
say "stampede run (no --controller): closed, 8 connections x 4 streams over 2 agents for $DURATION against $target"
st run "$tmp/grpc.yaml" --report "$tmp/run.json" >"$tmp/run.txt" 2>"$tmp/run.err" || {
  cat "$tmp/run.txt" "$tmp/run.err" >&2
  fail "stampede run failed"
}
cat "$tmp/run.txt" >&2
after=$(ok_calls) || fail "cannot read the gRPC target's /metrics after the run"
outcome=$(jq -r '.outcome' "$tmp/run.json")
completed=$(jq '.totals.completed' "$tmp/run.json")
errors=$(jq '.totals.error_count' "$tmp/run.json")
served=$((after - before))
[ "$outcome" = succeeded ] || fail "run outcome is $outcome"
[ "$completed" -gt 0 ] || fail "no call completed"
[ "$errors" = 0 ] || fail "errors: $(jq -c '.totals.errors' "$tmp/run.json")"
[ "$completed" = "$served" ] ||
  fail "the report's completed $completed != the target's Echo ok calls $served (calls_total $before -> $after)"
[ "$(jq '.agents | length' "$tmp/run.json")" = 2 ] || fail "the report names $(jq '.agents | length' "$tmp/run.json") agents, not 2"
secs=$(jq -r '.duration_s' "$tmp/run.json")
p50=$(jq -r '.latency.response_time.p50_us' "$tmp/run.json")
p99=$(jq -r '.latency.response_time.p99_us' "$tmp/run.json")
say "calibration: $completed calls in ${secs}s = $(jq -r '.totals.throughput_rps | floor' "$tmp/run.json") calls/s" \
  "(2 agents, 8 connections x 4 streams, closed), response time p50 ${p50} us, p99 ${p99} us, errors $errors;" \
  "the target served $served Echo ok calls: completed == served"

# 4. The same calls as a LoadTest: the schema from a ConfigMap, compiled by the controller.
kn create configmap protos --from-file="$PROTO" >/dev/null || fail "creating the ConfigMap protos"
LT_CALLS=100
before=$(ok_calls) || fail "cannot read the gRPC target's /metrics"
cat >"$tmp/lt.yaml" <<EOF
apiVersion: stampede.dev/v1alpha1
kind: LoadTest
metadata: {name: grpc}
spec:
  name: k8s-grpc-loadtest
  target: $target
  grpc: { proto_files: [stampede/target/v1/target.proto], config_map: protos }
  agents: 2
  arrival: uniform
  phases:
    - { name: steady, duration: 2s, arrival_rate: $((LT_CALLS / 2)) }
  session:
    - name: echo
      grpc:
        method: stampede.target.v1.Target/Echo
        message: { text: 'lt \${session.index}', id: '\${session.index}' }
  thresholds:
    - error_rate < 0.1%
EOF
say "LoadTest grpc: $LT_CALLS Echo calls over 2 agents, the schema from ConfigMap protos"
kn apply -f "$tmp/lt.yaml" >&2 || fail "kubectl apply LoadTest grpc"
kn wait loadtest/grpc --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null ||
  fail "LoadTest grpc did not succeed: $(kn get loadtest grpc -o jsonpath='{.status.phase}: {.status.message}')"
kn get loadtest grpc -o json >"$tmp/lt.json"
jq '.status | {phase, message, conditions, summary: (.summary | {completed, failed, agents})}' "$tmp/lt.json" >&2
jq -e --argjson n "$LT_CALLS" --arg w "grpc: 1 call encoded against 1 file from configmap $NS/protos" \
  '.status.summary.completed == $n and .status.summary.failed == 0 and .status.summary.agents == 2
   and (.status.conditions[] | select(.type == "DataReady") | .status == "True" and (.message | contains($w)))' \
  "$tmp/lt.json" >/dev/null || fail "LoadTest grpc: not $LT_CALLS completed on 2 agents with DataReady=True naming the ConfigMap"
after=$(ok_calls) || fail "cannot read the gRPC target's /metrics after the LoadTest"
[ $((after - before)) = "$LT_CALLS" ] ||
  fail "the target served $((after - before)) Echo ok calls during the LoadTest, not $LT_CALLS"
say "LoadTest grpc: $LT_CALLS calls encoded by the controller from ConfigMap protos, all served"

# A message the schema refuses: Failed at once, the field named, nothing sent.
before=$(ok_calls) || fail "cannot read the gRPC target's /metrics"
sed -e 's/name: grpc}/name: grpc-bad}/' -e "s/id: '\\\${session.index}'/id: 'seven'/" "$tmp/lt.yaml" >"$tmp/lt-bad.yaml"
grep -q "id: 'seven'" "$tmp/lt-bad.yaml" || fail "lt-bad.yaml lacks the bad id"
kn apply -f "$tmp/lt-bad.yaml" >&2 || fail "kubectl apply LoadTest grpc-bad"
kn wait loadtest/grpc-bad --for=jsonpath='{.status.phase}'=Failed --timeout=30s >/dev/null ||
  fail "LoadTest grpc-bad did not fail: $(kn get loadtest grpc-bad -o jsonpath='{.status.phase}: {.status.message}')"
msg=$(kn get loadtest grpc-bad -o jsonpath='{.status.message}')
case "$msg" in
  "session[0].grpc.message.id: "*) ;;
  *) fail "LoadTest grpc-bad's message does not name the field: $msg" ;;
esac
[ "$(kn get loadtest grpc-bad -o jsonpath='{.status.runId}')" = "" ] || fail "LoadTest grpc-bad submitted a run"
[ "$(ok_calls)" = "$before" ] || fail "calls were made for LoadTest grpc-bad"
say "LoadTest grpc-bad: Failed at once: $msg"
