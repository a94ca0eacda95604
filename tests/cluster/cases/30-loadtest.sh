#!/usr/bin/env bash
# The Kubernetes side of the controller and the CLI in a cluster, end to end:
#  1. `helm install` with 3 agents and the http and login targets.
#  2. `stampede agents` and `stampede run` with NO --controller: the CLI finds the controller pod in the kube context
#     (--namespace), port-forwards to it through the API server and reads the token from the chart's Secret.
#     `agents` shows pod, node, IP and pod readiness. The run (arrival phases, against the http target's Service DNS
#     name): merged completed == sum of per-agent completed, 3 distinct agent pod IPs, and the target's
#     distinct-source-IP gauge grew by 3.
#  3. The same scenario as a LoadTest (`kubectl apply`): Pending → Running → Succeeded with the summary, runId and
#     report location in its status, events on it, and no finalizer left. A controller restart does not rerun it.
#  4. A LoadTest with `on_agent_loss: {tolerate: 50}` and an agent pod deleted mid-run: it ends Incomplete (never
#     Succeeded: less than planned was delivered), the status names the lost
#     agent (lostAgents and message) and an AgentLost event is published. Its books balance and count every request
#     the http target served on /data (its stampede_target_http_requests_total), within 3.
#  5. Deleting a running LoadTest aborts its run (the finalizer) and the delete completes promptly.
#  6. A LoadTest asking for 4 agents while the agent Deployment has 3: the controller scales the Deployment (scale
#     subresource) to 4 and the run succeeds over 4 agents.
#  7. `helm uninstall` leaves nothing of the release but the documented CRD (and the LoadTests, which it keeps).
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CHART=$REPO_ROOT/helm/stampede
REL=lt
FULL=$REL-stampede
CRD=loadtests.stampede.dev
tmp=$(mktemp -d)

host_stampede_bin
unset STAMPEDE_CONTROLLER STAMPEDE_TOKEN
st() { timeout 180 "$STAMPEDE_BIN" "$@" --namespace "$NS"; }

# On failure, besides the namespace's state: the LoadTests and the controller's log.
case_diagnostics() {
  kn get loadtests -o yaml || true
  kn logs -l app.kubernetes.io/component=controller --tail=80 || true
}
release_trap

say "helm install $REL (3 agents, http and login targets)"
helm_install_stampede --set agents.replicas=3 --set targets.http.enabled=true --set targets.login.enabled=true
for d in controller agent target-http target-login; do
  kn rollout status "deployment/$FULL-$d" --timeout=120s >/dev/null || fail "deployment $FULL-$d did not roll out"
done

# 2. The CLI without --controller: port-forward to the controller pod, token from the Secret.
for ((i = 0; i < 60; i++)); do
  st agents --output json >"$tmp/agents.json" 2>"$tmp/agents.err" || true
  [ "$(jq '[.[] | select(.state != "not-attached" and .pod_status == "Ready")] | length' "$tmp/agents.json" 2>/dev/null || echo 0)" -ge 3 ] && break
  sleep 1
done
jq -c '.[] | {id, state, pod, node, ip, pod_status}' "$tmp/agents.json" >&2 || fail "stampede agents: $(cat "$tmp/agents.err")"
[ "$(jq 'length' "$tmp/agents.json")" = 3 ] || fail "stampede agents lists $(jq length "$tmp/agents.json") agents, not 3"
[ "$(jq '[.[] | select(.pod_status == "Ready" and .node != "" and .ip != "")] | length' "$tmp/agents.json")" = 3 ] ||
  fail "not every agent shows a Ready pod with node and IP"
st agents >"$tmp/agents.txt" || fail "stampede agents (text)"
cat "$tmp/agents.txt" >&2
head -1 "$tmp/agents.txt" | grep -q 'pod.*node.*ip' || fail "the agents table has no pod/node/ip columns"
say "stampede agents (no --controller): 3 agents with Ready pods, found through a kube port-forward"

METRIC=stampede_target_http_distinct_source_ips
source_ips() {
  k get --raw "/api/v1/namespaces/$NS/services/http:$FULL-target-http:8080/proxy/metrics" |
    awk -v m="$METRIC" '$1 == m {print int($2)}'
}
ips_before=$(source_ips)
[ -n "$ips_before" ] || fail "no $METRIC in the http target's /metrics"

target_url=http://$FULL-target-http.$NS.svc.cluster.local:8080
scenario() { # name duration rate loss-policy
  cat <<EOF
name: $1
target: $target_url
agents: 3
arrival: uniform
seed: 30
on_agent_loss: $4
phases:
  - name: steady
    duration: $2
    arrival_rate: $3
session:
  - name: data
    http: { method: GET, path: /data }
thresholds:
  - error_rate < 1%
EOF
}
scenario k8s-e2e 6s 50 fail >"$tmp/scenario.yaml"
say "stampede run (no --controller): 6 s at 50 arrivals/s over 3 agents against $target_url"
st run "$tmp/scenario.yaml" --report "$tmp/run.json" >"$tmp/run.txt" 2>"$tmp/run.err" || {
  cat "$tmp/run.txt" "$tmp/run.err" >&2
  fail "stampede run failed"
}
cat "$tmp/run.txt" >&2
outcome=$(jq -r '.outcome' "$tmp/run.json")
total=$(jq '.totals.completed' "$tmp/run.json")
sum=$(jq '[.agents[].completed] | add' "$tmp/run.json")
[ "$outcome" = succeeded ] || fail "run outcome is $outcome"
[ "$(jq '.agents | length' "$tmp/run.json")" = 3 ] || fail "the report names $(jq '.agents | length' "$tmp/run.json") agents, not 3"
[ "$total" -gt 0 ] && [ "$total" = "$sum" ] || fail "merged totals.completed $total != sum of agents[].completed $sum"
# The report names agents by pod; their IPs are the pods' IPs.
ips=$(for a in $(jq -r '.agents[].id' "$tmp/run.json"); do kn get pod "$a" -o jsonpath='{.status.podIP}{"\n"}'; done | sort -u)
[ "$(echo "$ips" | grep -c .)" = 3 ] || fail "the report's agents have $(echo "$ips" | grep -c .) distinct pod IPs, not 3"
ips_after=$(source_ips)
[ $((ips_after - ips_before)) -ge 3 ] || fail "$METRIC grew by $((ips_after - ips_before)), not >= 3"
run_id=$(jq -r .run_id "$tmp/run.json")
st report "$run_id" --output json | jq -e --arg t "$total" '.totals.completed == ($t | tonumber)' >/dev/null ||
  fail "stampede report $run_id (no --controller) does not give the same report"
say "completed $total = $(jq -r '[.agents[].completed] | join(" + ")' "$tmp/run.json"); agent pod IPs $(echo $ips); $METRIC +$((ips_after - ips_before)); stampede report re-fetched it"

# 3. The same scenario as a LoadTest.
to_lt() { # name file
  printf 'apiVersion: stampede.dev/v1alpha1\nkind: LoadTest\nmetadata: {name: %s}\nspec:\n' "$1"
  sed -e 's/^/  /' "$2"
}
to_lt steady "$tmp/scenario.yaml" >"$tmp/lt.yaml"
kn apply -f "$tmp/lt.yaml" >&2 || fail "kubectl apply LoadTest"
kn wait loadtest/steady --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null ||
  fail "LoadTest steady did not reach Running"
[ "$(kn get loadtest steady -o jsonpath='{.metadata.finalizers[0]}')" = stampede.dev/abort-run ] ||
  fail "a running LoadTest has no stampede.dev/abort-run finalizer"
kn wait loadtest/steady --for=jsonpath='{.status.phase}'=Succeeded --timeout=90s >/dev/null ||
  fail "LoadTest steady did not succeed: $(kn get loadtest steady -o jsonpath='{.status.message}')"
kn get loadtest steady -o json >"$tmp/lt.json"
jq '.status' "$tmp/lt.json" >&2
jq -e '.status.summary.completed > 0 and .status.summary.completed == (.status.summary.completed|floor)
       and .status.summary.throughputRps > 0 and .status.summary.p99Ms > 0 and .status.summary.agents == 3
       and (.status.summary.thresholds[0].passed == true) and (.status.runId | startswith("run-"))
       and (.status as $s | $s.report | contains($s.runId)) and .status.startTime and .status.endTime' "$tmp/lt.json" >/dev/null ||
  fail "the LoadTest status lacks the summary"
[ "$(jq '.metadata.finalizers // [] | length' "$tmp/lt.json")" = 0 ] || fail "a finished LoadTest keeps a finalizer"
lt_run=$(jq -r .status.runId "$tmp/lt.json")
st report "$lt_run" --output json | jq -e --argjson c "$(jq .status.summary.completed "$tmp/lt.json")" '.totals.completed == $c' >/dev/null ||
  fail "the LoadTest's report $lt_run does not match its status"
kn get events --field-selector involvedObject.kind=LoadTest,involvedObject.name=steady -o json |
  jq -e '[.items[].reason] | (index("Submitted") != null) and (index("Started") != null) and (index("Succeeded") != null)' >/dev/null ||
  fail "the LoadTest has no Submitted/Started/Succeeded events"
kn get loadtests >&2
say "LoadTest steady: Succeeded, $(jq -r '.status.summary | "\(.completed) completed, \(.throughputRps) req/s, p99 \(.p99Ms) ms"' "$tmp/lt.json"); events published"

say "controller restart: a finished LoadTest is not rerun"
kn delete pod -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=controller --wait=true >/dev/null
kn rollout status "deployment/$FULL-controller" --timeout=120s >/dev/null || fail "controller did not come back"
sleep 5
[ "$(kn get loadtest steady -o jsonpath='{.status.runId}/{.status.phase}')" = "$lt_run/Succeeded" ] ||
  fail "LoadTest steady changed after a controller restart: $(kn get loadtest steady -o jsonpath='{.status}')"
st status --output json | jq -e 'map(select(.scenario == "k8s-e2e")) | length == 0' >/dev/null ||
  fail "the restarted controller started a run for a finished LoadTest"

# 4. An agent pod deleted mid-run, with a tolerant loss policy.
for ((i = 0; i < 60; i++)); do
  [ "$(st agents --output json 2>/dev/null | jq '[.[] | select(.state == "idle")] | length')" -ge 3 ] && break
  sleep 1
done
# What the http target served on /data (its stampede_target_http_requests_total), through the service proxy.
served() {
  k get --raw "/api/v1/namespaces/$NS/services/http:$FULL-target-http:8080/proxy/metrics" |
    awk '$1 ~ /^stampede_target_http_requests_total\{/ && $1 ~ /route="data"/ {n += $2} END {print n + 0}'
}
served_before=$(served)
scenario lossy 20s 30 '{tolerate: 50}' >"$tmp/lossy.yaml"
to_lt lossy "$tmp/lossy.yaml" >"$tmp/lossy-lt.yaml"
kn apply -f "$tmp/lossy-lt.yaml" >&2 || fail "kubectl apply LoadTest lossy"
kn wait loadtest/lossy --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null || fail "lossy did not reach Running"
sleep 4
victim=$(kn get pods -l app.kubernetes.io/instance=$REL,app.kubernetes.io/component=agent -o jsonpath='{.items[0].metadata.name}')
say "deleting agent pod $victim mid-run"
kn delete pod "$victim" --grace-period=1 --wait=false >/dev/null
# A tolerated loss still delivered less than planned: the run is Incomplete, never Succeeded.
kn wait loadtest/lossy --for=jsonpath='{.status.phase}'=Incomplete --timeout=90s >/dev/null ||
  fail "lossy did not finish as Incomplete: $(kn get loadtest lossy -o jsonpath='{.status.phase}: {.status.message}')"
kn get loadtest lossy -o json >"$tmp/lossy.json"
jq '.status | {phase, message, lostAgents, summary: (.summary | {completed, agents})}' "$tmp/lossy.json" >&2
jq -e --arg v "$victim" '(.status.lostAgents | map(.agent) == [$v]) and (.status.lostAgents[0].lostShare > 0)
   and (.status.message | contains($v))' "$tmp/lossy.json" >/dev/null || fail "the status does not name the lost agent $victim"
kn get events --field-selector involvedObject.kind=LoadTest,involvedObject.name=lossy -o json |
  jq -e --arg v "$victim" '[.items[] | select(.reason == "AgentLost" and (.note // .message | contains($v)))] | length > 0' >/dev/null ||
  fail "no AgentLost event naming $victim"
# The books: every request the target served is counted (the deleted agent drained what it had on SIGTERM).
served_n=$(($(served) - served_before))
lossy_run=$(jq -r .status.runId "$tmp/lossy.json")
# Its exit code is the run's verdict (incomplete: not 0); the report itself must be there.
st report "$lossy_run" --output json >"$tmp/lossy-report.json" || true
jq -e .totals "$tmp/lossy-report.json" >/dev/null || fail "stampede report $lossy_run gave no report"
read -r completed failed interrupted started < <(jq -r '.totals | [.completed, .failed, .interrupted, .started] |
  map(tostring) | join(" ")' "$tmp/lossy-report.json")
[ "$started" = $((completed + failed + interrupted)) ] ||
  fail "lossy: started $started != completed $completed + failed $failed + interrupted $interrupted"
[ $((completed + failed + interrupted)) -ge $((served_n - 3)) ] && [ "$completed" -le $((served_n + 3)) ] ||
  fail "lossy: the target served $served_n on /data, the report counts $completed completed, $failed failed, $interrupted interrupted"
say "agent $victim lost mid-run: tolerated, named in lostAgents, the message and an AgentLost event;" \
  "served $served_n on /data, counted completed $completed failed $failed interrupted $interrupted (started $started)"

idle_agents() { # N: wait until N agents are idle
  for ((i = 0; i < 90; i++)); do
    [ "$(st agents --output json 2>/dev/null | jq '[.[] | select(.state == "idle")] | length')" -ge "$1" ] && return 0
    sleep 1
  done
  fail "fewer than $1 idle agents after 90 s"
}

# 5. Deleting a running LoadTest: the finalizer aborts the run, then lets the resource go.
idle_agents 3
scenario long 120s 20 fail >"$tmp/long.yaml"
to_lt long "$tmp/long.yaml" >"$tmp/long-lt.yaml"
kn apply -f "$tmp/long-lt.yaml" >&2 || fail "kubectl apply LoadTest long"
kn wait loadtest/long --for=jsonpath='{.status.phase}'=Running --timeout=60s >/dev/null || fail "long did not reach Running"
long_run=$(kn get loadtest long -o jsonpath='{.status.runId}')
[ -n "$long_run" ] || fail "a running LoadTest has no runId"
sleep 2
t_del=$(date +%s)
kn delete loadtest long --timeout=60s >/dev/null || fail "deleting the running LoadTest long did not complete"
took=$(($(date +%s) - t_del))
st status --output json >"$tmp/status.json"
long_state=$(jq -r --arg r "$long_run" '.[] | select(.run_id == $r) | .state' "$tmp/status.json")
# One LoadTest, one run: adding the finalizer re-triggers the reconcile, which must not submit it again.
[ "$(jq '[.[] | select(.scenario == "long")] | length' "$tmp/status.json")" = 1 ] ||
  fail "the LoadTest long was submitted more than once: $(jq -c '[.[] | select(.scenario == "long") | {run_id, state, message}]' "$tmp/status.json")"
[ "$long_state" = aborted ] || fail "the run $long_run of the deleted LoadTest is '$long_state', not aborted"
[ "$took" -lt 30 ] || fail "deleting a running LoadTest took ${took}s"
say "deleted the running LoadTest long: its run $long_run was aborted, and the delete completed in ${took}s"

# 6. Scale-up: the run needs 4 agents, the Deployment has 3.
idle_agents 3
scenario wide 4s 20 fail | sed 's/^agents: 3$/agents: 4/' >"$tmp/wide.yaml"
to_lt wide "$tmp/wide.yaml" >"$tmp/wide-lt.yaml"
kn apply -f "$tmp/wide-lt.yaml" >&2 || fail "kubectl apply LoadTest wide"
kn wait loadtest/wide --for=jsonpath='{.status.phase}'=Succeeded --timeout=150s >/dev/null ||
  fail "wide did not succeed: $(kn get loadtest wide -o jsonpath='{.status.phase}: {.status.message}')"
replicas=$(kn get deployment "$FULL-agent" -o jsonpath='{.spec.replicas}')
[ "$replicas" = 4 ] || fail "the agent Deployment has $replicas replicas, not 4"
wide_agents=$(kn get loadtest wide -o jsonpath='{.status.summary.agents}')
[ "$wide_agents" = 4 ] || fail "the LoadTest wide ran on $wide_agents agents, not 4"
say "LoadTest wide asked for 4 agents: the controller scaled $FULL-agent from 3 to $replicas and the run used 4"

# 7. Uninstall.
kn get loadtests -o json | jq -e '[.items[].metadata.finalizers // [] | length] | add == 0' >/dev/null ||
  fail "a LoadTest keeps a finalizer"
helm_uninstall_clean "$REL" "$CRD" "$FULL-token"
say "helm uninstall: nothing left but the documented CRD and the LoadTests"
say "loadtest case passed"
