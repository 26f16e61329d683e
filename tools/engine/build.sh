#!/usr/bin/env bash
# Build the engine lane's tools from Go modules, pinned by tools/engine/versions.env and the wrapper modules'
# go.mod/go.sum, into build/engine/<key>/bin (key: hash of the versions, wrapper sources and Go version), and print
# that directory. A finished tool is never rebuilt for the same key.
#   tools/engine/build.sh [--check] [TOOL...]     TOOL: pulumi provider kube etcd (default: all four)
#   --check: only verify that the wrapper go.mod files require versions.env's versions
# pulumi builds the CLI and our Python language host (+ pulumi-language-python-exec from sdk/v3's module files).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"

export GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0 GOTOOLCHAIN=local
log() { printf '[engine-build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

check_only=0
tools=()
for a in "$@"; do
  case "$a" in
    --check) check_only=1 ;;
    pulumi|provider|kube|etcd) tools+=("$a") ;;
    *) echo "tools/engine/build.sh: unknown argument '$a' (allowed: --check, pulumi, provider, kube, etcd)" >&2; exit 2 ;;
  esac
done
[ ${#tools[@]} -gt 0 ] || tools=(pulumi provider kube etcd)

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
[ "$check_only" = 1 ] && { log "wrapper modules match versions.env"; exit 0; }

key="$( (cat "$HERE/versions.env" "$HERE/build.sh"; go version;
         find "$HERE" -name go.mod -o -name go.sum -o -name '*.go' | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-12)"
OUT="${ENGINE_BUILD_DIR:-$ROOT/build/engine}/$key/bin"
mkdir -p "$OUT"

# go build with progress: one line per 200 packages compiled (go build -v names each package as it builds it).
gobuild() {  # dir output package ldflags
  local dir="$1" out="$2" pkg="$3" ldflags="$4" start=$SECONDS
  (cd "$HERE/$dir" && go build -v -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg") 2>&1 |
    awk -v name="$(basename "$out")" '/^(go: |#|.*\.go:[0-9]+)/ {print; next} {n++; if (n % 200 == 0) printf "[engine-build] %s: %d packages compiled\n", name, n > "/dev/stderr"}'
  [ "${PIPESTATUS[0]}" = 0 ] || { log "FAILED: $(basename "$out")"; rm -f "$out.tmp"; exit 1; }
  mv "$out.tmp" "$out"
  log "built $(basename "$out") in $((SECONDS - start))s"
  echo "$(basename "$out") $((SECONDS - start))s" >> "$OUT/../build-times.txt"
}

for t in "${tools[@]}"; do
  case "$t" in
  pulumi)
    if [ ! -x "$OUT/pulumi" ]; then
      log "Pulumi CLI $PULUMI_VERSION (github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)"
      gobuild pulumi "$OUT/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi \
        "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
    fi
    if [ ! -x "$OUT/pulumi-language-python" ]; then
      log "Python language host (tools/engine/pulumi/cmd/pulumi-language-python on sdk/v3 $PULUMI_VERSION)"
      gobuild pulumi "$OUT/pulumi-language-python" ./cmd/pulumi-language-python \
        "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
      sdkdir="$(cd "$HERE/pulumi" && go mod download github.com/pulumi/pulumi/sdk/v3 &&
                go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)"
      [ -n "$sdkdir" ] || { log "FAILED: no module directory for pulumi/sdk/v3"; exit 1; }
      install -m 0755 "$sdkdir/python/cmd/pulumi-language-python-exec" "$OUT/pulumi-language-python-exec"
    fi ;;
  provider)
    if [ ! -x "$OUT/pulumi-resource-kubernetes" ]; then
      log "Kubernetes provider $K8S_PROVIDER_VERSION ($K8S_PROVIDER_MODULE_VERSION)"
      # go list -m prints no Dir for a module not yet in the module cache (a cold machine): download it first.
      moddir="$(cd "$HERE/provider-kubernetes" && go mod download github.com/pulumi/pulumi-kubernetes/provider/v4 &&
                go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)"
      [ -n "$moddir" ] || { log "FAILED: no module directory for pulumi-kubernetes/provider/v4"; exit 1; }
      (cd "$HERE/provider-kubernetes" && go run ./cmd/gen-embed "$moddir" cmd/pulumi-resource-kubernetes "$K8S_PROVIDER_VERSION")
      gobuild provider-kubernetes "$OUT/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes \
        "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$K8S_PROVIDER_VERSION"
    fi ;;
  kube)
    # pulumi-kubernetes refuses a server that reports v0.0: the version must come from ldflags.
    kv="-X k8s.io/component-base/version.gitVersion=$KUBERNETES_VERSION"
    major="${KUBERNETES_VERSION#v}"; minor="${major#*.}"; major="${major%%.*}"; minor="${minor%%.*}"
    kv="$kv -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=$minor"
    kv="$kv -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
    for cmd in kube-apiserver kube-controller-manager; do
      if [ ! -x "$OUT/$cmd" ]; then
        log "$cmd $KUBERNETES_VERSION (k8s.io/kubernetes/cmd/$cmd)"
        gobuild kube "$OUT/$cmd" "k8s.io/kubernetes/cmd/$cmd" "$kv"
      fi
    done ;;
  etcd)
    if [ ! -x "$OUT/etcd" ]; then
      log "etcd $ETCD_VERSION (go.etcd.io/etcd/server/v3)"
      gobuild etcd "$OUT/etcd" go.etcd.io/etcd/server/v3 ""
    fi ;;
  esac
done
echo "$OUT"
