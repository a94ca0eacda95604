#!/usr/bin/env bash
# Offline checks of the Stampede chart: no cluster needed.
#   1. `helm lint --strict`, with the default values and with every ci/*-values.yaml;
#   2. `helm template --include-crds` of each of them, validated against the Kubernetes 1.33 schemas, strictly
#      (unknown fields are errors), by `kubernetes-validate` (PyPI; its wheel carries the schemas, so no network is
#      used at validation time);
#   3. every pod template meets Pod Security "restricted" plus a read-only root filesystem (except the documented
#      privileged init container of agents.portRange.method=initContainer), carries the app.kubernetes.io labels,
#      and every Stampede container gets STAMPEDE_TOKEN from a Secret where it needs it;
#   4. NetworkPolicies: every ipBlock `except` is a strict subset of its `cidr` (the API server rejects the object
#      otherwise; the offline schemas do not check it) and no rule has an empty peer list (which admits everyone);
#   5. values.schema.json rejects bad values and accepts good ones (the lease bounds among them);
#   6. single-value cases: NetworkPolicies on by default and off with networkPolicy.enabled=false; auth.existingSecret
#      renders no Secret and every pod refers to it; the generated token is random per render (helm template cannot
#      look the live Secret up; GitOps users set existingSecret or token) and fixed with auth.token; the generated
#      Secret is kept on uninstall unless auth.retainSecret=false; persistence renders a PVC (none with an
#      existingClaim); the controller gets STAMPEDE_MAX_AGENTS and the report retention; agents get
#      STAMPEDE_CPU_LIMIT from their limits.cpu (off with agents.cpuLimitFromPod=false); bad CIDRs fail.
#
# usage: helm/stampede/ci/validate.sh
# env:   HELM                    helm binary (default: $STAMPEDE_CLUSTER_CACHE/bin/helm, then helm on PATH)
#        STAMPEDE_CHART_VENV     virtualenv for kubernetes-validate (default: $STAMPEDE_CLUSTER_CACHE/venv-validate);
#                                created with `pip install kubernetes-validate==$KV_VERSION` if missing
#        STAMPEDE_KUBE_VERSION   Kubernetes version to validate against (default 1.33.0)
# exit:  0 clean; 1 a check failed
set -euo pipefail

CHART=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
KUBE_VERSION=${STAMPEDE_KUBE_VERSION:-1.33.0}
KV_VERSION=1.37.0
if [ "$(id -u)" = 0 ]; then cache_default=/var/cache/stampede-cluster; else cache_default=${XDG_CACHE_HOME:-$HOME/.cache}/stampede-cluster; fi
CACHE=${STAMPEDE_CLUSTER_CACHE:-$cache_default}
VENV=${STAMPEDE_CHART_VENV:-$CACHE/venv-validate}

say() { printf '[chart %s] %s\n' "$(date +%T)" "$*" >&2; }
die() {
  say "FAIL: $*"
  exit 1
}

HELM=${HELM:-}
if [ -z "$HELM" ]; then
  if [ -x "$CACHE/bin/helm" ]; then HELM=$CACHE/bin/helm; else HELM=$(command -v helm || true); fi
fi
{ [ -n "$HELM" ] && [ -x "$HELM" ]; } || die "no helm: set HELM, or build it with tests/cluster/build.sh"

if ! "$VENV/bin/kubernetes-validate" --version 2>/dev/null | grep -qx "$KV_VERSION"; then
  say "installing kubernetes-validate $KV_VERSION into $VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  timeout 600 "$VENV/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi
KV=$VENV/bin/kubernetes-validate
PY=$VENV/bin/python

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

value_sets=(default)
for f in "$CHART"/ci/*-values.yaml; do value_sets+=("$f"); done

for vs in "${value_sets[@]}"; do
  name=$(basename "$vs" .yaml)
  args=()
  [ "$vs" = default ] || args=(-f "$vs")
  say "== values: $name"
  # 1. lint
  if ! "$HELM" lint --strict "$CHART" "${args[@]}" --kube-version "$KUBE_VERSION" >"$work/lint" 2>&1; then
    cat "$work/lint" >&2
    die "helm lint --strict ($name)"
  fi
  grep -E '^\[(INFO|WARNING|ERROR)\]|chart\(s\) linted' "$work/lint" >&2 || true
  # 2. render and validate
  "$HELM" template st "$CHART" "${args[@]}" --namespace stampede --include-crds --kube-version "$KUBE_VERSION" \
    >"$work/$name.yaml" || die "helm template ($name)"
  "$KV" -k "$KUBE_VERSION" --strict --quiet "$work/$name.yaml" >"$work/kv" 2>&1 || {
    cat "$work/kv" >&2
    die "kubernetes-validate $KUBE_VERSION ($name)"
  }
  # The only kind without a schema may be the ServiceMonitor (a prometheus-operator CRD); anything else is an error.
  if grep -v -e "Couldn't find schema for kind ServiceMonitor with api version monitoring.coreos.com/v1" \
    -e "Couldn't find schema for kind Certificate with api version cert-manager.io/v1" "$work/kv" | grep . >/dev/null; then
    cat "$work/kv" >&2
    die "kubernetes-validate printed warnings ($name)"
  fi
  say "$(grep -c '^kind:' "$work/$name.yaml") objects valid against Kubernetes $KUBE_VERSION (strict): $(grep '^kind:' "$work/$name.yaml" | sort | uniq -c | awk '{printf "%s%s %s", sep, $1, $3; sep=", "}')"
  # 3. pod security, labels, token
  "$PY" - "$work/$name.yaml" <<'EOF' || die "pod checks ($name)"
import sys, yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
problems = []
workloads = 0
for d in docs:
    kind, name = d["kind"], d["metadata"]["name"]
    labels = d["metadata"].get("labels", {})
    for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
                "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of"):
        if kind != "CustomResourceDefinition" and key not in labels:
            problems.append(f"{kind}/{name}: no label {key}")
    if kind != "Deployment":
        continue
    workloads += 1
    pod = d["spec"]["template"]["spec"]
    psc = pod.get("securityContext", {})
    where = f"Deployment/{name}"
    if d["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component") is None:
        problems.append(f"{where}: selector has no component label")
    for c in pod.get("initContainers", []) + pod["containers"]:
        csc = c.get("securityContext", {})
        cw = f"{where} container {c['name']}"
        if c["name"] == "port-range" and csc.get("privileged"):
            continue  # documented exception: agents.portRange.method=initContainer
        eff = lambda k: csc.get(k, psc.get(k))
        if eff("runAsNonRoot") is not True: problems.append(f"{cw}: runAsNonRoot")
        if (eff("runAsUser") or 1) == 0: problems.append(f"{cw}: runs as uid 0")
        if csc.get("allowPrivilegeEscalation") is not False: problems.append(f"{cw}: allowPrivilegeEscalation")
        if csc.get("readOnlyRootFilesystem") is not True: problems.append(f"{cw}: readOnlyRootFilesystem")
        if csc.get("privileged"): problems.append(f"{cw}: privileged")
        if "ALL" not in csc.get("capabilities", {}).get("drop", []): problems.append(f"{cw}: capabilities not dropped")
        if csc.get("capabilities", {}).get("add"): problems.append(f"{cw}: adds capabilities")
        if (eff("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{cw}: seccompProfile")
        if "resources" not in c or "requests" not in c["resources"]:
            problems.append(f"{cw}: no resource requests")
        if c["name"] == "port-range":
            continue
        args = c.get("args", [])
        env = {e["name"]: e for e in c.get("env", [])}
        if args[:1] in (["controller"], ["agent"]):
            tok = env.get("STAMPEDE_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef")
            if not tok: problems.append(f"{cw}: STAMPEDE_TOKEN not from a Secret")
        if args[:1] == ["agent"]:
            for e in ("STAMPEDE_CONTROLLER", "POD_NAME", "NODE_NAME", "POD_IP"):
                if e not in env: problems.append(f"{cw}: no {e}")
            if pod.get("automountServiceAccountToken") is not False: problems.append(f"{cw}: mounts an API token")
        if args[:1] == ["target"]:
            if pod.get("automountServiceAccountToken") is not False: problems.append(f"{cw}: mounts an API token")
            for p in ("readinessProbe", "livenessProbe"):
                if "httpGet" not in c.get(p, {}): problems.append(f"{cw}: no {p} httpGet")
        if args[:1] == ["controller"]:
            grpc_port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
            tls = "STAMPEDE_TLS_CERT" in env
            for p in ("readinessProbe", "livenessProbe"):
                if "grpc" not in c.get(p, {}): problems.append(f"{cw}: no gRPC {p}")
                # The kubelet's gRPC probes speak no TLS: with TLS they must use the plaintext health port.
                elif tls and c[p]["grpc"]["port"] == grpc_port: problems.append(f"{cw}: {p} on the TLS port")
            if tls and "--health-listen" not in args: problems.append(f"{cw}: TLS without --health-listen")
        if args[:1] == ["agent"] and env.get("STAMPEDE_CONTROLLER", {}).get("value", "").startswith("https://"):
            if "STAMPEDE_CA_CERT" not in env: problems.append(f"{cw}: https controller but no STAMPEDE_CA_CERT")
import ipaddress
policies = 0
for d in docs:
    if d["kind"] != "NetworkPolicy":
        continue
    policies += 1
    where = f"NetworkPolicy/{d['metadata']['name']}"
    spec = d["spec"]
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            if not rule.get(peers_key):
                problems.append(f"{where}: {direction}[{i}] has no `{peers_key}`: it would admit every peer")
            for peer in rule.get(peers_key) or []:
                block = peer.get("ipBlock")
                if not block:
                    continue
                try:
                    net = ipaddress.ip_network(block["cidr"])
                    for ex in block.get("except", []):
                        sub = ipaddress.ip_network(ex)
                        if sub.version != net.version or not sub.subnet_of(net) or sub.prefixlen <= net.prefixlen:
                            problems.append(f"{where}: except {ex} is not a strict subset of {block['cidr']}")
                except ValueError as e:
                    problems.append(f"{where}: {e}")
for p in problems:
    print("  " + p, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"  {workloads} Deployments: Pod Security restricted, read-only root, labels, token, probes: ok", file=sys.stderr)
print(f"  {policies} NetworkPolicies: every ipBlock except inside its cidr, no rule without peers: ok", file=sys.stderr)
EOF
done

# 5. values.schema.json rejects bad values (each of these must fail to render) and accepts good ones.
bad=(
  "agents.replicas=-1"
  "agents.maxReplicas=0"
  "agents.spread.mode=sometimes"
  "agents.portRange.value=lots"
  "image.pullPolicy=Sometimes"
  "controller.agentWait=soon"
  "controller.agentWait=1d"
  "controller.lease=0s"
  "controller.lease=0ms"
  "controller.lease=50ms"
  "controller.lease=99ms"
  "controller.lease=61s"
  "controller.lease=2m"
  "controller.lease=1h"
  "controller.reports.retention.keep=0"
  "controller.reports.retention.maxAge=30d"
  "targets.http.port=70000"
  "targets.echoTcp.framing=xml"
  "logFormat=xml"
  "networkPolicy.enabled=maybe"
  "networkPolicy.agentEgress.denyCidrs={169.254.169.254}"
  "networkPolicy.agentEgress.allowCidrs={everywhere}"
  "controler.port=1"
)
for b in "${bad[@]}"; do
  if "$HELM" template st "$CHART" --set "$b" --kube-version "$KUBE_VERSION" >/dev/null 2>"$work/err"; then
    die "values.schema.json accepted --set $b"
  fi
  grep -q "values don't meet the specifications of the schema" "$work/err" || {
    cat "$work/err" >&2
    die "--set $b failed, but not because of the schema"
  }
done
say "values.schema.json rejects ${#bad[@]} bad values"
good=(
  "controller.lease=100ms"
  "controller.lease=0.1s"
  "controller.lease=1s"
  "controller.lease=1500ms"
  "controller.lease=30s"
  "controller.lease=60s"
  "controller.lease=60000ms"
  "controller.lease=1m"
  "controller.agentWait=1h"
  "controller.reports.retention.maxAge=1h"
)
for g in "${good[@]}"; do
  "$HELM" template st "$CHART" --set "$g" --kube-version "$KUBE_VERSION" >/dev/null 2>"$work/err" || {
    cat "$work/err" >&2
    die "values.schema.json rejected --set $g"
  }
done
say "values.schema.json accepts ${#good[@]} good values"

# 6. Single-value cases. render NAME [helm args]: $work/case-NAME.yaml (no CRDs).
render() {
  local name=$1
  shift
  "$HELM" template st "$CHART" --namespace stampede --kube-version "$KUBE_VERSION" "$@" >"$work/case-$name.yaml" ||
    die "helm template $* (case $name)"
}
render default
render default-again
render netpol-off --set networkPolicy.enabled=false
render existing --set auth.existingSecret=x
render token --set auth.token=fixed-token-for-the-test
render token-again --set auth.token=fixed-token-for-the-test
render not-retained --set auth.retainSecret=false
render pvc --set controller.reports.persistence.enabled=true
render claim --set controller.reports.persistence.enabled=true --set controller.reports.persistence.existingClaim=mine
render max --set agents.maxReplicas=7 --set agents.replicas=7 --set controller.reports.retention.keep=9 \
  --set controller.reports.retention.maxAge=48h
render targets --set targets.http.enabled=true --set targets.echoUdp.enabled=true --set targets.grpc.enabled=true
render tls-existing --set tls.existingSecret=mine
render tls-off --set tls.enabled=false
render cpu-off --set agents.cpuLimitFromPod=false
"$PY" - "$work" <<'EOF' || die "single-value cases"
import sys, yaml

work = sys.argv[1]
def docs(name):
    return [d for d in yaml.safe_load_all(open(f"{work}/case-{name}.yaml")) if d]
def kinds(name, kind):
    return [d for d in docs(name) if d["kind"] == kind]
def one(name, kind, suffix=""):
    found = [d for d in kinds(name, kind) if d["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, f"{name}: {len(found)} {kind} named *{suffix}"
    return found[0]
def env(name, component):
    dep = one(name, "Deployment", "-" + component)
    return {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0].get("env", [])}
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)

check(len(kinds("default", "NetworkPolicy")) >= 2, "default: fewer than 2 NetworkPolicies")
check(not kinds("netpol-off", "NetworkPolicy"), "networkPolicy.enabled=false still renders NetworkPolicies")
agent_np = one("default", "NetworkPolicy", "-agent")
check(set(agent_np["spec"]["policyTypes"]) == {"Ingress", "Egress"}, "agent policy: not Ingress and Egress")
blocks = [p["ipBlock"] for r in agent_np["spec"]["egress"] for p in r["to"] if "ipBlock" in p]
want = {"0.0.0.0/0": ["169.254.0.0/16"], "::/0": ["fe80::/10", "fd00:ec2::254/128"]}
check({b["cidr"]: b.get("except", []) for b in blocks} == want, f"agent policy: default ipBlocks {blocks}")
ctl_np = one("default", "NetworkPolicy", "-controller")
check(all(p["port"] == 7070 for r in ctl_np["spec"]["ingress"] for p in r["ports"]),
      "controller policy admits a port other than gRPC (metrics are off by default)")
tgt_np = one("targets", "NetworkPolicy", "-targets")
tgt_values = tgt_np["spec"]["podSelector"]["matchExpressions"][0]["values"]
check(tgt_values == ["target-http", "target-echo-udp", "target-grpc"], f"targets policy selects {tgt_values}")
check({(p["protocol"], p["port"]) for p in tgt_np["spec"]["ingress"][0]["ports"]} == {("TCP", 8080), ("UDP", 7002), ("TCP", 50051)},
      "targets policy: agents not admitted to exactly the traffic ports")
grpc_svc = one("targets", "Service", "-target-grpc")
check({(p["name"], p["port"], p.get("appProtocol")) for p in grpc_svc["spec"]["ports"]}
      == {("grpc", 50051, "kubernetes.io/h2c"), ("metrics", 9103, "http")},
      f"grpc target Service ports {grpc_svc['spec']['ports']}")
grpc_args = one("targets", "Deployment", "-target-grpc")["spec"]["template"]["spec"]["containers"][0]["args"]
check(grpc_args[:2] == ["target", "grpc"] and "--metrics-listen" in grpc_args, f"grpc target args {grpc_args}")

check(not [s for s in kinds("existing", "Secret") if s["metadata"]["name"].endswith("-token")],
      "auth.existingSecret=x still renders a token Secret")
for comp in ("controller", "agent"):
    ref = env("existing", comp)["STAMPEDE_TOKEN"]["valueFrom"]["secretKeyRef"]
    check(ref == {"name": "x", "key": "token"}, f"{comp}: STAMPEDE_TOKEN from {ref}, not x/token")
    ref = env("default", comp)["STAMPEDE_TOKEN"]["valueFrom"]["secretKeyRef"]
    check(ref == {"name": "st-stampede-token", "key": "token"}, f"{comp}: STAMPEDE_TOKEN from {ref} by default")

# Agents measure their CPU against the cores their pod may use: limits.cpu in millicores, passed as `NNNm`.
cpu = env("default", "agent")
check(cpu.get("CPU_LIMIT_MILLICORES", {}).get("valueFrom", {}).get("resourceFieldRef")
      == {"containerName": "agent", "resource": "limits.cpu", "divisor": "1m"},
      f"agent: CPU_LIMIT_MILLICORES not from limits.cpu in 1m: {cpu.get('CPU_LIMIT_MILLICORES')}")
check(cpu.get("STAMPEDE_CPU_LIMIT", {}).get("value") == "$(CPU_LIMIT_MILLICORES)m",
      f"agent: STAMPEDE_CPU_LIMIT is {cpu.get('STAMPEDE_CPU_LIMIT')}")
check(not {"CPU_LIMIT_MILLICORES", "STAMPEDE_CPU_LIMIT"} & set(env("cpu-off", "agent")),
      "agents.cpuLimitFromPod=false still sets the agent's CPU limit")

secret = one("default", "Secret", "-token")
check(secret["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep",
      "the generated Secret is not helm.sh/resource-policy: keep")
check("annotations" not in one("not-retained", "Secret", "-token")["metadata"],
      "auth.retainSecret=false still keeps the Secret")
# Without a cluster there is nothing to look up: each render generates a token. Only an explicit token (or an
# existing Secret) is stable across renders, which is why GitOps setups must use one.
check(secret["data"] != one("default-again", "Secret", "-token")["data"],
      "two default renders produced the same token: generated tokens must be random, not derived")
check(one("token", "Secret", "-token") == one("token-again", "Secret", "-token"), "auth.token renders differ")

# TLS on by default: a generated CA and a certificate naming the controller Service, mounted by the controller
# (certificate and key) and the agents (the CA only), probes on the plaintext health port.
import base64, subprocess
tls = one("default", "Secret", "-tls")
check(set(tls["data"]) == {"tls.crt", "tls.key", "ca.crt"}, f"TLS Secret keys {sorted(tls['data'])}")
san = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName"], capture_output=True, text=True,
                     input=base64.b64decode(tls["data"]["tls.crt"]).decode()).stdout
for n in ("st-stampede-controller", "st-stampede-controller.stampede.svc",
          "st-stampede-controller.stampede.svc.cluster.local"):
    check(f"DNS:{n}," in san.strip() + ",", f"the certificate does not name {n}: {san.strip()}")
for part in ("ca.crt", "tls.crt"):
    open(f"{work}/{part}", "wb").write(base64.b64decode(tls["data"][part]))
verify = subprocess.run(["openssl", "verify", "-CAfile", f"{work}/ca.crt", f"{work}/tls.crt"], capture_output=True,
                        text=True)
check(verify.returncode == 0, f"the certificate is not signed by the Secret's CA: {verify.stdout}{verify.stderr}")
ctl = one("default", "Deployment", "-controller")["spec"]["template"]
check(ctl["metadata"]["annotations"].get("stampede.dev/tls-secret") == "st-stampede-tls", "no tls-secret annotation")
check(ctl["metadata"]["annotations"].get("stampede.dev/tls-server-name") == "st-stampede-controller.stampede.svc",
      "no tls-server-name annotation")
check(env("default", "agent")["STAMPEDE_CONTROLLER"]["value"] == "https://st-stampede-controller.stampede.svc:7070",
      "agents do not dial https")
check("STAMPEDE_CA_CERT" in env("default", "agent"), "agents do not trust the CA")
agent_vols = one("default", "Deployment", "-agent")["spec"]["template"]["spec"]["volumes"]
check([v["secret"] for v in agent_vols if "secret" in v] ==
      [{"secretName": "st-stampede-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}],
      f"agents mount more than the CA: {agent_vols}")
check(not [s for s in kinds("tls-existing", "Secret") if s["metadata"]["name"].endswith("-tls")],
      "tls.existingSecret still renders a TLS Secret")
vols = one("tls-existing", "Deployment", "-controller")["spec"]["template"]["spec"]["volumes"]
check([v["secret"]["secretName"] for v in vols if "secret" in v] == ["mine"], "tls.existingSecret is not mounted")
check(not [s for s in kinds("tls-off", "Secret") if s["metadata"]["name"].endswith("-tls")], "tls off renders a Secret")
check(env("tls-off", "agent")["STAMPEDE_CONTROLLER"]["value"].startswith("http://"), "tls off: agents dial https")
check("STAMPEDE_TLS_CERT" not in env("tls-off", "controller"), "tls off: the controller serves TLS")

check(not kinds("default", "PersistentVolumeClaim"), "default renders a PVC")
pvc = one("pvc", "PersistentVolumeClaim")
vols = one("pvc", "Deployment", "-controller")["spec"]["template"]["spec"]["volumes"]
claim = [v["persistentVolumeClaim"]["claimName"] for v in vols if v["name"] == "reports"]
check(claim == [pvc["metadata"]["name"]], f"persistence: the reports volume is {claim}, not the claim")
check(not kinds("claim", "PersistentVolumeClaim"), "existingClaim still renders a PVC")
vols = one("claim", "Deployment", "-controller")["spec"]["template"]["spec"]["volumes"]
check([v.get("persistentVolumeClaim", {}).get("claimName") for v in vols if v["name"] == "reports"] == ["mine"],
      "existingClaim is not mounted")
check(one("pvc", "Deployment", "-controller")["spec"]["strategy"]["type"] == "Recreate", "controller not Recreate")

for name, want in (("default", {"STAMPEDE_MAX_AGENTS": "50", "STAMPEDE_REPORTS_KEEP": "200",
                                "STAMPEDE_REPORTS_MAX_AGE": "720h"}),
                   ("max", {"STAMPEDE_MAX_AGENTS": "7", "STAMPEDE_REPORTS_KEEP": "9",
                            "STAMPEDE_REPORTS_MAX_AGE": "48h"})):
    e = env(name, "controller")
    got = {k: e.get(k, {}).get("value") for k in want}
    check(got == want, f"{name}: controller env {got}, want {want}")

for p in problems:
    print("  " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
# Render-time failures (the chart's own checks, not the schema).
fails=(
  "agents.replicas=51"
  "networkPolicy.agentEgress.allowCidrs={169.254.169.254/32}"
  "networkPolicy.agentEgress.allowCidrs={10.0.0.300/8}"
  "networkPolicy.agentEgress.denyCidrs={1:2::3::4/64}"
)
for f in "${fails[@]}"; do
  if "$HELM" template st "$CHART" --set "$f" --kube-version "$KUBE_VERSION" >/dev/null 2>"$work/err"; then
    die "--set $f rendered, but must fail"
  fi
  grep -q "execution error" "$work/err" || {
    cat "$work/err" >&2
    die "--set $f failed, but not in the chart's own checks"
  }
done
say "single-value cases OK (NetworkPolicies, token Secret, PVC, env); ${#fails[@]} bad combinations refused"
say "chart OK: lint --strict clean and manifests valid for Kubernetes $KUBE_VERSION with ${#value_sets[@]} value sets"
