#!/usr/bin/env bash
# Install one vLLM release on a CPU-only machine, for running kvconform against it.
#
#   scripts/install-vllm.sh VERSION [VENV_DIR]
#
# Creates VENV_DIR (default: .cache/venvs/vllm-VERSION, or $KVCONFORM_CI_VLLM_VENV_ROOT/vllm-VERSION where that
# variable names a folder of venvs), installs the release's torch (the CPU build; the
# release registry's `torch`, reference_impl/releases.toml), the vLLM wheel with --no-deps (its own pins would
# pull the CUDA stack), the light dependencies that vLLM's config and v1/core modules import (the registry's
# `deps` names the list in scripts/vllm-light-deps/, pinned as observed working), and kvconform itself
# (editable, --no-deps) with its test tools.
# Every release's row gives the same CPU torch 2.13.0, whatever its wheel pins: each wheel asks for one exact torch
# (0.13.0: 2.9.0, 0.20.0-0.24.0: 2.11.0, 0.29.0: 2.13.0, 0.33.0 and 0.34.0: 2.14.0; a CUDA build from PyPI),
# but the modules kvconform runs (vllm.config, v1/core, the KV connectors, the scheduler) import and run on
# 2.13.0's CPU build: the install check below proves the imports, and the CI job's steps run on it.
# Idempotent: a finished venv carries a stamp and is left alone on the next call.
#
# Install once: everything the venv needs is downloaded once into a wheelhouse (.cache/wheelhouse: torch's CPU
# build and its dependencies, the light dependencies, the test tools, setuptools; the vLLM wheel stays in
# .cache/wheels), marked complete by a stamp keyed by the release, the dependency list's hash and the tool list;
# every install then runs with --no-index --find-links on those files, so a second venv of the same release (a
# CI run restoring the cache) downloads nothing and needs no network. Sources without a wheel are built into
# wheels once, when the wheelhouse is filled.
#   KVCONFORM_TORCH_INDEX_URL   index for torch's CPU build when the wheelhouse is filled (CI on a plain Linux
#                               runner: https://download.pytorch.org/whl/cpu); default: pip's configuration
set -euo pipefail

usage() { echo "usage: scripts/install-vllm.sh VERSION [VENV_DIR]   (VERSION like 0.33.0)" >&2; exit 2; }
[[ $# -ge 1 && $# -le 2 ]] || usage
VERSION=$1
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "install-vllm: VERSION must look like 0.33.0, got '$VERSION'" >&2; exit 2; }

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3.11}
# The default folder has one home, the release registry's venv_dir (reference_impl/releases.py), which the tests
# that look for a release's venv read too.
VENV=${2:-$("$PYTHON" "$ROOT/reference_impl/releases.py" venv "$VERSION")}
CACHE=${KVCONFORM_CACHE_DIR:-$ROOT/.cache}
export PIP_CACHE_DIR=$CACHE/pip
WHEELS=$CACHE/wheels

# The dependency list and the torch pin come from the release registry (reference_impl/releases.toml): the
# release's row, else the row of the newest release before it.
DEPS_DIR=$ROOT/scripts/vllm-light-deps
minor=$(echo "$VERSION" | cut -d. -f2)
row=$("$PYTHON" "$ROOT/reference_impl/releases.py" install "$VERSION" 2>&1) \
    || { echo "install-vllm: ${row#releases: } (reference_impl/releases.toml)" >&2; exit 2; }
read -r deps_name TORCH <<< "$row"
deps_file=$DEPS_DIR/$deps_name.txt
[[ -f $deps_file ]] || { echo "install-vllm: the registry names the dependency list $deps_name for vLLM $VERSION, and $deps_file does not exist" >&2; exit 2; }

# What a venv (and the wheelhouse's share for this release) is built from: the release, torch, the dependency
# list and the test tools. The venv's stamp and the wheelhouse's stamp record it; same inputs -> nothing to do
# (an edit of this script alone reinstalls nothing: a CI cache restored under a new key stays usable).
TOOLS=(pytest pytest-xdist pytest-benchmark hypothesis tabulate "setuptools>=68" wheel)
stamp_value="vllm==$VERSION torch==$TORCH deps:$(sha256sum "$deps_file" | cut -c1-16) tools:$(echo "${TOOLS[*]}" | sha256sum | cut -c1-16)"
STAMP=$VENV/.kvconform-vllm-stamp
if [[ -f $STAMP && "$(cat "$STAMP")" == "$stamp_value" ]]; then
    echo "install-vllm: $VENV already has vLLM $VERSION (delete it to reinstall)"
    exit 0
fi

t0=$(date +%s)
HOUSE=$CACHE/wheelhouse
mkdir -p "$WHEELS" "$HOUSE" "$PIP_CACHE_DIR" "$(dirname "$VENV")"
[[ -x $VENV/bin/python ]] || "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check -q)

# torch is pinned for every step so that no dependency can replace the CPU build.
CONSTRAINTS=$CACHE/install-vllm-constraints.txt
echo "torch==$TORCH" > "$CONSTRAINTS"
# A line ending in `--only-minor N` is for the releases of that minor alone (a list serves several minors).
list_for_this_minor() {
    grep -v '^\s*#' "$deps_file" | awk -v minor="$minor" \
        'NF { for (i = 1; i < NF; i++) if ($i == "--only-minor" && $(i + 1) != minor) next; print }'
}
mapfile -t deps < <(list_for_this_minor | grep -v -- '--no-deps' | awk '{print $1}')
mapfile -t nodeps < <(list_for_this_minor | grep -- '--no-deps' | awk '{print $1}')

# ---- the wheelhouse: filled once per release and dependency list -------------------------------------------
HOUSE_STAMP=$HOUSE/.vllm-$VERSION.stamp
wheel=$(ls "$WHEELS"/vllm-"$VERSION"-*.whl 2>/dev/null | head -1 || true)
if [[ -n $wheel && -f $HOUSE_STAMP && "$(cat "$HOUSE_STAMP")" == "$stamp_value" ]]; then
    echo "install-vllm: [1/3] wheelhouse $HOUSE has every file of vLLM $VERSION: nothing to download"
else
    echo "install-vllm: [1/3] filling the wheelhouse $HOUSE (once per release and dependency list)"
    td=$(date +%s)
    rm -f "$HOUSE_STAMP"
    "${PIP[@]}" download -d "$HOUSE" ${KVCONFORM_TORCH_INDEX_URL:+--index-url "$KVCONFORM_TORCH_INDEX_URL"} "torch==$TORCH"
    # The other downloads look in the wheelhouse first, so that torch's CPU build there (its version 2.13.0+cpu sorts
    # above a plain index's 2.13.0) satisfies a dependency that asks for torch, never a CUDA build.
    DL=("${PIP[@]}" download -d "$HOUSE" --find-links "$HOUSE")
    if [[ -z $wheel ]]; then
        "${PIP[@]}" download --no-deps --only-binary=:all: -d "$WHEELS" "vllm==$VERSION"
        wheel=$(ls "$WHEELS"/vllm-"$VERSION"-*.whl | head -1)
    fi
    "${DL[@]}" -c "$CONSTRAINTS" "${deps[@]}" "${TOOLS[@]}"
    if (( ${#nodeps[@]} )); then "${DL[@]}" --no-deps "${nodeps[@]}"; fi
    # An sdist becomes a wheel now, so that no install from the wheelhouse builds anything.
    shopt -s nullglob
    sdists=("$HOUSE"/*.tar.gz "$HOUSE"/*.zip)
    shopt -u nullglob
    if (( ${#sdists[@]} )); then
        "${PIP[@]}" wheel --no-deps -w "$HOUSE" "${sdists[@]}" && rm -f "${sdists[@]}"
    fi
    echo "$stamp_value" > "$HOUSE_STAMP"
    echo "install-vllm: wheelhouse filled in $(( $(date +%s) - td ))s ($(du -sh "$HOUSE" | cut -f1) in $HOUSE)"
fi

# ---- the venv, from local files only ---------------------------------------------------------------------------
LOCAL=("${PIP[@]}" install --no-index --find-links "$HOUSE")
echo "install-vllm: [2/3] torch==$TORCH (CPU build), vllm==$VERSION (--no-deps), light dependencies from $(basename "$deps_file"), from local files"
"${LOCAL[@]}" -c "$CONSTRAINTS" "torch==$TORCH"
"${LOCAL[@]}" --no-deps "$wheel"
"${LOCAL[@]}" -c "$CONSTRAINTS" "${deps[@]}"
if (( ${#nodeps[@]} )); then "${LOCAL[@]}" --no-deps "${nodeps[@]}"; fi

echo "install-vllm: [3/3] kvconform (editable, --no-deps) and its test tools, from local files"
"${LOCAL[@]}" -c "$CONSTRAINTS" "${TOOLS[@]}"
"${LOCAL[@]}" --no-deps --no-build-isolation -e "$ROOT"

# Prove the install is usable for kvconform's purpose before stamping it.
"$VENV/bin/python" - <<'PY'
import vllm, vllm.config  # noqa: F401  (the config target needs both)
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory  # noqa: F401
import vllm.v1.core.kv_cache_manager  # noqa: F401  (the allocator target; its imports reach v1/request.py's)
print(f"install-vllm: vLLM {vllm.__version__} imports")
PY
echo "$stamp_value" > "$STAMP"
echo "install-vllm: done in $(( $(date +%s) - t0 ))s: $VENV"
