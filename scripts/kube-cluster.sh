#!/usr/bin/env bash
# A real Kubernetes control plane on localhost for tests and demos: etcd, kube-apiserver and
# kube-controller-manager (Job controller, garbage collector), no kubelet and no scheduler; tests move pod status.
#
#   scripts/kube-cluster.sh install   # Debian packages (golang-1.19, etcd-server) and a build of kube-apiserver and
#                                     # kube-controller-manager 1.20 from Debian's source package (~8 min, cached)
#   scripts/kube-cluster.sh start     # own CA, token auth, RBAC; writes build/kube/kubeconfig; MPIJob and DGD CRDs; 4 nodes
#   scripts/kube-cluster.sh stop
#
# KUBE_AUDIT=1 at start writes every request (verb, resource, user agent) to build/kube/run/audit.log; the benchmark
# counts cloudai's requests there.
#
# Binaries are cached under build/kube/bin (ignored by git); state and logs under build/kube/run.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(dirname "$HERE")"
BASE="$ROOT/build/kube"
BIN="$BASE/bin"
RUN="$BASE/run"
PORT=6443
ETCD_PORT=2379

log() { echo "[kube-cluster] $*"; }

install_packages() {
    if [ -x /usr/lib/go-1.19/bin/go ] && command -v etcd >/dev/null \
        && [ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ]; then
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # reflect2 1.0.2 replaces the vendored copy, which crashes on the first custom resource under Go >= 1.18
    apt-get install -y -qq --no-install-recommends golang-1.19-go etcd-server golang-github-modern-go-reflect2-dev \
        openssl curl >/dev/null
    # Debian's package enables an etcd service; ours runs on its own ports and data dir
    systemctl disable --now etcd >/dev/null 2>&1 || true
}

codename() { . /etc/os-release && echo "$VERSION_CODENAME"; }

# deb-src lines for the archives this machine already uses for its release (one-line and deb822 sources), so the
# source package comes from wherever the machine's apt is pointed (a mirror, a proxy, a snapshot).
deb_src_from_machine() {
    local cn
    cn=$(codename)
    {
        cat /etc/apt/sources.list 2>/dev/null || true
        find /etc/apt/sources.list.d -name '*.list' -exec cat {} + 2>/dev/null || true
    } | awk -v cn="$cn" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i + 1) == cn) print "deb-src " $i " " cn " main" }'
    find /etc/apt/sources.list.d -name '*.sources' -exec cat {} + 2>/dev/null | awk -v cn="$cn" '
        function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " cn " ") && enabled != "no")
            for (u in uris) print "deb-src " uris[u] " " cn " main"; delete uris; types = suites = ""; enabled = "" }
        /^[ \t]*$/ { flush(); next }
        /^Types:/ { types = substr($0, 8) }
        /^URIs:/ { for (j = 2; j <= NF; j++) uris[j] = $j }
        /^Suites:/ { suites = substr($0, 9); gsub(/^ +/, "", suites) }
        /^Enabled:/ { enabled = $2 }
        END { flush() }'
}

build() {
    if [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kube-controller-manager" ]; then
        log "binaries cached in $BIN"
        return
    fi
    local src="$BASE/src" start=$SECONDS
    rm -rf "$src" && mkdir -p "$src/lists/partial"
    deb_src_from_machine >"$src/sources.list"
    [ -s "$src/sources.list" ] || { log "no Debian archive for $(codename) in this machine's apt sources"; exit 1; }
    local apt=(-o Dir::Etc::SourceList="$src/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::State::Lists="$src/lists")
    apt-get "${apt[@]}" update -qq
    (cd "$src" && apt-get "${apt[@]}" source --download-only kubernetes >/dev/null 2>&1)
    tar -C "$src" -xzf "$src"/kubernetes_*.orig.tar.gz
    local tree
    tree=$(find "$src" -maxdepth 1 -type d -name 'kubernetes-*' | head -1)
    rm -rf "$tree/vendor/github.com/modern-go/reflect2"
    cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 "$tree/vendor/github.com/modern-go/reflect2"
    rm -f "$tree/vendor/github.com/modern-go/reflect2/go.mod"
    log "building kube-apiserver and kube-controller-manager (GOPATH mode, offline)"
    (
        cd "$tree"
        export PATH=/usr/lib/go-1.19/bin:$PATH GO111MODULE=off GOPROXY=off GOFLAGS= KUBE_GIT_VERSION=v1.20.2
        # make runs the code generators first (openapi definitions); a bare go build fails without them
        make WHAT=cmd/kube-apiserver >"$BASE/build.log" 2>&1
        make WHAT=cmd/kube-controller-manager >>"$BASE/build.log" 2>&1
    ) || { tail -30 "$BASE/build.log"; exit 1; }
    mkdir -p "$BIN"
    cp "$tree/_output/bin/kube-apiserver" "$tree/_output/bin/kube-controller-manager" "$BIN/"
    rm -rf "$src"
    log "built in $((SECONDS - start)) s"
}

certs() {
    local pki="$RUN/pki"
    mkdir -p "$pki"
    [ -s "$pki/ca.crt" ] && return
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=cloudai-test-ca" \
        -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$pki/apiserver.key" \
        -out "$pki/apiserver.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' >"$pki/ext.cnf"
    openssl x509 -req -in "$pki/apiserver.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 3650 \
        -extfile "$pki/ext.cnf" -out "$pki/apiserver.crt" 2>/dev/null
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
    head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$pki/token"
    printf '%s,admin,admin,system:masters\n' "$(cat "$pki/token")" >"$pki/tokens.csv"
}

kubeconfig() {
    local pki="$RUN/pki"
    cat >"$BASE/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: https://127.0.0.1:$PORT
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
users:
- name: admin
  user:
    token: $(cat "$pki/token")
contexts:
- name: test
  context: {cluster: test, user: admin, namespace: default}
current-context: test
KC
}

api() { # METHOD PATH [BODY-FILE|-] [CONTENT-TYPE]
    curl -sS --cacert "$RUN/pki/ca.crt" -H "Authorization: Bearer $(cat "$RUN/pki/token")" -X "$1" \
        ${3:+--data-binary @"$3"} -H "Content-Type: ${4:-application/json}" "https://127.0.0.1:$PORT$2"
}

wait_for() { # what, command...
    local what=$1; shift
    for _ in $(seq 1 120); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.5
    done
    log "$what did not come up; logs in $RUN"
    tail -20 "$RUN"/*.log >&2 || true
    exit 1
}

start() {
    stop >/dev/null 2>&1 || true
    mkdir -p "$RUN"
    certs
    rm -rf "$RUN/etcd"
    (setsid etcd --data-dir "$RUN/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls http://127.0.0.1:2390 \
        --initial-advertise-peer-urls http://127.0.0.1:2390 --initial-cluster default=http://127.0.0.1:2390 \
        >"$RUN/etcd.log" 2>&1 & echo $! >"$RUN/etcd.pid")
    wait_for etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
    local pki="$RUN/pki" audit=()
    if [ "${KUBE_AUDIT:-0}" = 1 ]; then
        printf 'apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n' >"$RUN/audit-policy.yaml"
        rm -f "$RUN/audit.log"
        audit=(--audit-policy-file="$RUN/audit-policy.yaml" --audit-log-path="$RUN/audit.log")
    fi
    (setsid "$BIN/kube-apiserver" "${audit[@]}" --etcd-servers="http://127.0.0.1:$ETCD_PORT" --bind-address=127.0.0.1 \
        --advertise-address=127.0.0.1 --secure-port=$PORT --tls-cert-file="$pki/apiserver.crt" \
        --tls-private-key-file="$pki/apiserver.key" --token-auth-file="$pki/tokens.csv" \
        --authorization-mode=RBAC --service-account-issuer=https://kubernetes.default.svc \
        --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
        --api-audiences=https://kubernetes.default.svc --service-cluster-ip-range=10.96.0.0/24 \
        --disable-admission-plugins=ServiceAccount --allow-privileged=true --insecure-port=0 \
        --feature-gates=TTLAfterFinished=true \
        >"$RUN/apiserver.log" 2>&1 & echo $! >"$RUN/apiserver.pid")
    wait_for kube-apiserver api GET /readyz
    kubeconfig
    (setsid "$BIN/kube-controller-manager" --kubeconfig="$BASE/kubeconfig" --leader-elect=false \
        --feature-gates=TTLAfterFinished=true \
        --controllers=job,garbagecollector,namespace,serviceaccount,resourcequota --use-service-account-credentials=false \
        --service-account-private-key-file="$pki/sa.key" --root-ca-file="$pki/ca.crt" \
        --bind-address=127.0.0.1 --secure-port=10257 \
        >"$RUN/controller-manager.log" 2>&1 & echo $! >"$RUN/controller-manager.pid")
    # the upstream MPI operator CRD, unedited: its structural schema prunes every field it does not describe
    api POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions \
        "$ROOT/crates/cloudai/tests/data/kubernetes/mpijob-crd-v2beta1.yaml" application/yaml >/dev/null
    # the Dynamo operator's DynamoGraphDeployment CRD, its service fields' schema (tests/data/README.md)
    api POST /apis/apiextensions.k8s.io/v1/customresourcedefinitions \
        "$ROOT/crates/cloudai/tests/data/kubernetes/dgd-crd-v1alpha1-subset.yaml" application/yaml >/dev/null
    for n in node001 node002 node003 node004; do
        printf '{"apiVersion":"v1","kind":"Node","metadata":{"name":"%s","labels":{"kubernetes.io/hostname":"%s"}}}' \
            "$n" "$n" >"$RUN/node.json"
        api POST /api/v1/nodes "$RUN/node.json" >/dev/null
        printf '{"status":{"capacity":{"nvidia.com/gpu":"8","cpu":"64","memory":"512Gi","pods":"110"},"allocatable":{"nvidia.com/gpu":"8","cpu":"64","memory":"512Gi","pods":"110"}}}' >"$RUN/node.json"
        api PATCH "/api/v1/nodes/$n/status" "$RUN/node.json" application/merge-patch+json >/dev/null
    done
    wait_for "the DynamoGraphDeployment CRD" sh -c "curl -sf --cacert '$pki/ca.crt' -H 'Authorization: Bearer $(cat "$pki/token")' https://127.0.0.1:$PORT/apis/nvidia.com/v1alpha1/dynamographdeployments"
    wait_for "the MPIJob CRD" sh -c "api() { :; }; curl -sf --cacert '$pki/ca.crt' -H 'Authorization: Bearer $(cat "$pki/token")' https://127.0.0.1:$PORT/apis/kubeflow.org/v2beta1/mpijobs"
    wait_for "the controller manager" curl -sk -o /dev/null https://127.0.0.1:10257/healthz
    log "up: kubeconfig $BASE/kubeconfig ($("$BIN/kube-apiserver" --version))"
}

stop() {
    for p in controller-manager apiserver etcd; do
        if [ -s "$RUN/$p.pid" ]; then
            kill "$(cat "$RUN/$p.pid")" 2>/dev/null || true
            rm -f "$RUN/$p.pid"
        fi
    done
    sleep 0.5
}

case "${1:-}" in
    install) install_packages; build ;;
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 install|start|stop" >&2; exit 2 ;;
esac
