#!/usr/bin/env bash
# Past one IP's ports, in the cluster: 3 agent pods, each from its own pod IP, hold more concurrent connections to one
# target Service than one source IP's ephemeral port range allows (28,232 with the default 32768-60999), and the
# merged report shows it.
#
#  1. `helm install` with 3 agents and the http target at 6 replicas (each target process stays far below the
#     20,000 open files one process may hold here, and the connect burst at the start is spread over 6 listen
#     queues: a pod's somaxconn is 4,096, and with 3 replicas about 0.5% of the connections were reset at connect).
#  2. `stampede run` from the host (no --controller: the kube port-forward, TLS, token from the Secret) of a closed
#     load of CONNS keep-alive connections (default 30,000: 10,000 per agent) for DURATION, each sending `GET /` then
#     thinking 8-12 s, so the CPU stays low and the connections stay open.
#  3. The report: succeeded, `connections.peak_open` >= CONNS_MIN (default 28,233: more than one IP's range), every
#     agent held its share, and no request failed. On the local cluster, `ss` in the target pods' network namespaces
#     counts the established connections during the run (the largest sum is printed, and must reach CONNS_MIN too).
#
# Not in CI (scale benchmarks are documented commands): run it with
#   tests/cluster/e2e.sh tests/cluster/scale/many-connections.sh
# env: CONNS (30000), CONNS_MIN (28233), DURATION (20s), STAMPEDE_BIN as in the chart case.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/../cases/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CONNS=${CONNS:-30000}
CONNS_MIN=${CONNS_MIN:-28233}
DURATION=${DURATION:-20s}
CHART=$REPO_ROOT/helm/stampede
REL=sc
FULL=$REL-stampede
tmp=$(mktemp -d)

host_stampede_bin
st() { timeout 300 "$STAMPEDE_BIN" "$@" --namespace "$NS"; }

scale_exit() {
  local rc=$?
  trap - EXIT
  [ "$rc" = 0 ] || diagnostics
  timeout 150 "$HELM" uninstall "$REL" -n "$NS" --wait --timeout 120s >/dev/null 2>&1 || true
  timeout 60 "$KUBECTL" delete secret "$FULL-token" -n "$NS" --ignore-not-found >/dev/null 2>&1 || true
  timeout 120 "$KUBECTL" delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
  rm -rf "$tmp"
  exit "$rc"
}
trap scale_exit EXIT

say "helm install $REL (3 agents, the http target at 6 replicas)"
helm_install_stampede --set agents.replicas=3 --set agents.capacity=20000 \
  --set targets.http.enabled=true --set targets.http.replicas=6 --set targets.http.resources.limits.memory=1Gi
for d in controller agent target-http; do
  kn rollout status "deployment/$FULL-$d" --timeout=120s >/dev/null || fail "deployment $FULL-$d did not roll out"
done
for ((i = 0; i < 60; i++)); do
  st agents --output json >"$tmp/agents.json" 2>"$tmp/agents.err" || true
  [ "$(jq 'length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 3 ] && break
  sleep 1
done
[ "$(jq '[.[].ip] | unique | length' "$tmp/agents.json")" = 3 ] ||
  fail "3 agents with 3 distinct pod IPs are not attached: $(cat "$tmp/agents.json" "$tmp/agents.err")"
say "agents from $(jq -r '[.[].ip] | join(", ")' "$tmp/agents.json")"

target=http://$FULL-target-http.$NS.svc.cluster.local:8080
cat >"$tmp/scale.yaml" <<EOF
name: cluster-many-connections
target: $target
agents: 3
request_timeout: 30s
load: { model: closed, connections: $CONNS, duration: $DURATION }
session:
  - name: hello
    http: { method: GET, path: / }
  - think_time: { min: 8s, max: 12s }
EOF
say "stampede run: $CONNS connections over 3 agents to $target for $DURATION"
st run "$tmp/scale.yaml" --report "$tmp/report.json" --quiet >"$tmp/run.txt" 2>"$tmp/run.err" &
run_pid=$!

# The target side: established connections on :8080 in each target pod's network namespace (local cluster only).
# A target process is this release's when its network namespace holds one of the target pods' IPs.
target_ips=" $(kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=target-http \
  -o jsonpath='{.items[*].status.podIP}') "
ss_max=0
while kill -0 "$run_pid" 2>/dev/null; do
  if [ "${STAMPEDE_E2E_LOCAL:-0}" = 1 ]; then
    n=0
    for pid in $(ps -eo pid=,args= | awk '$2 ~ /\/stampede$/ && $3 == "target" && $4 == "http" {print $1}'); do
      ip=$(nsenter -t "$pid" -n ip -4 -o addr show scope global 2>/dev/null | awk '{split($4, a, "/"); print a[1]; exit}')
      [[ -n "$ip" && "$target_ips" == *" $ip "* ]] || continue
      c=$(nsenter -t "$pid" -n ss -Htn state established '( sport = :8080 )' 2>/dev/null | wc -l)
      n=$((n + c))
    done
    [ "$n" -gt "$ss_max" ] && ss_max=$n
  fi
  sleep 2
done
wait "$run_pid" || { cat "$tmp/run.txt" "$tmp/run.err" >&2; fail "stampede run failed"; }
cat "$tmp/run.txt" >&2
jq -r '"report: outcome \(.outcome), opened \(.connections.opened), peak_open \(.connections.peak_open), per agent \([.agents[].peak_open]), completed \(.totals.completed), errors \(.totals.errors)"' \
  "$tmp/report.json" >&2
[ "$(jq -r .outcome "$tmp/report.json")" = succeeded ] || fail "the run did not succeed"
peak=$(jq '.connections.peak_open' "$tmp/report.json")
[ "$peak" -ge "$CONNS_MIN" ] || fail "peak open connections $peak < $CONNS_MIN"
[ "$(jq '[.agents[] | select(.peak_open > 0)] | length' "$tmp/report.json")" = 3 ] || fail "not every agent held connections"
[ "$(jq '.totals.failed' "$tmp/report.json")" = 0 ] || fail "requests failed: $(jq -c .totals.errors "$tmp/report.json")"
if [ "${STAMPEDE_E2E_LOCAL:-0}" = 1 ]; then
  say "ss in the target pods saw at most $ss_max established connections on :8080"
  [ "$ss_max" -ge "$CONNS_MIN" ] || fail "the target side saw $ss_max established connections < $CONNS_MIN"
fi
say "held $peak concurrent connections to $FULL-target-http:8080 from 3 pod IPs (one IP's range: 28232)"
