#!/usr/bin/env bash
# Build the engine lane's tools from Go modules, pinned by tools/engine/versions.env and the wrapper modules'
# go.mod/go.sum, into build/engine/<key>/bin (key: hash of the versions, wrapper sources and Go version), and print
# that directory (the only line on stdout; progress goes to stderr). A finished tool is never rebuilt for the same key.
#   tools/engine/build.sh [--check] [TOOL...]   TOOL: pulumi provider kube etcd monitoring-crds (default: all five)
#   --check: only verify that the wrapper go.mod files require versions.env's versions
#   --disk-needed: print the GiB of free disk a cold build of all tools needs here (ENGINE_TRIM_CACHES as set)
# pulumi: the CLI and our Python language host in one `go build` (shared packages compile once), plus
# pulumi-language-python-exec from sdk/v3's module files; kube: kube-apiserver and kube-controller-manager in one
# `go build`; monitoring-crds: the Prometheus Operator CRDs from that module's files into build/engine/<key>/crds.
# Module builds run ENGINE_BUILD_JOBS at a time (default 2): module downloads and single-threaded link steps of
# one overlap the compile of another. Go caches: the usual GOMODCACHE/GOCACHE (.ci/run puts them under build/go).
# ENGINE_TRIM_CACHES=1 (.ci/run, whose disk is whatever the CI machine has free): each tool compiles in its own build
# cache, removed once the tool is built (the binaries are kept, so that cache is never read again), and `go build`'s
# work directory, which holds a second copy of every object until the build ends, goes to RAM (/dev/shm) when it has
# room. Untrimmed, a cold build of all five peaks at ~20 GB of disk (8.6 GB build cache, 2.7 GB modules, ~5 GB work).
# Each tool's full `go build` output goes to build/engine/<key>/logs/<tool>.log; stderr gets progress, compiler
# errors and, on a failure, the log's last lines.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"

# -modcacherw: a module cache under build/ stays removable by `make clean` (Go makes it read-only otherwise).
export GOFLAGS="-mod=readonly -buildvcs=false -modcacherw" CGO_ENABLED=0 GOTOOLCHAIN=local
log() { printf '[engine-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
gib() { awk -v k="$1" 'BEGIN {printf "%.1f GiB", k / 1048576}'; }  # KiB -> GiB
# What a cold build needs and has: CI machines differ in disk, and a full disk fails deep inside `go build`.
footprint() {  # label
  local cache mod free mem
  cache="$(du -sk "$(go env GOCACHE)" 2>/dev/null | cut -f1)" || true  # absent before the first build
  mod="$(du -sk "$(go env GOMODCACHE)" 2>/dev/null | cut -f1)" || true
  free="$(df -Pk "$KEYDIR" | awk 'NR == 2 {print $4}')"; mem="$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)"
  log "$1: build cache $(gib "${cache:-0}"), module cache $(gib "${mod:-0}"), disk free $(gib "$free"), memory available $(gib "$mem")"
}

ALL_TOOLS=(provider kube pulumi etcd monitoring-crds)  # longest first: they start first
check_only=0
tools=()
for a in "$@"; do
  case "$a" in
    --check) check_only=1 ;;
    --disk-needed) disk_needed=1 ;;
    pulumi|provider|kube|etcd|monitoring-crds) tools+=("$a") ;;
    *) echo "tools/engine/build.sh: unknown argument '$a' (allowed: --check, --disk-needed, ${ALL_TOOLS[*]})" >&2; exit 2 ;;
  esac
done
[ ${#tools[@]} -gt 0 ] || tools=("${ALL_TOOLS[@]}")

# Peak disk of a cold build of all five tools (bench/README.md, measured 2026-11-30): 18.7 GB untrimmed; trimmed,
# 7.3 GB with go's work directories in RAM and ~4.7 GB more where they stay on disk.
shm_has_room() { [ -z "${GOTMPDIR:-}" ] && [ -d /dev/shm ] &&
  [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -ge $((${ENGINE_SHM_MIN_GIB:-8} * 1048576)) ]; }
if [ "${disk_needed:-0}" = 1 ]; then
  if [ "${ENGINE_TRIM_CACHES:-0}" != 1 ]; then echo 20; elif shm_has_room; then echo 8; else echo 13; fi
  exit 0
fi

command -v go >/dev/null || { echo "tools/engine/build.sh: the go command is not on PATH (Go >= 1.26 is needed)" >&2; exit 2; }

# The wrapper go.mod files must require exactly what versions.env says (go.sum then pins the hashes).
require() {  # dir module version
  local got
  got="$(cd "$HERE/$1" && go list -m -f '{{.Version}}' "$2")"
  if [ "$got" != "$3" ]; then
    echo "tools/engine/$1/go.mod requires $2 $got, but versions.env says $3: update one of them" >&2; exit 1
  fi
}
require pulumi github.com/pulumi/pulumi/pkg/v3 "$PULUMI_VERSION"
require pulumi github.com/pulumi/pulumi/sdk/v3 "$PULUMI_VERSION"
require provider-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4 "$K8S_PROVIDER_MODULE_VERSION"
require kube k8s.io/kubernetes "$KUBERNETES_VERSION"
require etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
require prometheus-operator github.com/prometheus-operator/prometheus-operator "$PROMETHEUS_OPERATOR_VERSION"
[ "$check_only" = 1 ] && { log "wrapper modules match versions.env"; exit 0; }

key="$( (cat "$HERE/versions.env" "$HERE/build.sh"; go version;
         find "$HERE" -name go.mod -o -name go.sum -o -name '*.go' | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-12)"
KEYDIR="${ENGINE_BUILD_DIR:-$ROOT/build/engine}/$key"
OUT="$KEYDIR/bin"
mkdir -p "$OUT" "$KEYDIR/logs"

# A module's directory in the module cache, downloaded (verified against the wrapper's go.sum) if absent:
# `go list -m` alone prints an empty Dir for a module not downloaded yet.
moddir() {  # wrapper-dir module
  local dir
  dir="$(cd "$HERE/$1" && go mod download "$2" && go list -m -f '{{.Dir}}' "$2")"
  [ -n "$dir" ] && [ -d "$dir" ] || { log "FAILED: no module directory for $2 (tools/engine/$1)"; return 1; }
  echo "$dir"
}

# go build with progress on stderr: one line per 200 packages compiled (go build -v names each package it compiles);
# module downloads are counted, compiler errors shown, everything kept in the tool's log.
# Several main packages build in one `go build` (each binary named after its package's directory); BIN names the
# binary of a single package whose directory name is not the tool's (etcd's main package is server/v3).
# -dwarf=false: the binaries are stripped (-s -w) anyway; objects without DWARF make the build cache ~22% smaller.
gobuild() {  # name dir ldflags BIN|- package...
  local name="$1" dir="$2" ldflags="$3" bin="$4" start=$SECONDS tmp="$OUT/.tmp-$1" logf="$KEYDIR/logs/$1.log" attempt
  shift 4
  local out_arg="$tmp/$bin" seen
  [ "$bin" != - ] || out_arg="$tmp/"
  for attempt in 1 2; do
    rm -rf "$tmp" && mkdir -p "$tmp"
    seen=0; [ ! -f "$logf" ] || seen="$(wc -l < "$logf")"
    if (cd "$HERE/$dir" && go build -v -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w $ldflags" \
            -o "$out_arg" "$@") 2>&1 | tee -a "$logf" |
      awk -v name="$name" '/^go: downloading / {d++; next}
        /^(go: |#|.*\.go:[0-9]+)/ {print name ": " $0 > "/dev/stderr"; next}
        {n++; if (n % 200 == 0) printf "[engine-build] %s: %d packages compiled\n", name, n > "/dev/stderr"}
        END {if (d) printf "[engine-build] %s: %d modules downloaded\n", name, d > "/dev/stderr"}'; then
      break
    fi
    # One retry, only for a module download that the network broke (the proxy's 5xx, a reset, a timeout).
    if [ "$attempt" = 1 ] && tail -n +"$((seen + 1))" "$logf" |
       grep -qE '^go: .*(dial tcp|i/o timeout|connection reset|TLS handshake timeout|unexpected EOF|: 50[234] )'; then
      log "$name: a module download failed on the network; trying once more"; continue
    fi
    log "FAILED: $name; the last lines of $logf:"; tail -n 25 "$logf" | sed "s/^/  $name| /" >&2
    rm -rf "$tmp"; return 1
  done
  local built
  built="$(ls "$tmp" | tr '\n' ' ')"
  mv "$tmp"/* "$OUT/" && rmdir "$tmp"
  log "built $name (${built% }) in $((SECONDS - start))s"
  echo "$name $((SECONDS - start))s" >> "$KEYDIR/build-times.txt"
}

# What each tool leaves in $OUT: a tool whose files are all there is not built again.
products() {  # tool
  case "$1" in
    pulumi) echo pulumi pulumi-language-python pulumi-language-python-exec ;;
    provider) echo pulumi-resource-kubernetes ;;
    kube) echo kube-apiserver kube-controller-manager ;;
    etcd) echo etcd ;;
    monitoring-crds) echo ../crds/monitoring.coreos.com ;;
  esac
}
ready() {  # tool
  local f
  for f in $(products "$1"); do [ -e "$OUT/$f" ] || return 1; done
  [ "$1" != monitoring-crds ] || compgen -G "$OUT/../crds/monitoring.coreos.com/*.yaml" >/dev/null
}

build_pulumi() {
  ready pulumi && return
  log "Pulumi CLI $PULUMI_VERSION (github.com/pulumi/pulumi/pkg/v3/cmd/pulumi) + Python language host (tools/engine/pulumi/cmd/pulumi-language-python)"
  gobuild pulumi pulumi "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" - \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi ./cmd/pulumi-language-python
  local sdkdir
  sdkdir="$(moddir pulumi github.com/pulumi/pulumi/sdk/v3)"
  install -m 0755 "$sdkdir/python/cmd/pulumi-language-python-exec" "$OUT/pulumi-language-python-exec"
}

build_provider() {
  ready provider && return
  log "Kubernetes provider $K8S_PROVIDER_VERSION ($K8S_PROVIDER_MODULE_VERSION)"
  local dir
  dir="$(moddir provider-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4)"
  (cd "$HERE/provider-kubernetes" && go run ./cmd/gen-embed "$dir" cmd/pulumi-resource-kubernetes "$K8S_PROVIDER_VERSION")
  gobuild provider provider-kubernetes \
    "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$K8S_PROVIDER_VERSION" - \
    ./cmd/pulumi-resource-kubernetes
}

build_kube() {
  ready kube && return
  # pulumi-kubernetes refuses a server that reports v0.0: the version must come from ldflags.
  local kv major minor
  kv="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
  major="${KUBERNETES_VERSION#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
  kv="$kv -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
  kv="$kv -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
  log "kube-apiserver + kube-controller-manager $KUBERNETES_VERSION (k8s.io/kubernetes/cmd/...)"
  gobuild kube kube "$kv" - k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager
}

build_etcd() {
  ready etcd && return
  log "etcd $ETCD_VERSION (go.etcd.io/etcd/server/v3)"
  gobuild etcd etcd "" etcd go.etcd.io/etcd/server/v3
}

build_monitoring-crds() {
  local crds="$KEYDIR/crds/monitoring.coreos.com"
  ready monitoring-crds && return
  log "Prometheus Operator CRDs $PROMETHEUS_OPERATOR_VERSION (github.com/prometheus-operator/prometheus-operator, example/prometheus-operator-crd)"
  local dir
  dir="$(moddir prometheus-operator github.com/prometheus-operator/prometheus-operator)"
  mkdir -p "$crds.tmp"
  cp "$dir"/example/prometheus-operator-crd/monitoring.coreos.com_*.yaml "$crds.tmp/"
  chmod 0644 "$crds.tmp"/*.yaml
  mv "$crds.tmp" "$crds"
  log "Prometheus Operator CRDs: $(ls "$crds" | wc -l) files in $crds"
}

# Every build started here ends with this script (failure, Ctrl-C, timeout): its whole process tree, the RAM work
# directory and, when trimming, the per-tool build caches.
shm_work=""
trim="${ENGINE_TRIM_CACHES:-0}"
base_cache=""
descendants() {  # pid: every process below it, deepest first
  local c
  for c in $(ps -eo pid=,ppid= | awk -v p="$1" '$2 == p {print $1}'); do descendants "$c"; echo "$c"; done
}
cleanup() {
  trap - EXIT INT TERM
  local pids; pids="$(descendants $$)"
  [ -z "$pids" ] || { kill $pids 2>/dev/null || true; sleep 0.2; kill -9 $pids 2>/dev/null || true; }
  [ -z "$shm_work" ] || rm -rf "$shm_work"
  if [ "$trim" = 1 ] && [ -n "$base_cache" ]; then rm -rf "$base_cache"-engine-*; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
jobs_max="${ENGINE_BUILD_JOBS:-2}"
start=$SECONDS
todo=()
for t in "${tools[@]}"; do ready "$t" || todo+=("$t"); done
if [ ${#todo[@]} -gt 0 ]; then
  base_cache="$(go env GOCACHE)"
  if [ "$trim" = 1 ] && shm_has_room; then
    shm_work="$(mktemp -d /dev/shm/kimi-k3-go-work.XXXXXX)"; export GOTMPDIR="$shm_work"
    log "go build work directories in RAM: $GOTMPDIR"
  fi
  footprint "before building ${todo[*]}"
  for t in "${todo[@]}"; do
    while [ "$(jobs -pr | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
    if [ "$trim" = 1 ]; then
      # set -e holds inside build_$t (a `||` here would switch it off); the EXIT trap reports and trims either way.
      ( export GOCACHE="$base_cache-engine-$t"; trap 'footprint "after $t" || true; rm -rf "$GOCACHE"' EXIT
        "build_$t" ) &
    else
      ( "build_$t" ) &
    fi
  done
  wait || true
fi
failed=()
for t in "${tools[@]}"; do ready "$t" || failed+=("$t"); done
[ ${#failed[@]} -eq 0 ] || { log "FAILED: ${failed[*]} (see the lines above)"; exit 1; }
[ $((SECONDS - start)) -lt 2 ] || log "tools ready in $((SECONDS - start))s: $OUT"
echo "$OUT"
