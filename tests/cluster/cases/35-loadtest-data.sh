#!/usr/bin/env bash
# A LoadTest's data sources read from a ConfigMap and a Secret by the controller, end to end:
#  1. `helm install` with 2 agents and the http target, its access log on stdout.
#  2. A LoadTest naming a ConfigMap that does not exist stays Pending with a message and a DataReady=False
#     condition naming `data.users.config_map` and the object, a DataMissing event, and no run; after the wait
#     (60 s) it ends Failed with a message that names them.
#  3. A LoadTest reading users.csv (40 rows, order: shuffle) from a ConfigMap and tokens.jsonl (40 rows) from a
#     Secret, 40 arrivals over 2 agents: Succeeded, DataReady=True; the target's access log shows every user id and
#     every token exactly once (the rows were split across the agents with none used twice and none skipped).
#  4. No token value is in the LoadTest's status, its events or the controller's log.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

: "${HELM:?run cases through tests/cluster/e2e.sh}"
CHART=$REPO_ROOT/helm/stampede
REL=ltd
FULL=$REL-stampede
CRD=loadtests.stampede.dev
ROWS=40
tmp=$(mktemp -d)

# On failure, besides the namespace's state: the LoadTests and the controller's log.
case_diagnostics() {
  kn get loadtests -o yaml || true
  kn logs -l app.kubernetes.io/component=controller --tail=80 || true
}
release_trap

say "helm install $REL (2 agents, the http target with its access log on stdout)"
helm_install_stampede --set agents.replicas=2 --set targets.http.enabled=true \
  --set 'targets.http.extraArgs={--access-log,stdout}'
for d in controller agent target-http; do
  kn rollout status "deployment/$FULL-$d" --timeout=120s >/dev/null || fail "deployment $FULL-$d did not roll out"
done

target_url=http://$FULL-target-http.$NS.svc.cluster.local:8080
loadtest() { # name users-configmap
  cat <<EOF
apiVersion: stampede.dev/v1alpha1
kind: LoadTest
metadata: {name: $1}
spec:
  name: $1
  target: $target_url
  agents: 2
  arrival: uniform
  seed: 35
  data:
    users: { config_map: { name: $2, key: users.csv }, order: shuffle }
    tokens: { secret: { name: tokens, key: tokens.jsonl } }
  phases:
    - { name: steady, duration: 2s, arrival_rate: $((ROWS / 2)) }
  session:
    - name: data
      http: { method: GET, path: '/data?u=\${users.id}&t=\${tokens.token}' }
  thresholds:
    - error_rate < 1%
EOF
}

# 2. A missing ConfigMap: applied first, so its wait runs while the real one does.
# It reads only the ConfigMap, so its message is about that one.
loadtest nodata nope | grep -v ' tokens: ' | sed 's/&t=\${tokens.token}//' >"$tmp/nodata.yaml"
grep -q 'tokens' "$tmp/nodata.yaml" && fail "nodata.yaml still reads tokens"
kn apply -f "$tmp/nodata.yaml" >&2 || fail "kubectl apply LoadTest nodata"
want="data.users.config_map: configmap $NS/nope not found"
for ((i = 0; i < 30; i++)); do
  kn get loadtest nodata -o json >"$tmp/nodata.json"
  jq -e --arg w "$want" '.status.phase == "Pending" and (.status.message | startswith($w))' "$tmp/nodata.json" >/dev/null && break
  sleep 1
done
jq '.status' "$tmp/nodata.json" >&2
jq -e --arg w "$want" '.status.phase == "Pending" and (.status.message | startswith($w)) and (.status.runId == null)
   and (.status.conditions[] | select(.type == "DataReady") | .status == "False" and .reason == "Missing" and (.message | startswith($w)))' \
  "$tmp/nodata.json" >/dev/null || fail "LoadTest nodata is not Pending with a message and a DataReady condition naming $want"
say "LoadTest nodata waits: $(jq -r .status.message "$tmp/nodata.json")"

# 3. The rows: a ConfigMap and a Secret.
{
  echo "id,name"
  for ((i = 1; i <= ROWS; i++)); do echo "u$i,user $i"; done
} >"$tmp/users.csv"
secret_word=$(head -c6 /dev/urandom | od -An -tx1 | tr -d ' \n')
for ((i = 1; i <= ROWS; i++)); do printf '{"token": "tok-%s-%d"}\n' "$secret_word" "$i"; done >"$tmp/tokens.jsonl"
kn create configmap users --from-file=users.csv="$tmp/users.csv" >/dev/null || fail "creating the ConfigMap users"
kn create secret generic tokens --from-file=tokens.jsonl="$tmp/tokens.jsonl" >/dev/null || fail "creating the Secret tokens"
loadtest rows users >"$tmp/rows.yaml"
kn apply -f "$tmp/rows.yaml" >&2 || fail "kubectl apply LoadTest rows"
kn wait loadtest/rows --for=jsonpath='{.status.phase}'=Succeeded --timeout=120s >/dev/null ||
  fail "LoadTest rows did not succeed: $(kn get loadtest rows -o jsonpath='{.status.phase}: {.status.message}')"
kn get loadtest rows -o json >"$tmp/rows.json"
jq '.status | {phase, message, conditions, summary: (.summary | {completed, failed, agents})}' "$tmp/rows.json" >&2
jq -e --argjson n "$ROWS" '.status.summary.completed == $n and .status.summary.failed == 0 and .status.summary.agents == 2
   and (.status.conditions[] | select(.type == "DataReady") | .status == "True"
        and (.message | contains("data.users: \($n) rows from configmap") and contains("data.tokens: \($n) rows from secret")))' \
  "$tmp/rows.json" >/dev/null || fail "LoadTest rows: not $ROWS completed on 2 agents with DataReady=True"

# Every row exactly once, as the target saw it (the access log is flushed every second).
for ((i = 0; i < 15; i++)); do
  kn logs "deployment/$FULL-target-http" >"$tmp/access.log" 2>/dev/null || true
  [ "$(grep -c '"GET /data?u=' "$tmp/access.log")" -ge "$ROWS" ] && break
  sleep 1
done
grep -o '"GET /data?u=[^ ]*' "$tmp/access.log" | sed 's/^"GET \/data?u=//' >"$tmp/seen.txt" || true
cut -d'&' -f1 "$tmp/seen.txt" | sort >"$tmp/seen-users.txt"
sed 's/.*&t=//' "$tmp/seen.txt" | sort >"$tmp/seen-tokens.txt"
cut -d, -f1 "$tmp/users.csv" | tail -n +2 | sort >"$tmp/want-users.txt"
jq -r .token "$tmp/tokens.jsonl" | sort >"$tmp/want-tokens.txt"
diff "$tmp/want-users.txt" "$tmp/seen-users.txt" >&2 ||
  fail "the target did not see every user id of the ConfigMap exactly once ($(wc -l <"$tmp/seen-users.txt") requests)"
diff "$tmp/want-tokens.txt" "$tmp/seen-tokens.txt" >&2 ||
  fail "the target did not see every token of the Secret exactly once"
# From both agents: the split gave each its own rows (source IPs are the agent pods').
sources=$(grep '"GET /data?u=' "$tmp/access.log" | awk '{print $2}' | sort | uniq -c)
echo "$sources" >&2
[ "$(echo "$sources" | grep -c .)" = 2 ] || fail "the requests came from $(echo "$sources" | grep -c .) addresses, not the 2 agents"
say "LoadTest rows: $ROWS requests, each user id (ConfigMap, shuffled) and each token (Secret) seen exactly once over 2 agents"

# 4. The Secret's values stay out of the status, the events and the controller's log.
kn get events --field-selector involvedObject.kind=LoadTest -o json >"$tmp/events.json"
kn logs "deployment/$FULL-controller" >"$tmp/controller.log" 2>&1 || true
for f in rows.json nodata.json events.json controller.log; do
  if grep -q "tok-$secret_word" "$tmp/$f"; then fail "a token from the Secret is in $f"; fi
done
say "no token in the LoadTests' status, their events or the controller's log"

# 2, continued: the wait ends, and the failure names the field and the object.
kn wait loadtest/nodata --for=jsonpath='{.status.phase}'=Failed --timeout=90s >/dev/null ||
  fail "LoadTest nodata did not fail: $(kn get loadtest nodata -o jsonpath='{.status.phase}: {.status.message}')"
kn get loadtest nodata -o json >"$tmp/nodata.json"
jq -e --arg w "$want" '(.status.message | startswith($w) and contains("waited 60 s")) and .status.runId == null' \
  "$tmp/nodata.json" >/dev/null || fail "LoadTest nodata failed without naming $want: $(jq -r .status.message "$tmp/nodata.json")"
kn get events --field-selector involvedObject.kind=LoadTest,involvedObject.name=nodata -o json |
  jq -e --arg w "$want" '[.items[] | select(.reason == "DataMissing" and (.note // .message | startswith($w)))] | length > 0' >/dev/null ||
  fail "no DataMissing event naming $want"
say "LoadTest nodata: $(jq -r .status.message "$tmp/nodata.json")"
say "loadtest data case passed"
