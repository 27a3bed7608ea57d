#!/usr/bin/env bash
# Judge a new vLLM release in one command and leave a draft era to edit (checklist: docs/new-release.md).
#
#   scripts/new-vllm-release.sh X.Y.Z [--previous A.B.C] [--count N] [--no-write]
#
#   1. installs X.Y.Z (and the previous release, if missing) with scripts/install-vllm.sh;
#   2. lists the source files of the HMA path that changed since the previous release (the newest era's
#      release unless --previous), from the two installed wheels (harness/release/hma_files.toml);
#   3. runs the newest era's config matrix on the reference and on vLLM X.Y.Z judged by that era's rules
#      (KVCONFORM_VLLM_JUDGE_ERA) and prints the cells whose outcome differs (`kvconform diff`);
#   4. runs N random cases of that era's dimensions (suites/config/random_cases.py, seed 1; default 200) and
#      every small MultiConnector tree (--trees, 1,260 cases) on both and prints those that differ;
#   5. runs the allocator suite on X.Y.Z's allocator and the connector suite on its connectors;
#   6. writes the draft era: when something differs, a new era vX.Y evolving the newest one with its rules and
#      tables copied, and the release's registry row; when nothing does, only the row (it joins the newest era); then
#      the docs' tables written from them (harness.release.doc_tables) and the goldens of that era. --no-write
#      leaves the tree as it is.
# Environment: KVCONFORM_CI_VLLM_VENV_ROOT=DIR uses prebuilt venvs DIR/vllm-<release> as they are, as the vLLM CI
# job does (default: install into the registry's venv_dir, .cache/venvs/vllm-<release>); KVCONFORM_NEW_RELEASE_OUT (default .cache/new-release/X.Y.Z) gets
# the logs and results. Exit status: 0 judged (differences are findings, not failures), 1 a step could not
# run, 2 bad arguments (one line).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3.11}

die() { echo "new-vllm-release: $*" >&2; exit 2; }
release_re='^[0-9]+\.[0-9]+\.[0-9]+$'
RELEASE="" PREVIOUS="" COUNT=200 WRITE=1
while (( $# )); do
    case $1 in
        --previous) [[ $# -ge 2 ]] || die "--previous needs a release X.Y.Z"; PREVIOUS=$2; shift 2 ;;
        --count) [[ $# -ge 2 ]] || die "--count needs a number of cases"; COUNT=$2; shift 2 ;;
        --no-write) WRITE=0; shift ;;
        -h|--help) sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option '$1' (accepted: --previous A.B.C, --count N, --no-write)" ;;
        *) [[ -z $RELEASE ]] || die "one release expected, got '$RELEASE' and '$1'"; RELEASE=$1; shift ;;
    esac
done
[[ -n $RELEASE ]] || die "usage: scripts/new-vllm-release.sh X.Y.Z [--previous A.B.C] [--count N] [--no-write]"
[[ $RELEASE =~ $release_re ]] || die "release: '$RELEASE' is not a vLLM release; expected X.Y.Z such as 0.35.0"
[[ -z $PREVIOUS || $PREVIOUS =~ $release_re ]] || die "--previous: '$PREVIOUS' is not a vLLM release; expected X.Y.Z"
[[ $COUNT =~ ^[1-9][0-9]*$ ]] || die "--count: '$COUNT' is not a positive number of cases"
# One name for the folder of prebuilt venvs, the CI job's and the registry's (reference_impl/releases.py
# VENV_ROOT_ENV); this script's own earlier name is refused rather than ignored, so a prebuilt venv is never
# silently reinstalled.
[[ -z ${KVCONFORM_VLLM_VENV_ROOT:-} ]] \
    || die "KVCONFORM_VLLM_VENV_ROOT is now KVCONFORM_CI_VLLM_VENV_ROOT (the CI job's name): set that instead"

# The era the release is judged by: the newest one kvconform declares; the previous release: its representative.
read -r ERA REPRESENTATIVE < <("$PY" -c 'from reference_impl.config.eras import ERAS; print(ERAS[-1].id, ERAS[-1].representative)') \
    || die "cannot read kvconform's eras with $PY (PYTHON=... names another Python 3.11)"
PREVIOUS=${PREVIOUS:-$REPRESENTATIVE}
"$PY" reference_impl/releases.py newer "$RELEASE" "$PREVIOUS" \
    || die "release: $RELEASE is not newer than $PREVIOUS (the newest era $ERA is judged from $REPRESENTATIVE on)"

OUT=${KVCONFORM_NEW_RELEASE_OUT:-.cache/new-release/$RELEASE}
mkdir -p "$OUT"
TIMES=()
BROKEN=()
t_start=$(date +%s)
say() { echo "new-vllm-release: $*"; }
# step NAME OK_STATUSES COMMAND...: runs with its output in OUT/NAME.log, times it, prints the log's last line.
step() {
    local name=$1 ok=$2 t0 status
    shift 2
    t0=$(date +%s)
    "$@" > "$OUT/$name.log" 2>&1
    status=$?
    TIMES+=("$name $(( $(date +%s) - t0 ))s")
    if [[ " $ok " != *" $status "* ]]; then
        say "[$name] could not run (exit $status); last lines of $OUT/$name.log:" >&2
        tail -n 5 "$OUT/$name.log" >&2
        BROKEN+=("$name")
        return 1
    fi
    return 0
}
# The registry's venv_dir is ROOT/vllm-<release> where KVCONFORM_CI_VLLM_VENV_ROOT names a ROOT.
venv_for() { "$PY" reference_impl/releases.py venv "$1"; }
install() {
    local venv
    venv=$(venv_for "$1") || return 1
    if [[ -n ${KVCONFORM_CI_VLLM_VENV_ROOT:-} ]]; then
        [[ -x $venv/bin/python ]] || { say "no prebuilt venv $venv (KVCONFORM_CI_VLLM_VENV_ROOT)" >&2; return 1; }
        return 0
    fi
    scripts/install-vllm.sh "$1" "$venv"
}

say "judging vLLM $RELEASE by era $ERA (previous release $PREVIOUS); logs in $OUT"
step install-$RELEASE 0 install "$RELEASE" || exit 1
step install-$PREVIOUS 0 install "$PREVIOUS" || exit 1
NEW=$(venv_for "$RELEASE")
OLD=$(venv_for "$PREVIOUS")

# 2. HMA-path files that changed (exit 1 = some changed).
step changed-files "0 1" "$NEW/bin/python" -m harness.release.changed_files "$OLD" "$NEW" \
    --old-label "$PREVIOUS" --new-label "$RELEASE" && cat "$OUT/changed-files.log"

# 3. The newest era's matrix: reference vs vLLM judged by that era.
PYTEST=("$NEW/bin/python" -m pytest -q -p no:cacheprovider -n 2)
matrix_differs=0
step matrix-reference 0 "${PYTEST[@]}" suites/config --vllm-version "$ERA" --kvconform-results "$OUT/matrix-reference.json"
if step matrix-vllm "0 1" env KVCONFORM_VLLM_JUDGE_ERA="$ERA" "${PYTEST[@]}" suites/config --vllm-version "$ERA" \
        --hma-target vllm --kvconform-results "$OUT/matrix-vllm.json" \
    && [[ -f $OUT/matrix-reference.json ]]; then
    "$NEW/bin/kvconform" diff "$OUT/matrix-reference.json" "$OUT/matrix-vllm.json" > "$OUT/matrix-diff.log" 2>&1
    case $? in
        0) say "matrix: every cell of era $ERA has the same outcome on vLLM $RELEASE" ;;
        1) matrix_differs=1; say "matrix: cells of era $ERA whose outcome differs on vLLM $RELEASE:"; cat "$OUT/matrix-diff.log" ;;
        *) say "matrix: kvconform diff failed:" >&2; cat "$OUT/matrix-diff.log" >&2; BROKEN+=(matrix-diff) ;;
    esac
fi

# 4. Random cases of the era's dimensions.
random_differs=0
if step random-cases "0 1" env KVCONFORM_VLLM_JUDGE_ERA="$ERA" "$NEW/bin/python" -m suites.config.random_cases \
        --era "$ERA" --count "$COUNT" --seed 1 --target vllm --out "$OUT/random-differing.json"; then
    grep -A 31 "^random cases of era" "$OUT/random-cases.log"
    grep -q ", 0 differ from the era" "$OUT/random-cases.log" || random_differs=1
fi
if step connector-trees "0 1" env KVCONFORM_VLLM_JUDGE_ERA="$ERA" "$NEW/bin/python" -m suites.config.random_cases \
        --era "$ERA" --trees --target vllm --out "$OUT/trees-differing.json"; then
    grep -A 31 "^connector trees of era" "$OUT/connector-trees.log"
    grep -q ", 0 differ from the era" "$OUT/connector-trees.log" || random_differs=1
fi

# 5. The allocator and connector suites on the release (failures are findings for the person to read).
step allocator "0 1" "${PYTEST[@]}" suites/allocator --kv-allocator vllm --kvconform-results "$OUT/allocator.json" \
    && say "allocator suite on vLLM $RELEASE: $(tail -n 1 "$OUT/allocator.log")"
mapfile -t connectors < <("$NEW/bin/python" -m harness.targets.connector.vllm_target 2>/dev/null | grep -x -e "--kv-connector=vllm:.*")
if (( ${#connectors[@]} )); then
    step connectors "0 1" "${PYTEST[@]}" suites/connector -W ignore::DeprecationWarning "${connectors[@]}" \
        --kvconform-results "$OUT/connectors.json" \
        && say "connector suite on vLLM $RELEASE's ${#connectors[@]} connectors: $(tail -n 1 "$OUT/connectors.log")"
else
    say "connector suite: harness.targets.connector.vllm_target listed no connector of vLLM $RELEASE" >&2; BROKEN+=(connectors)
fi

# 6. The draft era and the registry row (or the row alone), then the goldens.
if (( WRITE )); then
    if (( matrix_differs || random_differs )); then
        step draft-era 0 "$NEW/bin/python" -m harness.release.draft_era "$RELEASE" && cat "$OUT/draft-era.log"
        golden_era=$(sed -n 's/^draft_era: draft era \([^ ]*\) .*/\1/p' "$OUT/draft-era.log")
    else
        step draft-era 0 "$NEW/bin/python" -m harness.release.draft_era "$RELEASE" --range-only && cat "$OUT/draft-era.log"
        golden_era=$ERA
    fi
    # the registry's table (docs/releases.md), the era table (docs/reader.md) and the README's known range follow
    step doc-tables 0 "$NEW/bin/python" -m harness.release.doc_tables && cat "$OUT/doc-tables.log"
    if [[ -n ${golden_era:-} ]]; then
        step goldens 0 "${PYTEST[@]}" suites/config --vllm-version "$golden_era" --update-golden \
            && say "goldens of era $golden_era written (suites/config/golden/$golden_era.txt)"
    fi
else
    say "--no-write: the tree is left as it is"
fi

say "times: ${TIMES[*]}; total $(( $(date +%s) - t_start ))s"
say "next: docs/new-release.md (edit the draft era, the oracle's tables, docs/rules.md, regenerate the report)"
if (( ${#BROKEN[@]} )); then
    say "steps that could not run: ${BROKEN[*]}" >&2
    exit 1
fi
