#!/usr/bin/env bash
# Smoke test: the stampede image serves HTTP in the cluster and is reachable by Service DNS name.
#  1. A Deployment of $STAMPEDE_IMAGE running `stampede target http --listen 0.0.0.0:8080` (non-root, read-only root
#     filesystem, no capabilities, readiness and liveness on /healthz) reaches Ready.
#  2. Its pod IP is in the cluster's pod network (198.18.0.0/16 on the local cluster).
#  3. Another pod resolves the Service name with the stampede image's own glibc resolver (getent), and gets the
#     Service's ClusterIP: cluster DNS works and the image carries what glibc needs for DNS.
#  4. A third pod GETs http://stampede-target:8080/ and http://stampede-target.<ns>.svc.cluster.local:8080/healthz
#     by name and gets 200.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

say "deploying stampede target http ($STAMPEDE_IMAGE, pull policy $STAMPEDE_IMAGE_PULL_POLICY)"
kn apply -f - >/dev/null <<EOF
apiVersion: apps/v1
kind: Deployment
metadata: {name: stampede-target, labels: {app: stampede-target}}
spec:
  replicas: 1
  selector: {matchLabels: {app: stampede-target}}
  template:
    metadata: {labels: {app: stampede-target}}
    spec:
      automountServiceAccountToken: false
      securityContext: {runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532}
      containers:
        - name: target
          image: $STAMPEDE_IMAGE
          imagePullPolicy: $STAMPEDE_IMAGE_PULL_POLICY
          args: [target, http, --listen, "0.0.0.0:8080"]
          ports: [{name: http, containerPort: 8080}]
          readinessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 1}
          livenessProbe: {httpGet: {path: /healthz, port: http}, periodSeconds: 10}
          securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
          resources: {requests: {cpu: 50m, memory: 32Mi}, limits: {memory: 256Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: stampede-target}
spec:
  selector: {app: stampede-target}
  ports: [{name: http, port: 8080, targetPort: http}]
EOF
kn rollout status deployment/stampede-target --timeout=180s >&2 || fail "the stampede target Deployment did not become Ready"
kn wait --for=condition=Ready pod -l app=stampede-target --timeout=60s >/dev/null
say "Deployment ready"

pod_ip=$(kn get pod -l app=stampede-target -o jsonpath='{.items[0].status.podIP}')
say "target pod IP $pod_ip"
if [ -n "${STAMPEDE_E2E_POD_CIDR:-}" ]; then
  ip_in_cidr "$pod_ip" "$STAMPEDE_E2E_POD_CIDR" || fail "pod IP $pod_ip is not in $STAMPEDE_E2E_POD_CIDR"
  say "pod IP is in $STAMPEDE_E2E_POD_CIDR"
fi

svc_ip=$(kn get service stampede-target -o jsonpath='{.spec.clusterIP}')
fqdn=stampede-target.$NS.svc.cluster.local
say "resolving $fqdn from the stampede image (expect $svc_ip)"
# A Service created seconds ago may not be in CoreDNS's view yet (its API watch lags on a cold cluster): the lookup
# is asked again for about half a minute before it counts as failed.
for ((try = 1; ; try++)); do
  [ "$(pod_phase "dns-check-$try" "$STAMPEDE_IMAGE" /usr/bin/getent hosts "$fqdn")" = Succeeded ] && break
  [ "$try" -lt 10 ] || fail "getent in the stampede image did not resolve $fqdn in $try tries"
  say "lookup $try of $fqdn failed; asking again"
  sleep 3
done
resolved=$(kn logs "dns-check-$try" | awk '{print $1}' | head -1)
[ "$resolved" = "$svc_ip" ] || fail "getent in the stampede image resolved $fqdn to '$resolved', not $svc_ip"
say "glibc DNS in the stampede image: $fqdn -> $resolved"

say "calling the target by Service name"
run_pod http-check "$STAMPEDE_PROBE_IMAGE" /probe get "http://stampede-target:8080/" 200
run_pod http-check-fqdn "$STAMPEDE_PROBE_IMAGE" /probe get "http://$fqdn:8080/healthz" 200
say "200 by Service DNS name"

kn logs deployment/stampede-target --tail=20 >&2 || true
say "smoke test passed"
