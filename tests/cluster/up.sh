#!/usr/bin/env bash
# Bring up a single-node Kubernetes v1.33.13 cluster on this machine, for Stampede's end-to-end tests.
#
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (Debian, private socket and root),
#   kubelet, kube-proxy (iptables), and CoreDNS as a pod. Pods 198.18.0.0/16 on bridge stampede0 (198.18.0.1),
#   services 198.19.0.0/16 (DNS 198.19.0.10). Pods have a route to 198.18.0.0/15 only, a FORWARD guard drops
#   anything from the cluster to elsewhere, and nothing is masqueraded: test traffic cannot leave the machine.
#
# usage: tests/cluster/up.sh      (root; builds what is missing first; prints the kubeconfig to use)
# exit:  0 up; 1 failed (and torn down again); 3 busy: a cluster already runs or its ports are taken (nothing touched)
# env:   STAMPEDE_CLUSTER_KEEP_ON_FAILURE=1   leave a half-started cluster for debugging instead of tearing it down
# shellcheck source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
need_root "up.sh"

T0=$(date +%s)
on_error() {
  local rc=$?
  trap - ERR
  log "up failed (exit $rc); last log lines:"
  local f
  for f in "$LOGS"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $f" >&2
    tail -n 15 "$f" >&2 || true
  done
  if [ "${STAMPEDE_CLUSTER_KEEP_ON_FAILURE:-0}" = 1 ]; then
    log "leaving the cluster as it is (STAMPEDE_CLUSTER_KEEP_ON_FAILURE=1); run tests/cluster/down.sh later"
  else
    "$CLUSTER_DIR/down.sh" || true
  fi
  exit "$rc"
}
trap on_error ERR

# ---------------------------------------------------------------- preflight
# Exit 3 (not 1) when the machine is busy: another cluster of this harness runs, or its ports are taken.
# Nothing is stopped then: it may be someone else's cluster.
trap - ERR
if cluster_running; then
  log "a test cluster is already running (pids in $PIDS): not touching it."
  log "use it with KUBECONFIG=$KUBECONFIG_OUT, or stop it with tests/cluster/down.sh"
  exit 3
fi
busy=$(busy_ports)
if [ -n "$busy" ]; then
  log "ports the cluster needs are already in use: $busy"
  exit 3
fi
trap on_error ERR
if [ -d "$STATE" ] || [ -d "$RUN" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then
  log "leftovers of an earlier cluster found: cleaning them first"
  "$CLUSTER_DIR/down.sh"
fi
ensure_packages "${NODE_PACKAGES[@]}"
"$CLUSTER_DIR/build.sh" >&2
"$CLUSTER_DIR/images.sh" build >&2


mkdir -p "$STATE" "$RUN" "$LOGS" "$PIDS" "$PKI"
chmod 0700 "$STATE"

# What existed before us, so down.sh removes only what this cluster added.
{
  for t in filter nat mangle raw; do iptables -t "$t" -S 2>/dev/null | awk -v t="$t" '/^-N /{print "ip4", t, $2}'; done
  for t in filter nat mangle raw; do ip6tables -t "$t" -S 2>/dev/null | awk -v t="$t" '/^-N /{print "ip6", t, $2}'; done
} >"$STATE/baseline-chains"
ip netns list 2>/dev/null | awk '{print $1}' >"$STATE/baseline-netns"
{
  echo "net.ipv4.ip_forward=$(cat /proc/sys/net/ipv4/ip_forward)"
  if [ -f /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    echo "net.bridge.bridge-nf-call-iptables=$(cat /proc/sys/net/bridge/bridge-nf-call-iptables)"
  fi
} >"$STATE/baseline-sysctl"

# ---------------------------------------------------------------- PKI (ECDSA P-256, openssl only)
log "generating certificates"
(
  cd "$PKI" || exit 1
  umask 077
  openssl ecparam -name prime256v1 -genkey -noout -out ca.key
  openssl req -x509 -new -key ca.key -subj "/CN=stampede-test-cluster-ca" -days 30 -out ca.crt 2>/dev/null
  sign() { # NAME SUBJECT [SAN]
    openssl ecparam -name prime256v1 -genkey -noout -out "$1.key"
    openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
    if [ -n "${3:-}" ]; then
      printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' "$3" >"$1.ext"
    else
      printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' >"$1.ext"
    fi
    openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
    rm -f "$1.csr" "$1.ext"
  }
  sign apiserver "/CN=kube-apiserver" "IP:$BRIDGE_IP,IP:127.0.0.1,IP:$KUBERNETES_SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN"
  sign admin "/O=system:masters/CN=stampede-admin"
  sign kube-controller-manager "/CN=system:kube-controller-manager"
  sign kube-scheduler "/CN=system:kube-scheduler"
  sign kube-proxy "/CN=system:kube-proxy"
  sign kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME"
  sign kubelet-serving "/CN=system:node:$NODE_NAME" "IP:$NODE_NAME,IP:$BRIDGE_IP,DNS:localhost"
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  sign front-proxy-client "/CN=front-proxy-client"
  openssl ecparam -name prime256v1 -genkey -noout -out sa.key
  openssl ec -in sa.key -pubout -out sa.pub 2>/dev/null
)

kubeconfig() { # FILE USER CERTNAME
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: stampede-test
  cluster:
    server: https://$BRIDGE_IP:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$3.crt")
    client-key-data: $(base64 -w0 "$PKI/$3.key")
contexts:
- name: stampede-test
  context: {cluster: stampede-test, user: $2}
current-context: stampede-test
EOF
  chmod 0600 "$1"
}
kubeconfig "$PKI/controller-manager.kubeconfig" system:kube-controller-manager kube-controller-manager
kubeconfig "$PKI/scheduler.kubeconfig" system:kube-scheduler kube-scheduler
kubeconfig "$PKI/kube-proxy.kubeconfig" system:kube-proxy kube-proxy
kubeconfig "$PKI/kubelet.kubeconfig" "system:node:$NODE_NAME" kubelet-client
kubeconfig "$KUBECONFIG_OUT" stampede-admin admin

# ---------------------------------------------------------------- network
log "bridge $BRIDGE $BRIDGE_IP, sysctls, FORWARD guard"
ip link add "$BRIDGE" type bridge
ip addr add "$BRIDGE_IP/${NODE_POD_SUBNET#*/}" dev "$BRIDGE"
ip link set "$BRIDGE" up
echo 1 >/proc/sys/net/ipv4/ip_forward
if [ -f /proc/sys/net/bridge/bridge-nf-call-iptables ]; then echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables; fi
# In mangle FORWARD: it runs before filter FORWARD, where kube-proxy and kubelet put their ACCEPT rules first, and
# after nat PREROUTING, so it sees Service traffic with its real (DNATed) destination.
iptables -t mangle -N STAMPEDE-GUARD
iptables -t mangle -A STAMPEDE-GUARD -s "$CLUSTER_NET" -d "$CLUSTER_NET" -j RETURN
iptables -t mangle -A STAMPEDE-GUARD -s "$CLUSTER_NET" -j DROP
iptables -t mangle -A STAMPEDE-GUARD -i "$BRIDGE" -j DROP
iptables -t mangle -A STAMPEDE-GUARD -o "$BRIDGE" ! -s "$CLUSTER_NET" -j DROP
iptables -t mangle -A STAMPEDE-GUARD -d "$CLUSTER_NET" -j DROP
iptables -t mangle -I FORWARD 1 -m comment --comment "stampede test cluster: nothing crosses 198.18.0.0/15" -j STAMPEDE-GUARD

# ---------------------------------------------------------------- control plane
start_daemon etcd "$LOGS/etcd.log" "$BIN/etcd" --name stampede --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "stampede=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync --log-level warn
wait_for 60 "etcd health" sh -c "curl -fsS http://127.0.0.1:$ETCD_CLIENT_PORT/health | grep -q '\"health\":\"true\"'"

start_daemon kube-apiserver "$LOGS/kube-apiserver.log" "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --bind-address="$BRIDGE_IP" --advertise-address="$BRIDGE_IP" --secure-port="$APISERVER_PORT" \
  --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-account-issuer="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
  --service-cluster-ip-range="$SERVICE_CIDR" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --allow-privileged=true --profiling=false \
  --requestheader-client-ca-file="$PKI/ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key"
# /readyz must say exactly "ok": a failing body also contains "[+]... ok" lines.
apiserver_ready() {
  [ "$(curl -sS --max-time 5 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://$BRIDGE_IP:$APISERVER_PORT/readyz")" = ok ]
}
wait_for 120 "kube-apiserver /readyz" apiserver_ready
log "kube-apiserver ready"

start_daemon kube-controller-manager "$LOGS/kube-controller-manager.log" "$BIN/kube-controller-manager" \
  --kubeconfig="$PKI/controller-manager.kubeconfig" \
  --authentication-kubeconfig="$PKI/controller-manager.kubeconfig" --authorization-kubeconfig="$PKI/controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10257 \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --use-service-account-credentials=true --leader-elect=false \
  --service-cluster-ip-range="$SERVICE_CIDR" --cluster-cidr="$POD_CIDR" --allocate-node-cidrs=false
start_daemon kube-scheduler "$LOGS/kube-scheduler.log" "$BIN/kube-scheduler" \
  --kubeconfig="$PKI/scheduler.kubeconfig" \
  --authentication-kubeconfig="$PKI/scheduler.kubeconfig" --authorization-kubeconfig="$PKI/scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --secure-port=10259 --leader-elect=false

# ---------------------------------------------------------------- node: containerd, CNI, images, kubelet, kube-proxy
mkdir -p "$STATE/containerd" "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/kubelet" "$STATE/pod-logs"
cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$RUN/containerd"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # The sandbox cannot lower oom_score_adj (no CAP_SYS_RESOURCE), so never ask for negative values.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$STATE/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
EOF
cat >"$STATE/cni/net.d/10-stampede.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "stampede",
  "plugins": [
    {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "isDefaultGateway": false, "ipMasq": false,
     "hairpinMode": true,
     "ipam": {"type": "host-local", "dataDir": "$STATE/cni/ipam",
              "ranges": [[{"subnet": "$NODE_POD_SUBNET", "gateway": "$BRIDGE_IP"}]],
              "routes": [{"dst": "$CLUSTER_NET"}]}},
    {"type": "loopback"}
  ]
}
EOF
start_daemon containerd "$LOGS/containerd.log" containerd --config "$STATE/containerd/config.toml"
wait_for 60 "containerd" ctr --address "$CONTAINERD_SOCK" version
"$CLUSTER_DIR/images.sh" load >&2

# The kubelet listens on the bridge's address, the node's InternalIP (--node-ip): the API server's node proxy
# (/api/v1/nodes/NODE/proxy/..., the kubelet's metrics for a target's pods) refuses loopback addresses.
cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $BRIDGE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
imageServiceEndpoint: unix://$CONTAINERD_SOCK
failSwapOn: false
failCgroupV1: false
clusterDomain: $CLUSTER_DOMAIN
clusterDNS: [$DNS_SVC_IP]
# Pods must not inherit the host's resolvers or search domains.
resolvConf: ""
podLogsDir: $STATE/pod-logs
registerNode: true
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
oomScoreAdj: 0
maxPods: 110
EOF
start_daemon kubelet "$LOGS/kubelet.log" "$BIN/kubelet" --config="$STATE/kubelet/config.yaml" \
  --kubeconfig="$PKI/kubelet.kubeconfig" --hostname-override="$NODE_NAME" --node-ip="$BRIDGE_IP" \
  --root-dir="$STATE/kubelet" --v=1
start_daemon kube-proxy "$LOGS/kube-proxy.log" "$BIN/kube-proxy" --kubeconfig="$PKI/kube-proxy.kubeconfig" \
  --hostname-override="$NODE_NAME" --proxy-mode=iptables --cluster-cidr="$POD_CIDR" \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256 \
  --conntrack-max-per-core=0 --oom-score-adj=0 --iptables-localhost-nodeports=false

node_ready() { kc get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' | grep -qx True; }
wait_for 120 "node $NODE_NAME Ready" node_ready
log "node ready"

# ---------------------------------------------------------------- cluster DNS
sed -e "s|@DNS_SVC_IP@|$DNS_SVC_IP|g" -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|g" -e "s|@CLUSTER_DOMAIN@|$CLUSTER_DOMAIN|g" \
  "$CLUSTER_DIR/manifests/coredns.yaml" | kc apply -f - >/dev/null
kc -n kube-system rollout status deployment/coredns --timeout=180s >&2
log "cluster DNS ready at $DNS_SVC_IP"

trap - ERR
log "cluster up in $(($(date +%s) - T0))s"
cat <<EOF
Stampede test cluster is up (Kubernetes $K8S_VERSION, node $NODE_NAME).
  export KUBECONFIG=$KUBECONFIG_OUT
  export PATH=$BIN:\$PATH     # kubectl $K8S_VERSION and helm $HELM_VERSION
  kubectl get pods -A
Images in the node (no registry, use imagePullPolicy: Never or IfNotPresent): $STAMPEDE_IMAGE $PROBE_IMAGE
Tear down with: tests/cluster/down.sh
EOF
