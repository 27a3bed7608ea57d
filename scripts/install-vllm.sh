#!/usr/bin/env bash
# Install one vLLM release on a CPU-only machine, for running kvconform against it.
#
#   scripts/install-vllm.sh VERSION [VENV_DIR]
#
# Creates VENV_DIR (default: .cache/venvs/vllm-VERSION), installs torch==2.13.0 (the CPU build),
# the vLLM wheel with --no-deps (its own pins would pull the CUDA stack), the light dependencies
# that vLLM's config and v1/core modules import (pinned as observed working, see
# scripts/vllm-light-deps/), and kvconform itself (editable, --no-deps) with its test tools.
# Every release gets the same CPU torch 2.13.0, whatever its wheel pins: each wheel asks for one exact torch
# (0.13.0: 2.9.0, 0.20.0-0.24.0: 2.11.0, 0.29.0: 2.13.0, 0.33.0 and 0.34.0: 2.14.0; a CUDA build from PyPI),
# but the modules kvconform runs (vllm.config, v1/core, the KV connectors, the scheduler) import and run on
# 2.13.0's CPU build: the install check below proves the imports, and the CI job's steps run on it.
# Idempotent: a finished venv carries a stamp and is left alone on the next call.
# Downloads are cached under .cache/ (pip cache and the vLLM wheels) so CI can reuse them.
set -euo pipefail

usage() { echo "usage: scripts/install-vllm.sh VERSION [VENV_DIR]   (VERSION like 0.33.0)" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
VERSION=$1
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "install-vllm: VERSION must look like 0.33.0, got '$VERSION'" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${2:-$ROOT/.cache/venvs/vllm-$VERSION}
CACHE=${KVCONFORM_CACHE_DIR:-$ROOT/.cache}
export PIP_CACHE_DIR=$CACHE/pip
WHEELS=$CACHE/wheels
PYTHON=${PYTHON:-python3.11}

# The dependency list is chosen by minor version: the newest list whose minor is <= VERSION's.
DEPS_DIR=$ROOT/scripts/vllm-light-deps
minor=$(echo "$VERSION" | cut -d. -f2)
deps_file=""
for f in $(ls "$DEPS_DIR" | sort -t. -k2,2n); do
    m=$(echo "$f" | cut -d. -f2)
    if (( m <= minor )); then deps_file=$DEPS_DIR/$f; fi
done
[[ -n $deps_file ]] || { echo "install-vllm: no dependency list for vLLM $VERSION in $DEPS_DIR (oldest known: $(ls "$DEPS_DIR" | sort -t. -k2,2n | head -1))" >&2; exit 2; }

# The stamp records what the venv was built from; same inputs -> nothing to do.
stamp_value="vllm==$VERSION $(sha256sum "$deps_file" | cut -c1-16) $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
STAMP=$VENV/.kvconform-vllm-stamp
if [[ -f $STAMP && "$(cat "$STAMP")" == "$stamp_value" ]]; then
    echo "install-vllm: $VENV already has vLLM $VERSION (delete it to reinstall)"
    exit 0
fi

t0=$(date +%s)
mkdir -p "$WHEELS" "$PIP_CACHE_DIR" "$(dirname "$VENV")"
[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

# torch is pinned for every step so that no dependency can replace the CPU build.
CONSTRAINTS=$CACHE/install-vllm-constraints.txt
echo "torch==2.13.0" > "$CONSTRAINTS"

echo "install-vllm: [1/4] torch==2.13.0 (CPU build)"
"${PIP[@]}" install -c "$CONSTRAINTS" torch==2.13.0

echo "install-vllm: [2/4] vllm==$VERSION wheel (--no-deps)"
wheel=$(ls "$WHEELS"/vllm-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [[ -z $wheel ]]; then
    "${PIP[@]}" download --no-deps --only-binary=:all: -d "$WHEELS" "vllm==$VERSION"
    wheel=$(ls "$WHEELS"/vllm-"$VERSION"-*.whl | head -1)
fi
"${PIP[@]}" install --no-deps "$wheel"

echo "install-vllm: [3/4] light dependencies from $(basename "$deps_file")"
mapfile -t deps < <(grep -v '^\s*#' "$deps_file" | grep -v -- '--no-deps' | awk 'NF {print $1}')
mapfile -t nodeps < <(grep -v '^\s*#' "$deps_file" | grep -- '--no-deps' | awk 'NF {print $1}')
"${PIP[@]}" install -c "$CONSTRAINTS" "${deps[@]}"
if (( ${#nodeps[@]} )); then "${PIP[@]}" install --no-deps "${nodeps[@]}"; fi

echo "install-vllm: [4/4] kvconform (editable, --no-deps) and its test tools"
"${PIP[@]}" install -c "$CONSTRAINTS" pytest pytest-xdist pytest-benchmark hypothesis tabulate
"${PIP[@]}" install --no-deps --no-build-isolation -e "$ROOT" 2>/dev/null \
    || "${PIP[@]}" install --no-deps -e "$ROOT"

# Prove the install is usable for kvconform's purpose before stamping it.
"$VENV/bin/python" - <<'PY'
import vllm, vllm.config  # noqa: F401  (the config target needs both)
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: F401
import vllm.v1.core.kv_cache_manager  # noqa: F401  (the allocator target; its imports reach v1/request.py's)
print(f"install-vllm: vLLM {vllm.__version__} imports")
PY
echo "$stamp_value" > "$STAMP"
echo "install-vllm: done in $(( $(date +%s) - t0 ))s: $VENV"
