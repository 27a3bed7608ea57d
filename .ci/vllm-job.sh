#!/usr/bin/env bash
# CI step: install vLLM 0.33.0 (CPU, --no-deps) into its own virtual environment and run the v0.33 era of
# the config matrix against it (`--hma-target vllm`). Downloads are cached under .cache/ (pip cache and
# the vLLM wheel), so a second run on the same machine skips them; an installed venv is reused as is.
set -euo pipefail
cd "$(dirname "$0")/.."

VLLM_VERSION=${KVCONFORM_CI_VLLM_VERSION:-0.33.0}
VENV=${KVCONFORM_CI_VLLM_VENV:-.cache/venvs/vllm-$VLLM_VERSION}
start=$(date +%s)

echo "ci-vllm: installing vLLM $VLLM_VERSION into $VENV"
scripts/install-vllm.sh "$VLLM_VERSION" "$VENV"
installed=$(date +%s)

mkdir -p reports
echo "ci-vllm: config matrix, era v0.33, target vllm"
"$VENV/bin/python" -m pytest suites/config -q -p no:cacheprovider -n 2 \
    --vllm-version v0.33 --hma-target vllm \
    --kvconform-results reports/results-vllm-$VLLM_VERSION.json \
    --junitxml reports/junit-vllm-$VLLM_VERSION.xml
end=$(date +%s)
echo "ci-vllm: install $((installed - start))s, matrix $((end - installed))s, total $((end - start))s"
