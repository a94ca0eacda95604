#!/usr/bin/env bash
# `endpoints: service` in the cluster: load spread over a Service's pods, not its one virtual address.
#  1. `helm install` with 2 agents and the HTTP target at 3 replicas.
#  2. `stampede run` of 300 sessions at 60/s over the 2 agents against the target's Service with `endpoints: service`:
#     the controller reads the Service's EndpointSlices (the chart's rbac.serviceEndpoints) and passes the ready pods
#     to the agents. The report has one endpoint row per pod, named by the pod; each row's completed is 100 ± 2
#     (sessions split by their index on each agent), and equals what that pod's own /metrics counted.
#  3. The Deployment scaled to 4 replicas while a second run goes on: the controller follows the slices and the new
#     pod gets its share of the later sessions (its row has completed > 0), with no error.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CHART=$REPO_ROOT/helm/stampede
REL=ep
FULL=$REL-stampede
CRD=loadtests.stampede.dev
tmp=$(mktemp -d)

host_stampede_bin
unset STAMPEDE_CONTROLLER STAMPEDE_TOKEN
st() { timeout 180 "$STAMPEDE_BIN" "$@" --namespace "$NS"; }

case_diagnostics() {
  kn logs -l app.kubernetes.io/component=controller --tail=80 || true
  kn get endpointslices -o wide || true
}
release_trap

say "helm install $REL (2 agents, the HTTP target at 3 replicas)"
helm_install_stampede --set agents.replicas=2 --set targets.http.enabled=true --set targets.http.replicas=3
for d in controller agent target-http; do
  kn rollout status "deployment/$FULL-$d" --timeout=180s >/dev/null || fail "deployment $FULL-$d did not roll out"
done
for ((i = 0; i < 60; i++)); do
  st agents --output json >"$tmp/agents.json" 2>"$tmp/agents.err" || true
  [ "$(jq '[.[] | select(.state != "not-attached" and .pod_status == "Ready")] | length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 1
done
[ "$(jq '[.[] | select(.pod_status == "Ready")] | length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 2 ] ||
  fail "2 agents did not attach: $(cat "$tmp/agents.err")"

target_pods() { kn get pods -l app.kubernetes.io/component=target-http --field-selector=status.phase=Running -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort; }
# What one pod served: its own counter, through the API server's pod proxy.
served_by() {
  k get --raw "/api/v1/namespaces/$NS/pods/http:$1:8080/proxy/metrics" |
    awk '$1 ~ /^stampede_target_http_requests_total\{/ && $1 ~ /route="data"/ {n += $2} END {print n + 0}'
}
pods=$(target_pods)
[ "$(echo "$pods" | grep -c .)" = 3 ] || fail "not 3 running target pods: $pods"
declare -A before
for p in $pods; do before[$p]=$(served_by "$p") || fail "cannot read pod $p's /metrics"; done

target_url=http://$FULL-target-http.$NS.svc.cluster.local:8080
scenario() { # name duration rate
  cat <<EOF
name: $1
target: $target_url
endpoints: service
agents: 2
arrival: uniform
phases:
  - { name: steady, duration: $2, arrival_rate: $3 }
session:
  - name: data
    http: { method: GET, path: /data }
thresholds:
  - error_rate < 1%
EOF
}
scenario k8s-endpoints 5s 60 >"$tmp/spread.yaml"
say "stampede run: 300 sessions over 2 agents against $target_url with endpoints: service"
st run "$tmp/spread.yaml" --report "$tmp/spread.json" >"$tmp/spread.txt" 2>"$tmp/spread.err" || {
  cat "$tmp/spread.txt" "$tmp/spread.err" >&2
  fail "stampede run with endpoints: service failed"
}
cat "$tmp/spread.txt" >&2
[ "$(jq -r .outcome "$tmp/spread.json")" = succeeded ] || fail "outcome $(jq -r .outcome "$tmp/spread.json")"
total=$(jq .totals.completed "$tmp/spread.json")
[ "$total" = 300 ] || fail "completed $total, not 300"
jq -c '.endpoints[] | {address, pod, completed, failed}' "$tmp/spread.json" >&2
[ "$(jq '.endpoints | length' "$tmp/spread.json")" = 3 ] || fail "$(jq '.endpoints | length' "$tmp/spread.json") endpoint rows, not 3"
[ "$(jq -r '.endpoints[].pod' "$tmp/spread.json" | sort)" = "$pods" ] ||
  fail "the endpoint rows name pods $(jq -r '[.endpoints[].pod] | join(",")' "$tmp/spread.json"), not the target's $(echo $pods)"
for p in $pods; do
  c=$(jq --arg p "$p" '.endpoints[] | select(.pod == $p) | .completed' "$tmp/spread.json")
  [ "$c" -ge 98 ] && [ "$c" -le 102 ] || fail "pod $p completed $c, not 100 ± 2"
  s=$(( $(served_by "$p") - ${before[$p]} ))
  [ "$s" = "$c" ] || fail "pod $p served $s requests, the report's row says $c"
done
say "spread: $(jq -r '[.endpoints[] | "\(.pod)=\(.completed)"] | join(" ")' "$tmp/spread.json"), each equal to what the pod served"

# 3. Followed while the run goes on: a fourth pod mid-run gets its share.
scenario k8s-endpoints-follow 12s 40 >"$tmp/follow.yaml"
say "stampede run (12 s) while the target is scaled to 4 replicas"
st run "$tmp/follow.yaml" --report "$tmp/follow.json" >"$tmp/follow.txt" 2>"$tmp/follow.err" &
run_pid=$!
sleep 3
kn scale "deployment/$FULL-target-http" --replicas=4 >/dev/null || fail "kubectl scale"
kn rollout status "deployment/$FULL-target-http" --timeout=60s >/dev/null || fail "the 4th target pod did not become ready"
wait "$run_pid" || {
  cat "$tmp/follow.txt" "$tmp/follow.err" >&2
  fail "stampede run while scaling failed"
}
cat "$tmp/follow.txt" >&2
jq -c '.endpoints[] | {address, pod, completed, failed}' "$tmp/follow.json" >&2
[ "$(jq -r .outcome "$tmp/follow.json")" = succeeded ] || fail "outcome $(jq -r .outcome "$tmp/follow.json")"
[ "$(jq '.totals.completed' "$tmp/follow.json")" = 480 ] || fail "completed $(jq .totals.completed "$tmp/follow.json"), not 480"
new=$(comm -13 <(echo "$pods") <(target_pods))
[ "$(echo "$new" | grep -c .)" = 1 ] || fail "not one new target pod: $new"
c=$(jq --arg p "$new" '[.endpoints[] | select(.pod == $p) | .completed] | add // 0' "$tmp/follow.json")
[ "$c" -gt 0 ] || fail "the pod that joined mid-run ($new) completed nothing"
say "followed: $(jq -r '[.endpoints[] | "\(.pod)=\(.completed)"] | join(" ")' "$tmp/follow.json"); the new pod $new took $c"
