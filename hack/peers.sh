#!/usr/bin/env bash
# Builds the upstream endpoint picker (Gateway API Inference Extension,
# cmd/epp) from the Go module proxy, once per version, into a cache outside
# the clone. Prints the binary's path. `make bench-peers` runs it beside
# inferpick in the same ext_proc load test.
#
#   hack/peers.sh
#   EPP_VERSION=v1.5.0 hack/peers.sh
set -euo pipefail

EPP_VERSION=${EPP_VERSION:-v1.5.0}
CACHE=${INFERPICK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inferpick}
OUT="$CACHE/peers/epp-$EPP_VERSION"
MOD=sigs.k8s.io/gateway-api-inference-extension

if [[ -x "$OUT" ]]; then
  echo "$OUT"
  exit 0
fi
mkdir -p "$(dirname "$OUT")"
exec 9>"$OUT.lock"
flock 9
if [[ -x "$OUT" ]]; then
  echo "$OUT"
  exit 0
fi
echo "peers: building $MOD/cmd/epp $EPP_VERSION (about 2 minutes, once)" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
cd "$work"
# The proxy serves the release but not the module's version list, which
# `go install pkg@version` reads; a module that requires the release (with
# the release's own requirements, so that it builds as released) does not.
gomod=$(go mod download -json "$MOD@$EPP_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
  printf 'module inferpick.local/peers\n\ngo 1.25.0\n\nrequire %s %s\n\n' "$MOD" "$EPP_VERSION"
  sed -n '/^require/,$p' "$gomod"
} > go.mod
printf '//go:build tools\n\npackage tools\n\nimport _ "%s/cmd/epp"\n' "$MOD" > tools.go
go mod tidy >/dev/null 2>&1 || go mod tidy
go build -trimpath -ldflags "-s -w" -o "$OUT.tmp" "$MOD/cmd/epp"
mv "$OUT.tmp" "$OUT"
echo "peers: $OUT ready" >&2
echo "$OUT"
