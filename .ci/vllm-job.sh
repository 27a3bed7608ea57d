#!/usr/bin/env bash
# CI step: install vLLM 0.33.0 (CPU, --no-deps) into its own virtual environment and run against it
#   1. the v0.33 era of the config matrix (`--hma-target vllm`),
#   2. the allocator suite's scenarios on vLLM's own KVCacheManager/BlockPool (`--kv-allocator vllm`),
#   3. once, the allocator throughput benchmarks, reference and vLLM side by side, timed (no xdist) with
#      one round per workload: the results file carries both figures, so the report shows the ratio,
#   4. the connector suite against vLLM's own connectors (`--kv-connector vllm:Name`),
#   5. vLLM's own tests/v1/core allocator tests, on vLLM and then on the reference through the import
#      mapping (the sdist is downloaded from PyPI at run time; scripts/upstream-vllm-tests.sh). The step
#      fails when the reference passes a smaller share of the vLLM-passing tests than the recorded floor.
# Downloads are cached under .cache/ (pip cache and the vLLM wheel), so a second run on the same machine
# skips them; an installed venv is reused as is. Results, JUnit files and the throughput report go to
# .cache/ci-vllm/ (KVCONFORM_CI_VLLM_OUT), outside the committed reports/.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=${KVCONFORM_CI_VLLM_VERSION:-0.33.0}
VENV=${KVCONFORM_CI_VLLM_VENV:-.cache/venvs/vllm-$VLLM_VERSION}
OUT=${KVCONFORM_CI_VLLM_OUT:-.cache/ci-vllm}
PYTEST=("$VENV/bin/python" -m pytest -q -p no:cacheprovider)
start=$(date +%s)

echo "ci-vllm: installing vLLM $VLLM_VERSION into $VENV"
scripts/install-vllm.sh "$VLLM_VERSION" "$VENV"
installed=$(date +%s)
mkdir -p "$OUT"

echo "ci-vllm: [1/5] config matrix, era v0.33, target vllm"
"${PYTEST[@]}" suites/config -n 2 --vllm-version v0.33 --hma-target vllm \
    --kvconform-results "$OUT/results-config-vllm-$VLLM_VERSION.json" \
    --junitxml "$OUT/junit-config-vllm-$VLLM_VERSION.xml"
matrix=$(date +%s)

echo "ci-vllm: [2/5] allocator suite on vLLM $VLLM_VERSION's own allocator"
"${PYTEST[@]}" suites/allocator -n 2 --kv-allocator vllm \
    --kvconform-results "$OUT/results-allocator-vllm-$VLLM_VERSION.json" \
    --junitxml "$OUT/junit-allocator-vllm-$VLLM_VERSION.xml"
allocator=$(date +%s)

echo "ci-vllm: [3/5] allocator throughput, reference vs vLLM $VLLM_VERSION (timed once, no xdist)"
KVCONFORM_BENCHMARK_MAX_ROUNDS=1 "${PYTEST[@]}" suites/benchmarks/test_allocator_throughput.py suites/benchmarks/test_block_pool_throughput.py -p no:xdist \
    --kvconform-results "$OUT/results-benchmarks-vllm-$VLLM_VERSION.json" \
    --junitxml "$OUT/junit-benchmarks-vllm-$VLLM_VERSION.xml"
# The throughput table (figures and ratio vs vLLM) rendered from the results file, into the log too.
"$VENV/bin/kvconform" report --from "$OUT/results-benchmarks-vllm-$VLLM_VERSION.json" --output-dir "$OUT"
awk '/^## Throughput/{on=1} on && /^## / && !/^## Throughput/{exit} on' "$OUT/compatibility.md"
benchmarks=$(date +%s)

# The connector suite against every connector this vLLM registers (`--kv-connector vllm:Name`, one line
# each from harness.targets.vllm_connector), plus a MultiConnector over the CPU-capable ones. Connectors
# that need a package or a GPU skip with the reason. vLLM's connectors failing checks is a finding for
# the report ("vLLM X's connectors", mergeable with `kvconform merge`), not a broken job: only pytest
# exit codes other than 0/1 fail the step.
echo "ci-vllm: [4/5] connector suite on vLLM $VLLM_VERSION's own connectors"
# (vLLM logs to stdout on import: keep only the argument lines.)
mapfile -t vllm_connectors < <(PYTHONPATH=. "$VENV/bin/python" -m harness.targets.vllm_connector | grep -x -e "--kv-connector=vllm:.*")
if [ "${#vllm_connectors[@]}" -eq 0 ]; then
    echo "ci-vllm: harness.targets.vllm_connector listed no connector (is vLLM $VLLM_VERSION usable in $VENV?)" >&2
    exit 4
fi
connectors_status=0
"${PYTEST[@]}" suites/connector -n 2 -W ignore::DeprecationWarning "${vllm_connectors[@]}" \
    --kvconform-results "$OUT/results-connectors-vllm-$VLLM_VERSION.json" \
    --junitxml "$OUT/junit-connectors-vllm-$VLLM_VERSION.xml" || connectors_status=$?
if [ "$connectors_status" -gt 1 ]; then
    echo "ci-vllm: the connector suite stopped with pytest exit status $connectors_status" >&2
    exit "$connectors_status"
fi
connectors=$(date +%s)

echo "ci-vllm: [5/5] vLLM $VLLM_VERSION's own tests/v1/core allocator tests, on vLLM and on the reference"
# The floor is issue 10's target, 95% (docs/reference.md, "vLLM's own allocator tests": measured 587/596 = 98.5%).
scripts/upstream-vllm-tests.sh "$VENV" "$OUT/upstream" --min-pass-rate "${KVCONFORM_UPSTREAM_MIN_PASS_RATE:-0.95}"
end=$(date +%s)
echo "ci-vllm: install $((installed - start))s, matrix $((matrix - installed))s," \
     "allocator $((allocator - matrix))s, benchmarks $((benchmarks - allocator))s," \
     "connectors $((connectors - benchmarks))s, upstream $((end - connectors))s, total $((end - start))s"
