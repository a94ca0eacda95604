#!/usr/bin/env bash
# The controller pod deleted mid-LoadTest, its data directory kept:
#  1. The report store on a PersistentVolumeClaim (controller.reports.persistence with a storageClass). This cluster
#     has no dynamic provisioner, so the case makes the volume itself: a hostPath PersistentVolume of its own storage
#     class on the node, owned by the controller's user, deleted at the end.
#  2. A LoadTest of 24 s at 40 arrivals/s over 2 agents against the http target; 6 s into it the controller pod is
#     deleted (SIGTERM: the run is checkpointed to the data directory and left to the next controller). The
#     Deployment's Recreate strategy starts a new pod on the same volume, which re-adopts the run; the agents ride
#     out the restart within their lease and restart grace and re-attach.
#  3. The LoadTest is never marked failed meanwhile and ends Succeeded; the report's books balance
#     (started = completed + failed + interrupted) and count every request the target served on /data (its
#     stampede_target_http_requests_total), within 3; the target pod's samples from before the restart are kept. Prints `restart:` figures: served vs counted, how long the
#     controller was away and how long the agents took to come back.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CHART=$REPO_ROOT/helm/stampede
REL=cr
FULL=$REL-stampede
CRD=loadtests.stampede.dev
CLASS=stampede-e2e-static
tmp=$(mktemp -d)
PV=$NS-reports

host_stampede_bin
unset STAMPEDE_CONTROLLER STAMPEDE_TOKEN
st() { timeout 180 "$STAMPEDE_BIN" "$@" --namespace "$NS"; }

case_diagnostics() {
  kn get loadtests -o yaml || true
  kn get pvc -o wide || true
  k get pv "$PV" -o wide || true
  kn logs -l app.kubernetes.io/component=controller --tail=80 || true
}
# The PersistentVolume is cluster-wide: it goes with the case, whatever happens.
case_cleanup() { timeout 60 "$KUBECTL" delete pv "$PV" --ignore-not-found --wait=false >/dev/null 2>&1 || true; }
release_trap

# 1. A volume that outlives the pod. On the harness's own single node: hostPath, writable by the controller's user
# only. On another cluster: its provisioner, of class STAMPEDE_E2E_STORAGE_CLASS (empty: the cluster's default).
if [ "${STAMPEDE_E2E_LOCAL:-0}" = 1 ]; then
  data=$tmp/controller-data
  mkdir -p "$data"
  chown 65532:65532 "$data"
  chmod 0700 "$data"
  k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata: {name: $PV}
spec:
  storageClassName: $CLASS
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $data, type: Directory}
EOF
else
  CLASS=${STAMPEDE_E2E_STORAGE_CLASS:-}
fi
say "helm install $REL (2 agents, the http target, the report store on a claim of storage class '$CLASS')"
helm_install_stampede --set agents.replicas=2 --set targets.http.enabled=true \
  --set controller.reports.persistence.enabled=true --set controller.reports.persistence.storageClass=$CLASS
for d in controller agent target-http; do
  kn rollout status "deployment/$FULL-$d" --timeout=120s >/dev/null || fail "deployment $FULL-$d did not roll out"
done
[ "$(kn get pvc "$FULL-controller-reports" -o jsonpath='{.status.phase}')" = Bound ] ||
  fail "the report claim is not bound: $(kn get pvc "$FULL-controller-reports" -o jsonpath='{.status}')"
for ((i = 0; i < 60; i++)); do
  [ "$(st agents --output json 2>/dev/null | jq '[.[] | select(.state == "idle")] | length')" -ge 2 ] && break
  sleep 1
done

# The target's count of requests it served on /data, read through the API server's service proxy.
served() {
  k get --raw "/api/v1/namespaces/$NS/services/http:$FULL-target-http:8080/proxy/metrics" |
    awk '$1 ~ /^stampede_target_http_requests_total\{/ && $1 ~ /route="data"/ {n += $2} END {print n + 0}'
}
served_before=$(served)

# 2. The LoadTest, and the controller pod deleted 6 s into it.
kn apply -f - >&2 <<EOF
apiVersion: stampede.dev/v1alpha1
kind: LoadTest
metadata: {name: survive}
spec:
  name: survive
  target: http://$FULL-target-http.$NS.svc.cluster.local:8080
  agents: 2
  arrival: uniform
  on_agent_loss: fail
  phases:
    - {name: steady, duration: 24s, arrival_rate: 40}
  session:
    - {name: data, http: {method: GET, path: /data}}
EOF
kn wait loadtest/survive --for=jsonpath='{.status.phase}'=Running --timeout=90s >/dev/null ||
  fail "LoadTest survive did not reach Running"
run_id=$(kn get loadtest survive -o jsonpath='{.status.runId}')
old_pod=$(kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=controller -o jsonpath='{.items[0].metadata.name}')
sleep 6
say "deleting the controller pod $old_pod 6 s into run $run_id"
t_del=$(date +%s.%N)
kn delete pod "$old_pod" --wait=false >/dev/null
# Until the run is over: the phase must never be anything but Running, and the new pod must come up.
new_pod="" t_ready="" phase=""
for ((i = 0; i < 240; i++)); do
  phase=$(kn get loadtest survive -o jsonpath='{.status.phase}')
  case $phase in Running) ;; *) break ;; esac
  if [ -z "$t_ready" ]; then
    p=$(kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=controller \
      -o jsonpath='{range .items[?(@.status.containerStatuses[0].ready==true)]}{.metadata.name}{"\n"}{end}' | grep -vx "$old_pod" | head -1 || true)
    if [ -n "$p" ]; then new_pod=$p t_ready=$(date +%s.%N); fi
  fi
  sleep 0.5
done
[ -n "$new_pod" ] || fail "no new controller pod became ready (LoadTest phase $phase)"
[ "$phase" = Succeeded ] || fail "LoadTest survive ended $phase: $(kn get loadtest survive -o jsonpath='{.status.message}')"
kn logs "$new_pod" --timestamps >"$tmp/new.log" 2>&1 || true
grep -q "re-adopted" "$tmp/new.log" || fail "the new controller pod $new_pod did not re-adopt run $run_id"
[ "$(kn get loadtest survive -o jsonpath='{.status.runId}')" = "$run_id" ] || fail "the LoadTest was rerun"

# 3. The books against what the target served.
served_after=$(served)
# Its exit code is the run's verdict; the outcome is checked below.
st report "$run_id" --output json >"$tmp/report.json" || true
jq -e .totals "$tmp/report.json" >/dev/null || fail "stampede report $run_id gave no report"
jq '{outcome, message, totals: (.totals | {started, completed, failed, interrupted})}' "$tmp/report.json" >&2
read -r outcome started completed failed interrupted < <(jq -r '[.outcome, .totals.started, .totals.completed,
  .totals.failed, .totals.interrupted] | map(tostring) | join(" ")' "$tmp/report.json")
served_n=$((served_after - served_before))
[ "$outcome" = succeeded ] || fail "run $run_id is $outcome"
[ "$started" = $((completed + failed + interrupted)) ] ||
  fail "the books do not balance: started $started, completed $completed + failed $failed + interrupted $interrupted"
[ $((completed + failed + interrupted)) -ge $((served_n - 3)) ] && [ "$completed" -le $((served_n + 3)) ] ||
  fail "the target served $served_n requests on /data, the report counts $completed completed, $failed failed, $interrupted interrupted"
# What the first controller saw of the target's pods is in the report too: their rows start before the delete
# (6 s into the run), which only the checkpoint can carry across the restart.
first_pod_s=$(jq '[.target_resources.pods[]?.intervals[]?.start_s] | min // empty' "$tmp/report.json")
[ -n "$first_pod_s" ] && awk -v f="$first_pod_s" 'BEGIN { exit !(f < 5) }' ||
  fail "the target's pod samples from before the restart are lost (first interval at ${first_pod_s:-none} s): $(jq -c '.target_resources | {pods_unavailable, pods: [.pods[]? | {pod, n: (.intervals | length)}]}' "$tmp/report.json")"
# Back: the new pod's first line about the run, and the last agent that resumed it (RFC 3339 timestamps).
secs() { date -d "$1" +%s.%N; }
adopted_at=$(grep -m1 "re-adopted" "$tmp/new.log" | cut -d' ' -f1)
resumed_at=$(grep "resumed the run" "$tmp/new.log" | tail -1 | cut -d' ' -f1)
away=$(echo "$(secs "$adopted_at") - $t_del" | bc)
back=""
[ -n "$resumed_at" ] && back=$(echo "$(secs "$resumed_at") - $t_del" | bc)
say "restart: served $served_n on /data, counted completed $completed failed $failed interrupted $interrupted (started $started);" \
  "re-adopted ${away} s after the delete (pod ready $(echo "$t_ready - $t_del" | bc) s), agents back ${back:-?} s after it; outcome $outcome;" \
  "target pod samples from ${first_pod_s} s"
say "controller-restart case passed"
