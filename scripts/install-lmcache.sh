#!/usr/bin/env bash
# Add LMCache to a vLLM virtual environment made by scripts/install-vllm.sh, for `--kv-connector
# vllm:LMCacheMPConnector` (LMCache's own multi-process connector, against LMCache's real server).
#
#   scripts/install-lmcache.sh VENV_DIR
#
# lmcache==0.5.6 goes in with --no-deps: its declared dependencies pull the CUDA stack and another torch,
# while on a CPU only its cuda_ops extension needs CUDA (LMCache falls back to a CPU device by itself). The
# packages its connector and server import on a CPU are pinned in scripts/lmcache-deps.txt, installed under
# the venv's torch and numpy (a constraint, so nothing replaces them). Idempotent (a stamp in the venv).
set -euo pipefail

usage() { echo "usage: scripts/install-lmcache.sh VENV_DIR   (a venv made by scripts/install-vllm.sh)" >&2; exit 2; }
[[ $# -eq 1 ]] || usage
VENV=$1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ -x $VENV/bin/python ]] || { echo "install-lmcache: VENV_DIR '$VENV' has no bin/python; make it with scripts/install-vllm.sh first" >&2; exit 2; }
CACHE=${KVCONFORM_CACHE_DIR:-$ROOT/.cache}
export PIP_CACHE_DIR=$CACHE/pip
LMCACHE_VERSION=0.5.6
DEPS=$ROOT/scripts/lmcache-deps.txt

stamp_value="lmcache==$LMCACHE_VERSION $(sha256sum "$DEPS" | cut -c1-16) $(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
STAMP=$VENV/.kvconform-lmcache-stamp
if [[ -f $STAMP && "$(cat "$STAMP")" == "$stamp_value" ]]; then
    echo "install-lmcache: $VENV already has lmcache $LMCACHE_VERSION (delete $STAMP to reinstall)"
    exit 0
fi

t0=$(date +%s)
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)
# Keep the venv's torch and numpy: whatever LMCache's dependencies ask for, these stay.
CONSTRAINTS=$(mktemp)
trap 'rm -f "$CONSTRAINTS"' EXIT
"$VENV/bin/python" - > "$CONSTRAINTS" <<'PY'
from importlib.metadata import version
for name in ("torch", "numpy"):
    print(f"{name}=={version(name)}")
PY

echo "install-lmcache: [1/2] lmcache==$LMCACHE_VERSION (--no-deps)"
"${PIP[@]}" install --no-deps "lmcache==$LMCACHE_VERSION"
echo "install-lmcache: [2/2] its CPU dependencies from $(basename "$DEPS")"
mapfile -t deps < <(grep -v '^\s*#' "$DEPS" | awk 'NF {print $1}')
"${PIP[@]}" install -c "$CONSTRAINTS" "${deps[@]}"

# Usable for kvconform's purpose: the MP connector and the server module import.
"$VENV/bin/python" - <<'PY'
import importlib
import lmcache
for module in ("lmcache.integration.vllm.lmcache_mp_connector", "lmcache.v1.multiprocess.server"):
    importlib.import_module(module)
from importlib.metadata import version
print(f"install-lmcache: lmcache {version('lmcache')} imports (MP connector and server)")
PY
echo "$stamp_value" > "$STAMP"
echo "install-lmcache: done in $(( $(date +%s) - t0 ))s: $VENV"
