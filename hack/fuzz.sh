#!/usr/bin/env bash
# Runs every Go fuzz target of the given packages for a bounded time each.
#
#   hack/fuzz.sh 10s                          every target, 10 s each
#   hack/fuzz.sh 5m ./picker/openai/...       only these packages
#
# Targets are found with `go test -list 'Fuzz.*'`, so a new FuzzXxx joins
# without editing this script. New failing inputs land in the package's
# testdata/fuzz/<Target>/ as Go writes them; commit them with the fix.
set -uo pipefail

FUZZTIME=${1:-10s}
shift || true
PKGS=("$@")
if [[ ${#PKGS[@]} -eq 0 ]]; then
  PKGS=(./picker/... ./cmd/inferpick/... ./cmd/vllm-sim/... ./test/gateway/... ./test/framework/... ./hack/migrate-values/...)
fi
export GOTOOLCHAIN=local

# A package that does not list its tests (one that does not build) fails
# the run: its targets would be skipped and the run pass.
targets=()
pkgs=$(go list "${PKGS[@]}") || { echo "fuzz: go list failed" >&2; exit 1; }
for pkg in $pkgs; do
  if ! listed=$(go test -list '^Fuzz' "$pkg"); then
    echo "fuzz: cannot list the tests of $pkg" >&2
    exit 1
  fi
  for t in $(grep '^Fuzz' <<<"$listed" || true); do
    targets+=("$pkg $t")
  done
done
if ((${#targets[@]} == 0)); then
  echo "fuzz: no fuzz target in ${PKGS[*]}" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, $FUZZTIME each" >&2

# fuzz runs one target. The go command can end a run that found nothing with
# "context deadline exceeded" when the time runs out while a worker is busy
# (a known fuzzing-engine race, worse on a loaded machine); such a run wrote
# no failing input, so it is run again, up to three runs in all. A real failure writes its input
# under testdata/fuzz and is reported as it is.
fuzz() {
  local pkg=$1 t=$2 log
  log=$(mktemp)
  # Minimization is bounded short: a stateful target (FuzzExchange) runs
  # goroutines whose coverage differs between runs of the same input, and the
  # engine would spend its whole minimization time on each such input. A
  # failing input is written whether or not it was minimized.
  local args=(test -run '^$' -fuzz "^${t}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime 2s "$pkg")
  if go "${args[@]}" 2>&1 | tee "$log"; then
    rm -f "$log"
    return 0
  fi
  local attempt
  for attempt in 2 3; do
    if ! grep -q 'context deadline exceeded' "$log" || grep -q 'Failing input written to' "$log"; then
      break
    fi
    echo "fuzz: $pkg $t ended on the engine's deadline race without an input; run $attempt" >&2
    if go "${args[@]}" 2>&1 | tee "$log"; then
      rm -f "$log"
      return 0
    fi
  done
  rm -f "$log"
  return 1
}

failed=()
for entry in "${targets[@]}"; do
  read -r pkg t <<<"$entry"
  echo "fuzz: $pkg $t" >&2
  if ! fuzz "$pkg" "$t"; then
    failed+=("$pkg $t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
