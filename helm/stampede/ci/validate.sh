#!/usr/bin/env bash
# Offline checks of the Stampede chart: no cluster needed.
#   1. `helm lint --strict`, with the default values and with every ci/*-values.yaml;
#   2. `helm template --include-crds` of each of them, validated against the Kubernetes 1.33 schemas, strictly
#      (unknown fields are errors), by `kubernetes-validate` (PyPI; its wheel carries the schemas, so no network is
#      used at validation time);
#   3. every pod template meets Pod Security "restricted" plus a read-only root filesystem (except the documented
#      privileged init container of agents.portRange.method=initContainer), carries the app.kubernetes.io labels,
#      and every Stampede container gets STAMPEDE_TOKEN from a Secret where it needs it;
#   4. values.schema.json rejects bad values.
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
  if grep -v "Couldn't find schema for kind ServiceMonitor with api version monitoring.coreos.com/v1" "$work/kv" | grep -q .; then
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
            for p in ("readinessProbe", "livenessProbe"):
                if "grpc" not in c.get(p, {}): problems.append(f"{cw}: no gRPC {p}")
for p in problems:
    print("  " + p, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"  {workloads} Deployments: Pod Security restricted, read-only root, labels, token, probes: ok", file=sys.stderr)
EOF
done

# 4. values.schema.json rejects bad values (each of these must fail to render).
bad=(
  "agents.replicas=-1"
  "agents.spread.mode=sometimes"
  "agents.portRange.value=lots"
  "image.pullPolicy=Sometimes"
  "controller.agentWait=soon"
  "targets.http.port=70000"
  "targets.echoTcp.framing=xml"
  "logFormat=xml"
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
say "chart OK: lint --strict clean and manifests valid for Kubernetes $KUBE_VERSION with ${#value_sets[@]} value sets"
