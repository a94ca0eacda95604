#!/usr/bin/env bash
# The Helm chart, end to end: install, a distributed run from the host, uninstall.
#  0. helm/stampede/ci/validate.sh: lint --strict, offline schema validation (Kubernetes 1.33), pod checks.
#  1. `helm install` into a namespace that enforces Pod Security "restricted", with 3 agents (their port range widened
#     by the pod sysctl) and the http and login targets; every Deployment rolls out. The controller's RBAC allows
#     what it needs and nothing more (`kubectl auth can-i --as` its ServiceAccount); the repository's example
#     scenarios are valid LoadTest specs (server-side dry run against the installed CRD).
#  2. The host reaches the controller at its ClusterIP (kube-proxy) over TLS (on by default: the chart generates a CA
#     and a certificate for the controller Service; the host trusts the Secret's ca.crt and checks the Service name),
#     with the token read from the chart's Secret; plaintext is refused;
#     `stampede agents --output json` lists 3 agents whose ids are the agent pod names and whose IPs are 3 distinct
#     pod IPs in the pod network.
#  3. `stampede run` of an arrival-phase scenario whose target is the http target's Service DNS name (the agents
#     resolve it in the cluster): the merged totals.completed equals the sum of agents[].completed, and every agent
#     did work. The http target's `stampede_target_http_distinct_source_ips` gauge grew by at least 3.
#  4. `helm upgrade` keeps the generated token and the generated CA and certificate (lookup of the live Secrets).
#  5. `helm uninstall` leaves no object of the release in the namespace; the LoadTest CRD stays, as documented.
# env: STAMPEDE_BIN  the stampede binary to run on the host (default: the one images.sh packed, from target/)
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CHART=$REPO_ROOT/helm/stampede
REL=st
FULL=$REL-stampede # the chart's fullname for this release
CRD=loadtests.stampede.dev
tmp=$(mktemp -d)
pf_pid=""

host_stampede_bin

# On failure, besides the namespace's state: the release's status. Always: our port-forward (if any) stopped.
case_diagnostics() { timeout 30 "$HELM" status "$REL" -n "$NS" || true; }
case_cleanup() { if [ -n "$pf_pid" ]; then kill "$pf_pid" 2>/dev/null || true; fi; }
release_trap

say "offline chart checks"
HELM=$HELM "$CHART/ci/validate.sh" || fail "helm/stampede/ci/validate.sh"

k label namespace "$NS" pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/enforce-version=v1.33 \
  pod-security.kubernetes.io/warn=restricted >/dev/null
say "namespace $NS enforces Pod Security restricted"

PORT_RANGE="2000 64000"
say "helm install $REL ($STAMPEDE_IMAGE, 3 agents, http and login targets)"
helm_install_stampede --set agents.replicas=3 --set targets.http.enabled=true --set targets.login.enabled=true \
  --set agents.portRange.enabled=true --set-string agents.portRange.value="$PORT_RANGE"
grep -i 'warning' "$tmp/install.txt" >&2 && fail "helm install printed warnings (Pod Security?)"
sed -n '/^NOTES:/,$p' "$tmp/install.txt" >&2
for d in controller agent target-http target-login; do
  kn rollout status "deployment/$FULL-$d" --timeout=120s >/dev/null || fail "deployment $FULL-$d did not roll out"
done
kn get pods -o wide >&2

# Least privilege: what the controller's ServiceAccount may and may not do.
SA=system:serviceaccount:$NS:$FULL-controller
can() { [ "$(kn auth can-i "$@" --as="$SA" 2>/dev/null)" = yes ]; }
for ok in "watch pods" "patch deployments.apps/$FULL-agent --subresource=scale" "patch loadtests.stampede.dev" \
  "patch loadtests.stampede.dev --subresource=status" "create events" "create events.events.k8s.io" \
  "get configmaps" "get secrets"; do
  # shellcheck disable=SC2086  # split into verb, resource, flags
  can $ok || fail "the controller may not: $ok"
done
for no in "list secrets" "watch secrets" "list configmaps" "get secrets -n default" "delete pods" "patch deployments.apps/$FULL-agent" \
  "patch deployments.apps/$FULL-controller --subresource=scale" "create loadtests.stampede.dev" "list pods -A"; do
  # shellcheck disable=SC2086
  ! can $no || fail "the controller may, but should not: $no"
done
say "controller RBAC: least privilege as documented"

for ex in "$REPO_ROOT"/examples/*.yaml; do
  { printf 'apiVersion: stampede.dev/v1alpha1\nkind: LoadTest\nmetadata: {name: %s}\nspec:\n' "$(basename "$ex" .yaml)"
    sed -e '/^[[:space:]]*#/d' -e 's/^/  /' "$ex"; } >"$tmp/lt.yaml"
  kn apply --dry-run=server -f "$tmp/lt.yaml" >/dev/null || fail "examples/$(basename "$ex") is not a valid LoadTest spec"
done
say "every examples/*.yaml is a valid LoadTest spec (server-side dry run)"

# The pod sysctl widened the agents' port range (checked in their network namespaces on the local cluster).
if [ "${STAMPEDE_E2E_LOCAL:-0}" = 1 ]; then
  checked=0
  for pid in $(ps -eo pid=,args= | awk '$2 ~ /\/stampede$/ && $3 == "agent" {print $1}'); do
    penv=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    grep -q "^POD_NAME=$FULL-agent-" <<<"$penv" || continue
    grep -q "^STAMPEDE_CONTROLLER=https://$FULL-controller.$NS.svc:" <<<"$penv" || continue
    range=$(nsenter -t "$pid" -n cat /proc/sys/net/ipv4/ip_local_port_range | tr -s ' \t' ' ')
    [ "$range" = "$PORT_RANGE" ] || fail "agent pid $pid has ip_local_port_range '$range', not '$PORT_RANGE'"
    checked=$((checked + 1))
  done
  [ "$checked" = 3 ] || fail "found $checked agent processes of this release to check the port range of, not 3"
  say "3 agents run with net.ipv4.ip_local_port_range = $PORT_RANGE (host: $(tr -s ' \t' ' ' </proc/sys/net/ipv4/ip_local_port_range))"
fi

TOKEN=$(kn get secret "$FULL-token" -o jsonpath='{.data.token}' | base64 -d)
[ "${#TOKEN}" -ge 32 ] || fail "the chart's token is ${#TOKEN} characters long"
export STAMPEDE_TOKEN=$TOKEN
# TLS by default: trust the chart's CA, and check the certificate against the Service name (the host dials addresses).
kn get secret "$FULL-tls" -o jsonpath='{.data.ca\.crt}' | base64 -d >"$tmp/ca.crt"
grep -q 'BEGIN CERTIFICATE' "$tmp/ca.crt" || fail "no ca.crt in Secret $FULL-tls"
CA_SUM=$(sha256sum <"$tmp/ca.crt")
CRT_SUM=$(kn get secret "$FULL-tls" -o jsonpath='{.data.tls\.crt}' | sha256sum)
export STAMPEDE_CA_CERT=$tmp/ca.crt STAMPEDE_TLS_SERVER_NAME=$FULL-controller.$NS.svc

# How the host reaches the controller: its ClusterIP through kube-proxy (the local cluster), else its pod IP, else a
# kubectl port-forward (a cluster whose service network the host cannot route to).
cip=$(kn get service "$FULL-controller" -o jsonpath='{.spec.clusterIP}')
ctl_pod_ip=$(kn get pod -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=controller -o jsonpath='{.items[0].status.podIP}')
agents_json() { timeout 20 "$STAMPEDE_BIN" agents --controller "$1" --output json 2>"$tmp/agents.err"; }
CONTROLLER=""
for url in "https://$cip:7070" "https://$ctl_pod_ip:7070"; do
  if agents_json "$url" >/dev/null; then
    CONTROLLER=$url
    break
  fi
  say "controller not reachable at $url: $(tail -1 "$tmp/agents.err")"
done
if [ -z "$CONTROLLER" ]; then
  timeout 300 "$KUBECTL" -n "$NS" port-forward "service/$FULL-controller" 17070:7070 >"$tmp/pf.log" 2>&1 &
  pf_pid=$!
  for _ in $(seq 30); do grep -q Forwarding "$tmp/pf.log" && break; sleep 1; done
  CONTROLLER=https://127.0.0.1:17070
fi
say "controller: $CONTROLLER (Service ClusterIP $cip), TLS checked against $STAMPEDE_TLS_SERVER_NAME"
plain=${CONTROLLER/https:/http:}
agents_json "$plain" >/dev/null && fail "the controller answered plaintext gRPC at $plain"
say "plaintext refused at $plain: $(tail -1 "$tmp/agents.err" | cut -c1-160)"

# The agents attach on their own (they dial the controller's Service).
for ((i = 0; i < 60; i++)); do
  agents_json "$CONTROLLER" >"$tmp/agents.json" || true
  [ "$(jq 'length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 3 ] && break
  sleep 1
done
jq -c '.[] | {id, pod, node, ip, state}' "$tmp/agents.json" >&2 || fail "stampede agents: $(cat "$tmp/agents.err")"
n_agents=$(jq 'length' "$tmp/agents.json")
[ "$n_agents" = 3 ] || fail "$n_agents agents attached, not 3"
n_ips=$(jq '[.[].ip] | map(select(. != "")) | unique | length' "$tmp/agents.json")
[ "$n_ips" = 3 ] || fail "the agents report $n_ips distinct pod IPs, not 3"
kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=agent \
  -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}' | sort >"$tmp/agent-pods.txt"
jq -r '.[] | "\(.id) \(.ip)"' "$tmp/agents.json" | sort >"$tmp/agent-ids.txt"
diff "$tmp/agent-pods.txt" "$tmp/agent-ids.txt" >&2 || fail "agent ids and IPs are not the agent pods' names and IPs"
if [ -n "${STAMPEDE_E2E_POD_CIDR:-}" ]; then
  for ip in $(jq -r '.[].ip' "$tmp/agents.json"); do
    ip_in_cidr "$ip" "$STAMPEDE_E2E_POD_CIDR" || fail "agent IP $ip is not in $STAMPEDE_E2E_POD_CIDR"
  done
  say "3 agents, 3 distinct pod IPs in $STAMPEDE_E2E_POD_CIDR: $(jq -r '[.[].ip] | sort | join(" ")' "$tmp/agents.json")"
fi

# The http target's distinct-source-IP gauge, read through the API server's service proxy (works on any cluster).
METRIC=stampede_target_http_distinct_source_ips
source_ips() {
  k get --raw "/api/v1/namespaces/$NS/services/http:$FULL-target-http:8080/proxy/metrics" |
    awk -v m="$METRIC" '$1 == m {print int($2)}'
}
ips_before=$(source_ips)
[ -n "$ips_before" ] || fail "no $METRIC in the http target's /metrics"

target_url=http://$FULL-target-http:8080
cat >"$tmp/scenario.yaml" <<EOF
name: chart-e2e
target: $target_url
agents: 3
arrival: uniform
seed: 20
phases:
  - name: steady
    duration: 6s
    arrival_rate: 50
session:
  - name: data
    http: { method: GET, path: /data }
EOF
say "stampede run: 6 s at 50 arrivals/s over 3 agents against $target_url"
timeout 180 "$STAMPEDE_BIN" run "$tmp/scenario.yaml" --controller "$CONTROLLER" --output json --quiet \
  --report "$tmp/report.json" >"$tmp/run.json" 2>"$tmp/run.err" || {
  cat "$tmp/run.err" >&2
  fail "stampede run failed"
}
cmp -s <(jq -S . "$tmp/run.json") <(jq -S . "$tmp/report.json") || fail "--report file differs from the printed report"
jq '{run_id, outcome, duration_s, totals: (.totals | {planned, started, completed, failed, error_count, throughput_rps, achieved_ratio}),
     response_time_us: (.latency.response_time | {p50_us, p99_us, p999_us, max_us}),
     agents: [.agents[] | {id, planned, completed, failed, lost}]}' "$tmp/run.json" >&2
outcome=$(jq -r '.outcome' "$tmp/run.json")
total=$(jq '.totals.completed' "$tmp/run.json")
sum=$(jq '[.agents[].completed] | add' "$tmp/run.json")
n=$(jq '.agents | length' "$tmp/run.json")
idle=$(jq '[.agents[] | select(.completed == 0)] | length' "$tmp/run.json")
[ "$outcome" = succeeded ] || fail "run outcome is $outcome"
[ "$n" = 3 ] || fail "the report names $n agents, not 3"
[ "$total" -gt 0 ] || fail "nothing completed"
[ "$total" = "$sum" ] || fail "merged totals.completed $total != sum of agents[].completed $sum"
[ "$idle" = 0 ] || fail "$idle agents completed nothing"
jq -r '.agents[].id' "$tmp/run.json" | sort | diff - <(cut -d' ' -f1 "$tmp/agent-pods.txt") >&2 ||
  fail "the report's agents are not the agent pods"
say "merged totals.completed = $total = sum of the 3 agents' completed ($(jq -r '[.agents[].completed] | join(" + ")' "$tmp/run.json"))"

ips_after=$(source_ips)
say "$METRIC: $ips_before before the run, $ips_after after"
[ "$ips_after" -ge 3 ] || fail "$METRIC is $ips_after, not >= 3"
[ $((ips_after - ips_before)) -ge 3 ] || fail "$METRIC grew by $((ips_after - ips_before)), not >= 3"

say "helm upgrade keeps the generated token"
timeout 200 "$HELM" upgrade "$REL" "$CHART" -n "$NS" --reuse-values --wait --timeout 150s >/dev/null ||
  fail "helm upgrade"
[ "$(kn get secret "$FULL-token" -o jsonpath='{.data.token}' | base64 -d)" = "$TOKEN" ] || fail "helm upgrade changed the token"
[ "$(kn get secret "$FULL-tls" -o jsonpath='{.data.ca\.crt}' | base64 -d | sha256sum)" = "$CA_SUM" ] || fail "helm upgrade changed the CA"
[ "$(kn get secret "$FULL-tls" -o jsonpath='{.data.tls\.crt}' | sha256sum)" = "$CRT_SUM" ] || fail "helm upgrade changed the certificate"
say "helm upgrade kept the token, the CA and the certificate"

say "helm uninstall"
helm_uninstall_clean "$REL" "$CRD" "$FULL-token"
say "nothing of the release is left in $NS; the CRD $CRD is kept, as documented"
say "chart case passed"
