#!/usr/bin/env bash
# Agents cut from the controller mid-LoadTest, for less and then for more than the lease (6 s here):
#  1. Cut for 2 s: the agents' load goes on, what they collected reaches the controller once the link is back, and
#     the LoadTest ends Succeeded with books that balance and count every request the target served (within 3).
#  2. Cut until the run's decision: each agent stops its load by itself once its lease lapses (the target's request
#     counter stands still from then on), the controller counts an agent lost when it has been silent past its
#     grace and the run waits (finishing) for the last data; the cut is then lifted, the agents replay what they
#     sent after the cut, and the LoadTest ends Failed (on_agent_loss: fail), naming the lost agents, with books that
#     balance and count every request the target served. The first loss decides the run: an agent whose stream was
#     found closed later than that (each connection's keepalive fires on its own clock) is back, with its data,
#     before the books close, so it may go unnamed.
# The cut: on a cluster whose network plugin enforces NetworkPolicy, users would cut agents from the controller with
# the policy below (with the chart's own policies off, since policies only ever add allowed traffic):
#
#   apiVersion: networking.k8s.io/v1
#   kind: NetworkPolicy
#   metadata: {name: agents-cut-from-controller}
#   spec:
#     podSelector: {matchLabels: {app.kubernetes.io/instance: RELEASE, app.kubernetes.io/component: agent}}
#     policyTypes: [Egress]
#     egress:            # DNS and the targets only: nothing to the controller
#       - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kube-system}}}]
#         ports: [{protocol: UDP, port: 53}, {protocol: TCP, port: 53}]
#       - to: [{podSelector: {matchLabels: {app.kubernetes.io/component: target-http}}}]
#
# The harness's bridge plugin enforces no policy, so this case drops the same packets itself: iptables rules at the
# top of the node's FORWARD chain between each agent pod's IP and the controller pod's IP, both ways (pods on the
# bridge go through iptables: bridge-nf-call-iptables is on). They are removed when the cut ends and, whatever
# happens, on exit. It needs the harness's own cluster (root on its node); elsewhere it is skipped, loudly.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
if [ "${STAMPEDE_E2E_LOCAL:-0}" != 1 ]; then
  say "SKIPPED: the cut is made with iptables on the harness's own node; this cluster is not it"
  exit 0
fi
CHART=$REPO_ROOT/helm/stampede
REL=nc
FULL=$REL-stampede
CRD=loadtests.stampede.dev
LEASE=6
tmp=$(mktemp -d)
TAG="stampede e2e cut $NS"
CUT_RULES=()

host_stampede_bin
unset STAMPEDE_CONTROLLER STAMPEDE_TOKEN
st() { timeout 180 "$STAMPEDE_BIN" "$@" --namespace "$NS"; }

case_diagnostics() {
  kn get loadtests -o yaml || true
  kn logs -l app.kubernetes.io/component=controller --tail=80 || true
  iptables -S FORWARD | grep -F "$TAG" || true
}

# cut AGENT_IP... : drops everything between those agents and the controller pod, both ways.
cut() {
  local a
  for a in "$@"; do
    CUT_RULES+=("-s $a -d $ctl_ip" "-s $ctl_ip -d $a")
  done
  local r
  for r in "${CUT_RULES[@]}"; do
    # shellcheck disable=SC2086
    iptables -I FORWARD 1 $r -m comment --comment "$TAG" -j DROP
  done
}
heal() {
  local r
  for r in "${CUT_RULES[@]}"; do
    # shellcheck disable=SC2086
    while iptables -D FORWARD $r -m comment --comment "$TAG" -j DROP 2>/dev/null; do :; done
  done
  CUT_RULES=()
}
case_cleanup() { heal; }
release_trap

say "helm install $REL (2 agents, the http target, a ${LEASE} s lease)"
helm_install_stampede --set agents.replicas=2 --set targets.http.enabled=true --set controller.lease=${LEASE}s
for d in controller agent target-http; do
  kn rollout status "deployment/$FULL-$d" --timeout=120s >/dev/null || fail "deployment $FULL-$d did not roll out"
done
idle_agents() {
  for ((i = 0; i < 90; i++)); do
    [ "$(st agents --output json 2>/dev/null | jq '[.[] | select(.state == "idle")] | length')" -ge 2 ] && return 0
    sleep 1
  done
  fail "fewer than 2 idle agents after 90 s"
}
idle_agents
ctl_ip=$(kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=controller -o jsonpath='{.items[0].status.podIP}')
mapfile -t agent_ips < <(kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=agent -o jsonpath='{range .items[*]}{.status.podIP}{"\n"}{end}')
[ -n "$ctl_ip" ] && [ "${#agent_ips[@]}" = 2 ] || fail "pod IPs: controller '$ctl_ip', agents '${agent_ips[*]}'"

served() {
  k get --raw "/api/v1/namespaces/$NS/services/http:$FULL-target-http:8080/proxy/metrics" |
    awk '$1 ~ /^stampede_target_http_requests_total\{/ && $1 ~ /route="data"/ {n += $2} END {print n + 0}'
}
loadtest() { # name duration
  kn apply -f - >&2 <<EOF
apiVersion: stampede.dev/v1alpha1
kind: LoadTest
metadata: {name: $1}
spec:
  name: $1
  target: http://$FULL-target-http.$NS.svc.cluster.local:8080
  agents: 2
  arrival: uniform
  on_agent_loss: fail
  phases:
    - {name: steady, duration: $2, arrival_rate: 40}
  session:
    - {name: data, http: {method: GET, path: /data}}
EOF
  kn wait "loadtest/$1" --for=jsonpath='{.status.phase}'=Running --timeout=90s >/dev/null ||
    fail "LoadTest $1 did not reach Running"
}
# until_over NAME SECONDS: waits until the LoadTest leaves Running; prints its phase.
until_over() {
  local phase=""
  for ((i = 0; i < $2 * 2; i++)); do
    phase=$(kn get loadtest "$1" -o jsonpath='{.status.phase}')
    [ "$phase" != Running ] && break
    sleep 0.5
  done
  echo "$phase"
}
books() { # RUN_ID: prints "completed failed interrupted started" of its report
  # The exit code is the run's verdict (failed: not 0); the report itself must be there.
  st report "$1" --output json >"$tmp/$1.json" || true
  jq -e .totals "$tmp/$1.json" >/dev/null || fail "stampede report $1 gave no report"
  jq -r '.totals | [.completed, .failed, .interrupted, .started] | map(tostring) | join(" ")' "$tmp/$1.json"
}

# 1. Shorter than the lease.
before=$(served)
loadtest brief 20s
sleep 5
say "cutting both agents from the controller for 2 s (lease ${LEASE} s)"
cut "${agent_ips[@]}"
sleep 2
heal
phase=$(until_over brief 90)
[ "$phase" = Succeeded ] || fail "LoadTest brief ended '$phase': $(kn get loadtest brief -o jsonpath='{.status.message}')"
run=$(kn get loadtest brief -o jsonpath='{.status.runId}')
served_n=$(($(served) - before))
books "$run" >"$tmp/books.txt"
read -r completed failed interrupted started <"$tmp/books.txt"
[ "$started" = $((completed + failed + interrupted)) ] ||
  fail "brief: started $started != completed $completed + failed $failed + interrupted $interrupted"
[ $((completed + failed + interrupted)) -ge $((served_n - 3)) ] && [ "$completed" -le $((served_n + 3)) ] ||
  fail "brief: the target served $served_n, the report counts $completed completed, $failed failed, $interrupted interrupted"
say "short cut: Succeeded; served $served_n on /data, counted completed $completed failed $failed interrupted $interrupted (started $started)"

# 2. Longer than the lease: held until the run has decided, then lifted for the lost agents' books.
idle_agents
before=$(served)
loadtest held 40s
sleep 5
say "cutting both agents from the controller until the run decides (lease ${LEASE} s)"
run=$(kn get loadtest held -o jsonpath='{.status.runId}')
t_cut=$(date +%s)
cut "${agent_ips[@]}"
# The lease, the agents' graceful stop (requests here take well under a second) and a margin: the load has stopped.
sleep $((LEASE + 3))
stopped_at=$(served)
# The decision: both agents lost, the run finishing while it waits for their last data.
decided=""
for ((i = 0; i < 120; i++)); do
  decided=$(st status --output json 2>/dev/null |
    jq -r --arg r "$run" '.[] | select(.run_id == $r and .state == "finishing" and (.message | test("lost"))) | .message')
  [ -n "$decided" ] && break
  sleep 0.5
done
[ -n "$decided" ] || fail "the run did not decide while cut off (and wait for the lost agents' data)"
t_decided=$(date +%s)
still=$(served)
heal
phase=$(until_over held 90)
t_over=$(date +%s)
[ "$phase" = Failed ] || fail "LoadTest held ended '$phase': $(kn get loadtest held -o jsonpath='{.status.message}')"
[ "$still" = "$stopped_at" ] ||
  fail "the agents went on loading while cut off: the target served $((still - stopped_at)) more from $((LEASE + 3)) s into the cut to its end"
kn get loadtest held -o json >"$tmp/held.json"
jq '.status | {phase, message, lostAgents}' "$tmp/held.json" >&2
mapfile -t agent_pods < <(kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=agent -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}')
mapfile -t lost < <(jq -r '.status.lostAgents // [] | .[].agent' "$tmp/held.json")
[ "${#lost[@]}" -ge 1 ] || fail "the LoadTest's lostAgents name no agent"
for l in "${lost[@]}"; do
  printf '%s\n' "${agent_pods[@]}" | grep -qxF "$l" || fail "the LoadTest's lostAgents name $l, not one of ${agent_pods[*]}"
done
jq -e '.status.message | test("lost")' "$tmp/held.json" >/dev/null || fail "the LoadTest's message names no loss"
served_n=$(($(served) - before))
books "$run" >"$tmp/books.txt"
read -r completed failed interrupted started <"$tmp/books.txt"
[ "$started" = $((completed + failed + interrupted)) ] ||
  fail "held: started $started != completed $completed + failed $failed + interrupted $interrupted"
[ "$served_n" -le $((completed + failed + interrupted)) ] ||
  fail "held: the target served $served_n, the report counts $completed completed, $failed failed, $interrupted interrupted"
say "long cut: decided $((t_decided - t_cut)) s into the cut, naming $(jq -r '.status.lostAgents | map(.agent) | join(", ")' "$tmp/held.json");" \
  "Failed $((t_over - t_decided)) s after the cut was lifted; load stopped by the agents (the target served nothing from" \
  "$((LEASE + 3)) s into the cut); served $served_n on /data, counted completed $completed failed $failed" \
  "interrupted $interrupted (started $started)"
say "netcut case passed"
