#!/usr/bin/env bash
# Runs every Go fuzz target of the given packages for a bounded time each.
#
#   hack/fuzz.sh 10s                          every target, 10 s each
#   hack/fuzz.sh 5m ./picker/openai/...       only these packages
#
# Targets are found with `go test -list 'Fuzz.*'`, so a new FuzzXxx joins
# without editing this script. New failing inputs land in the package's
# testdata/fuzz/<Target>/ as Go writes them; commit them with the fix.
set -euo pipefail

FUZZTIME=${1:-10s}
shift || true
PKGS=("$@")
if [[ ${#PKGS[@]} -eq 0 ]]; then
  PKGS=(./picker/... ./cmd/vllm-sim/... ./test/gateway/...)
fi
export GOTOOLCHAIN=local

targets=()
for pkg in $(go list "${PKGS[@]}"); do
  for t in $(go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
    targets+=("$pkg $t")
  done
done
echo "fuzz: ${#targets[@]} targets, $FUZZTIME each" >&2

failed=()
for entry in "${targets[@]}"; do
  read -r pkg t <<<"$entry"
  echo "fuzz: $pkg $t" >&2
  if ! go test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" "$pkg"; then
    failed+=("$pkg $t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
