#!/usr/bin/env bash
# Builds the control-plane binaries the tests and the demo run against
# (etcd, kube-apiserver, kubectl) from the Go module proxy, once per version,
# into a cache outside the clone. Prints the directory that holds them.
#
#   hack/controlplane.sh            build what is missing, print the directory
#   hack/controlplane.sh cluster    also kube-controller-manager, kube-scheduler
#                                   and kwok (fake kubelets), for the rollout test
#   K8S_VERSION=1.36.3 ETCD_VERSION=3.6.16 KWOK_VERSION=0.8.0 hack/controlplane.sh
#
# The directory is usable as KUBEBUILDER_ASSETS for envtest.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
CACHE=${INFERPICK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferpick}
OUT="$CACHE/k8s-$K8S_VERSION"
BINARIES=(etcd kube-apiserver kubectl)
case "${1:-}" in
  "") ;;
  cluster) BINARIES+=(kube-controller-manager kube-scheduler kwok) ;;
  *) echo "usage: $0 [cluster]" >&2; exit 2 ;;
esac

say() { echo "controlplane: $*" >&2; }

# quiet runs a command, showing its output only when it fails.
quiet() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    say "failed: $*"
    return 1
  fi
  rm -f "$log"
}

missing=()
for b in "${BINARIES[@]}"; do
  [[ -x "$OUT/$b" ]] || missing+=("$b")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$OUT"
  exit 0
fi

mkdir -p "$OUT"
# One build at a time: a second caller waits for the first, then finds the
# binaries present.
exec 9>"$OUT/.lock"
if ! flock -n 9; then
  say "another build is running; waiting for it"
  flock 9
fi
missing=()
for b in "${BINARIES[@]}"; do
  [[ -x "$OUT/$b" ]] || missing+=("$b")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$OUT"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0

build_etcd() {
  say "building etcd v$ETCD_VERSION (about 2 minutes, once)"
  mkdir -p "$work/etcd" && cd "$work/etcd"
  go mod init inferpick.local/etcd >/dev/null 2>&1
  quiet go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  go build -trimpath -o "$OUT/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$OUT/etcd.tmp" "$OUT/etcd"
  say "etcd ready"
}

build_kube() {
  local pkgs=() b
  for b in "$@"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  say "building $* v$K8S_VERSION (4 to 8 minutes, once)"
  mkdir -p "$work/kube" && cd "$work/kube"
  go mod init inferpick.local/kube >/dev/null 2>&1
  local gomod
  gomod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  # k8s.io/kubernetes requires its staging modules at v0.0.0; point each at
  # the published version that matches the release.
  local minor=${K8S_VERSION#*.}
  while read -r mod; do
    echo "replace $mod v0.0.0 => $mod v0.$minor" >> go.mod
  done < <(awk '$2 == "v0.0.0" && $1 ~ /^k8s.io\// {print $1}' "$gomod" | sort -u)
  quiet go get "k8s.io/kubernetes@v$K8S_VERSION"
  for b in "${pkgs[@]}"; do quiet go get -tool "$b@v$K8S_VERSION"; done
  local major=${K8S_VERSION%%.*} kminor=${minor%%.*}
  local ld=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$kminor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  local tmp="$work/kube/bin"
  mkdir -p "$tmp"
  go build -trimpath -ldflags "-s -w$ld" -o "$tmp/" "${pkgs[@]}"
  # Into the cache under a temporary name, then renamed: a move across
  # file systems is a copy, and one cut short must not leave an executable
  # that the next run takes as built.
  for b in "$@"; do mv "$tmp/$b" "$OUT/$b.tmp" && mv "$OUT/$b.tmp" "$OUT/$b"; done
  say "$* ready"
}

# kwok is its own module with its own Kubernetes libraries: go install
# builds it as released.
build_kwok() {
  say "building kwok v$KWOK_VERSION (about 3 minutes, once)"
  mkdir -p "$work/kwok"
  GOBIN="$work/kwok" quiet go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  mv "$work/kwok/kwok" "$OUT/kwok.tmp" && mv "$OUT/kwok.tmp" "$OUT/kwok"
  say "kwok ready"
}

kube=()
for b in "${missing[@]}"; do
  case "$b" in
    etcd) (build_etcd) ;;
    kwok) (build_kwok) ;;
    *) kube+=("$b") ;;
  esac
done
if [[ ${#kube[@]} -gt 0 ]]; then (build_kube "${kube[@]}"); fi
echo "$OUT"
