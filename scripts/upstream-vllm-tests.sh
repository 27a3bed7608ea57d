#!/usr/bin/env bash
# vLLM's own allocator tests (tests/v1/core: prefix caching, single-type managers, kv_cache_utils, partial
# prefix-cache primitives and hits), run first on vLLM itself and then on kvconform's reference allocator
# through an import mapping (vllm.v1.core.* and vllm.v1.kv_cache_interface -> reference_impl.kv_cache).
#
#   scripts/upstream-vllm-tests.sh [VENV] [OUT_DIR] [extra args for harness.upstream.vllm_core_tests]
#
# The release: KVCONFORM_CI_VLLM_VERSION, else the release registry's newest release with an upstream floor
# (`python3 reference_impl/releases.py upstream-default`).
# VENV: a venv with vLLM installed (scripts/install-vllm.sh; default: the release's, .cache/venvs/vllm-VERSION). The vLLM
# source distribution is downloaded from PyPI at run time into OUT_DIR (default .cache/upstream); no vLLM
# code is committed. Prints one summary line; per-test outcomes go to OUT_DIR/upstream-vllm-VERSION.json.
set -euo pipefail
cd "$(dirname "$0")/.."

registry() { "${PYTHON:-python3}" reference_impl/releases.py "$@"; }  # standard library only: any Python 3.11
VLLM_VERSION=${KVCONFORM_CI_VLLM_VERSION:-$(registry upstream-default)}
VENV=${1:-$(registry venv "$VLLM_VERSION")}
OUT=${2:-.cache/upstream}
shift $(( $# > 2 ? 2 : $# ))
[[ -x "$VENV/bin/python" ]] || { echo "upstream: no Python in $VENV (run scripts/install-vllm.sh $VLLM_VERSION $VENV)" >&2; exit 2; }
# Absolute paths: the runner starts pytest inside the extracted sdist, where relative ones would not resolve.
VENV=$(cd "$VENV" && pwd)
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)

# The runner is kvconform code; it drives the vLLM venv's Python for both runs.
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$VENV/bin/python" -m harness.upstream.vllm_core_tests \
    --vllm-python "$VENV/bin/python" --vllm-version "$VLLM_VERSION" --work "$OUT" \
    --workers "${KVCONFORM_UPSTREAM_WORKERS:-2}" "$@"
