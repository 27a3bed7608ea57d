#!/usr/bin/env bash
# CI step: run kvconform against a list of real vLLM releases, newest first. For each release
# (installed CPU-only, --no-deps, into its own venv by scripts/install-vllm.sh):
#   matrix      the config matrix of the release's rule era, on vLLM's own config code (`--hma-target vllm`), and
#               the config invariants on the same cells (suites/config/test_invariants.py): the release breaks
#               exactly its reviewed defects (harness/release/vllm_config_defects.toml, strict xfails); one
#               process in the background, beside the allocator step,
#   allocator   the allocator suite's scenarios on the release's KVCacheManager/BlockPool (`--kv-allocator vllm`),
#               niced while the matrix runs (BESIDE_MATRIX_NICE),
#   connectors  the connector suite on every connector the release registers (`--kv-connector vllm:Name`),
#               LMCacheMPConnector aside (the next step); this step, lmcache and engine start beside the matrix
#               once the allocator step has ended (imports, collection), and their checks wait for their turn, one
#               step at a time with nothing of the job beside them (.ci/vllm_job_start_gate.py),
#   lmcache     real LMCache (scripts/install-lmcache.sh adds lmcache 0.5.6 to the release's venv) as the target
#               `--kv-connector vllm:LMCacheMPConnector`; the suite starts and stops LMCache's MP server itself,
#   engine      the connector suite on ENGINE_CONNECTORS with `--kv-engine vllm` (the release's own Scheduler drives
#               the connector's scheduler side); merged with the connectors step's cells of the same connectors,
#               the report's "kvconform's engine and vLLM's scheduler" section lists where the verdicts differ;
#               its async-scheduling cells (C42, C43) fail exactly the release's reviewed scheduler defects
#               (harness/release/vllm_scheduler_defects.toml, `python -m harness.release.scheduler_defects`);
#               those steps are "the release judged" (JUDGED_STEPS: each release's `judged | total` row), then
#   benchmarks  the allocator throughput benchmarks, reference and that vLLM side by side, timed once (no xdist), in
#               the background beside the next step,
#   upstream    the release's whole tests/v1/core folder, on vLLM and then on the reference allocator through the
#               import mapping (scripts/upstream-vllm-tests.sh; the sdist comes from PyPI at run time), less on vLLM
#               the tests reviewed as unable to pass there (harness/upstream/not_on_cpu.toml); fails when the
#               reference passes a smaller share of the vLLM-passing tests than the floor.
# A step that cannot run on a release is skipped with its reason, printed at once and in the summary: the
# matrix when kvconform declares no rule era for the release (computed), and the release's known gaps in the
# release registry (reference_impl/releases.toml `gaps`: reviewed data, each names what is missing; delete the
# line when it lands). Anything else that fails fails the job, after every release has run. Per release, the
# results files are merged (`kvconform merge`) and rendered (`kvconform report --from`) into OUT/<release>/;
# OUT/summary.md says per release what ran, what was skipped and why, and how long each step took.
#
# Environment:
#   KVCONFORM_CI_VLLM_RELEASES    releases to run, newest first (default: the registry's rows with `ci = true`,
#                                 reference_impl/releases.toml, the list the GitHub Actions workflow's matrix reads too)
#   KVCONFORM_CI_VLLM_VENV_ROOT   use prebuilt venvs ROOT/vllm-<release> as they are (no install step);
#                                 default: install into .cache/venvs/vllm-<release> (idempotent)
#   KVCONFORM_CI_VLLM_STEPS       run only these steps (space-separated: matrix allocator upstream benchmarks connectors
#                                 lmcache engine report), e.g. to time or rerun one; the others are listed as skipped
#   KVCONFORM_CI_VLLM_OUT         results, JUnit files, reports (default .cache/ci-vllm, outside reports/)
#   KVCONFORM_CI_VLLM_KEEP_VENVS  1: keep the venvs this job installed (and the vLLM wheels) for a second run;
#                                 default: a release's venv and wheel are removed once its report is written
# A release's venv takes 2-4.5 GiB (3.5 GiB for 0.33.0, more with lmcache) and the CI machine's free disk varies
# (one run ran out of space installing the third release while the first two venvs were still on disk), so by
# default only one release's venv is on disk at a time; the pip cache under .cache/ stays (0.33.0 reuses 0.34.0's
# downloads). Before an install the job checks the free space against MIN_FREE_GIB and, when it is short, skips
# the release's steps with both figures as the reason, instead of failing half-way through pip.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# The venvs may carry kvconform installed from another checkout: this checkout's code comes first.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# The release list and the known gaps have one home, the release registry (reference_impl/releases.toml: its rows
# with `ci = true`, newest first; .github/workflows/vllm-job.yml makes one runner per release of the same list),
# read with any Python 3.11 (the registry's loader needs only the standard library).
REGISTRY_PY=${PYTHON:-python3}
mapfile -t RELEASES < <("$REGISTRY_PY" reference_impl/releases.py ci)
(( ${#RELEASES[@]} )) || { echo "ci-vllm: no release list from the registry ($REGISTRY_PY reference_impl/releases.py ci)" >&2; exit 2; }
# The engine step's connectors, those of them the release registers: vLLM's own HMA connectors that run on
# CPU, and ExampleConnector, the one whose worker runs on CPU on every release from 0.13.0 (about a minute
# each on 2 cores).
# The steps KVCONFORM_CI_VLLM_STEPS may pick (allocator-findings, lmcache-install and scheduler-defects follow
# their step).
ALL_STEPS="matrix allocator upstream benchmarks connectors lmcache engine report"
# "One release judged" (issue 34): the steps whose verdicts are about the release's own code; they run first, and
# each release's `judged | total` row is their wall time (the summary adds up their CPU seconds, .ci/vllm-summary.sh
# reads the same list). upstream (vLLM's own tests, judging the reference), the benchmarks and the report follow.
JUDGED_STEPS="matrix allocator allocator-findings connectors lmcache engine scheduler-defects"
ENGINE_CONNECTORS=(SimpleCPUOffloadConnector OffloadingConnector ExampleConnector)
# The matrix is one process, the longest chain of a release's first phase (its cases, vLLM's model-info inspections
# in its subprocesses, its wait for LMCache's absent server); the processes beside it whose verdicts do not depend on
# timing (the connector list, the allocator step and its findings) run at this niceness, so that the kernel keeps a
# core for the matrix and gives them the other and every moment the matrix waits, instead of sharing both cores
# evenly. The connector steps, whose checks have wall-clock limits, keep the job's own niceness.
BESIDE_MATRIX_NICE=10
BESIDE_MATRIX=()  # the command prefix of those processes: (nice -n BESIDE_MATRIX_NICE) while a matrix runs
# release:step -> why the step cannot run on that release yet: the registry's `gaps` (reviewed data, not a way
# to silence a failure: each names the missing capability).
declare -A KNOWN_GAPS=()
while IFS=$'\t' read -r key reason; do KNOWN_GAPS[$key]=$reason; done < <("$REGISTRY_PY" reference_impl/releases.py gaps)

if [[ -n ${KVCONFORM_CI_VLLM_RELEASES:-} ]]; then read -r -a RELEASES <<< "$KVCONFORM_CI_VLLM_RELEASES"; fi
for R in "${RELEASES[@]}"; do
    [[ $R =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "ci-vllm: KVCONFORM_CI_VLLM_RELEASES: '$R' is not a release X.Y.Z" >&2; exit 2; }
done
VENV_ROOT=${KVCONFORM_CI_VLLM_VENV_ROOT:-}
STEPS=${KVCONFORM_CI_VLLM_STEPS:-}
for step in $STEPS; do
    [[ " $ALL_STEPS " == *" $step "* ]] || { echo "ci-vllm: KVCONFORM_CI_VLLM_STEPS: '$step' is not a step; accepted: $ALL_STEPS" >&2; exit 2; }
done
OUT=${KVCONFORM_CI_VLLM_OUT:-.cache/ci-vllm}
CACHE_DIR=$(mkdir -p "${KVCONFORM_CACHE_DIR:-.cache}" && cd "${KVCONFORM_CACHE_DIR:-.cache}" && pwd)
mkdir -p "$OUT"
SUMMARY_ROWS=()   # "release|step|status|wall seconds|CPU seconds|note"
# Free disk a fresh install needs: the largest venv measured (0.33.0 with lmcache, 3.6 GiB) plus its wheel and
# downloads, with a margin. KVCONFORM_CI_VLLM_MIN_FREE_GIB overrides it.
MIN_FREE_GIB=${KVCONFORM_CI_VLLM_MIN_FREE_GIB:-6}
[[ $MIN_FREE_GIB =~ ^[0-9]+$ ]] || { echo "ci-vllm: KVCONFORM_CI_VLLM_MIN_FREE_GIB: '$MIN_FREE_GIB' is not a whole number of GiB" >&2; exit 2; }
FAILED=()

say() { echo "ci-vllm: $*"; }
record() { SUMMARY_ROWS+=("$1|$2|$3|$4|$5|$6"); }  # record RELEASE STEP STATUS WALL CPU NOTE
skip() {  # skip RELEASE STEP REASON
    say "[$1 $2] skipped: $3"
    record "$1" "$2" skipped 0 0 "$3"
}
# CPU seconds (user + system): a step's figure that load from other jobs on the machine inflates far less than
# its wall time. cpu_of FILE reads the children's line of a `times` output; cpu_seconds sets CPU_NOW to this
# shell's finished children so far (`times` must run in the shell whose children it counts, not in $(...)).
cpu_of() {
    tail -n 1 "$1" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); t += p[1] * 60 + p[2] } printf "%d", t }'
}
cpu_seconds() {
    times > "$OUT/.times"
    CPU_NOW=$(cpu_of "$OUT/.times")
}
# run_step RELEASE STEP OK_STATUSES COMMAND...: times the command (wall and CPU); an exit status outside
# OK_STATUSES (space-separated) fails the step (and the job, at the end). The command runs in a subshell whose
# `times` counts its processes alone, so a step is not charged the CPU of one running beside it (run_beside).
run_step() {
    local release=$1 step=$2 ok=$3 t0 status cpu
    shift 3
    say "[$release $step] $*" | cut -c1-300
    t0=$(date +%s)
    IN_FLIGHT="$release|$step|$t0"
    rm -f "$OUT/.times-$release-$step"
    ( "$@"; code=$?; times > "$OUT/.times-$release-$step"; exit $code )
    status=$?
    IN_FLIGHT=""
    cpu=$(cpu_of "$OUT/.times-$release-$step")
    local seconds=$(( $(date +%s) - t0 )) note="exit $status" turn
    # A step started early (its tests waiting at a gate: .ci/vllm_job_start_gate.py): its wall counts from its turn.
    if [[ -n ${KVCONFORM_CI_START_AFTER:-} && -e $KVCONFORM_CI_START_AFTER ]]; then
        turn=$(stat -c %Y "$KVCONFORM_CI_START_AFTER")
        if (( turn > t0 )); then
            note+="; started $(( turn - t0 ))s before its turn (its start-up beside the steps before it), wall from its turn"
            seconds=$(( $(date +%s) - turn ))
        fi
    fi
    if [[ " $ok " == *" $status "* ]]; then
        say "[$release $step] done in ${seconds}s, ${cpu} CPU s ($note)"
        record "$release" "$step" "ran" "$seconds" "$cpu" "$note"
        return 0
    fi
    say "[$release $step] FAILED in ${seconds}s, ${cpu} CPU s ($note)" >&2
    record "$release" "$step" "FAILED" "$seconds" "$cpu" "$note"
    FAILED+=("$release $step")
    return 1
}
# gap RELEASE STEP: why the step does not run on the release (nothing: it runs): a known gap, or a step left out of
# KVCONFORM_CI_VLLM_STEPS.
# run_beside RELEASE STEP OK_STATUSES COMMAND...: run_step in the background, beside the steps that follow, until
# wait_beside; its output goes to OUT/RELEASE/STEP.log and is printed then, with its summary row. Only for a step
# that leaves a core idle (one process), beside steps whose verdicts do not depend on timing, or for a step whose
# tests wait for a gate file (.ci/vllm_job_start_gate.py) while it starts.
BESIDE=()   # "pid|release|step" of each step running in the background
run_beside() {
    local release=$1 step=$2
    say "[$release $step] runs beside the next steps (its output: $OUT/$release/$step.log, printed when it ends)"
    rm -f "$OUT/.beside-$release-$step"
    (
        trap - EXIT INT TERM
        SUMMARY_ROWS=() FAILED=()
        run_step "$@" > "$OUT/$release/$step.log" 2>&1
        printf '%s\n' "${SUMMARY_ROWS[@]}" > "$OUT/.beside-$release-$step"
    ) &
    BESIDE+=("$!|$release|$step")
}
# kill_tree PID: stop a process this job started and everything under it, children first.
kill_tree() {
    local child
    for child in $(pgrep -P "$1"); do kill_tree "$child"; done
    kill "$1" 2>/dev/null
}
# judged_cpu RELEASE: the CPU seconds recorded for the release's JUDGED_STEPS, added up.
judged_cpu() {
    local row release step status seconds cpu total=0
    for row in "${SUMMARY_ROWS[@]}"; do
        IFS='|' read -r release step status seconds cpu _ <<< "$row"
        [[ $release == "$1" && " $JUDGED_STEPS " == *" $step "* ]] && (( total += ${cpu:-0} ))
    done
    echo "$total"
}
# wait_beside [STEP...]: wait for the steps run_beside started (only those named, when steps are named), print
# their output and take over their summary rows.
wait_beside() {
    local entry pid release step row left=()
    for entry in "${BESIDE[@]}"; do
        IFS='|' read -r pid release step <<< "$entry"
        if (( $# )) && [[ " $* " != *" $step "* ]]; then left+=("$entry"); continue; fi
        wait "$pid"
        cat "$OUT/$release/$step.log"
        while IFS= read -r row; do
            SUMMARY_ROWS+=("$row")
            [[ $row == *"|FAILED|"* ]] && FAILED+=("$release $step")
        done < "$OUT/.beside-$release-$step"
    done
    BESIDE=("${left[@]}")
}
# wait_ready DIR STEP...: until each step started early (run_beside with a gate) is ready, its two xdist workers
# waiting at their gate (.ci/vllm_job_start_gate.py touches DIR/.turn-STEP.ready-PID), or has ended.
wait_ready() {
    local dir=$1 entry pid release step ready
    shift
    for entry in "${BESIDE[@]}"; do
        IFS='|' read -r pid release step <<< "$entry"
        [[ " $* " == *" $step "* ]] || continue
        while kill -0 "$pid" 2>/dev/null; do
            ready=("$dir/.turn-$step".ready-*)
            [[ -e ${ready[0]} ]] && (( ${#ready[@]} >= 2 )) && break
            sleep 0.2
        done
    done
}
gap() {
    if [[ -n $STEPS && " $STEPS " != *" $2 "* ]]; then echo "not among KVCONFORM_CI_VLLM_STEPS ($STEPS)"; return; fi
    echo "${KNOWN_GAPS[$1:$2]:-}"
}
# Where the job installs a release when no prebuilt venvs are given: the registry's venv_dir (where
# scripts/install-vllm.sh and the tests look for it), relative to the checkout.
installed_venv() { local venv; venv=$("$REGISTRY_PY" reference_impl/releases.py venv "$1") || return 1; echo "${venv#"$ROOT"/}"; }
# Free GiB (rounded down) on the filesystem that holds PATH's nearest existing folder.
free_gib() {
    local path=$1
    while [[ ! -d $path ]]; do path=$(dirname "$path"); done
    df -Pk "$path" | awk 'NR == 2 { printf "%d", $4 / 1048576 }'
}

# connectors_of VENV NAMES_FILE: the connector list of a release: one --kv-connector=vllm:Name line per registered
# connector (vLLM logs to stdout on import: keep only those lines); the registered names go to NAMES_FILE, which the
# connector steps' processes read instead of importing vLLM to check their options (REGISTERED_NAMES_ENV,
# harness/targets/connector/vllm_facts.py).
connectors_of() {
    "${BESIDE_MATRIX[@]}" "$1/bin/python" -m harness.targets.connector.vllm_target --names-file "$2" \
        | grep -x -e "--kv-connector=vllm:.*" \
        | grep -v -x -e "--kv-connector=vllm:LMCacheMPConnector"  # the lmcache step runs it, with its server
}

# The rule era kvconform declares for a release, or nothing (the reason on stderr).
era_of() {
    "$1/bin/python" -c 'import sys
from harness.eras import EraSelectionError, era_for_version
from reference_impl.config.eras import known_range
try:
    print(era_for_version(sys.argv[1]))
except EraSelectionError:
    sys.exit(f"kvconform declares no rule era for {sys.argv[1]} (its eras cover {known_range()})")' "$2"
}

run_release() {
    local R=$1 venv dir era connectors=()
    dir=$OUT/$R
    mkdir -p "$dir"
    # A stale results file would be merged into the report: the steps that run now write theirs afresh (with
    # KVCONFORM_CI_VLLM_STEPS, the other steps' files of an earlier run stay and are rendered with them).
    if [[ -z $STEPS ]]; then rm -f "$dir"/results-*.json; else
        local step
        for step in $STEPS; do rm -f "$dir/results-${step/#matrix/config}.json"; done
    fi
    if [[ -n $VENV_ROOT ]]; then
        venv=$VENV_ROOT/vllm-$R
        if [[ ! -x $venv/bin/python ]]; then
            say "[$R install] FAILED: no prebuilt venv $venv (KVCONFORM_CI_VLLM_VENV_ROOT)" >&2
            record "$R" install FAILED 0 0 "no venv $venv"; FAILED+=("$R install"); return
        fi
        record "$R" install prebuilt 0 0 "$venv"
    else
        venv=$(installed_venv "$R")
        local free
        free=$(free_gib "$venv")
        if [[ ! -f $venv/.kvconform-vllm-stamp ]] && (( free < MIN_FREE_GIB )); then
            skip "$R" install "only $free GiB free on the disk of $venv, a fresh install needs $MIN_FREE_GIB GiB: none of $R's steps ran"
            return
        fi
        say "[$R install] $free GiB free on the disk of $venv"
        run_step "$R" install 0 scripts/install-vllm.sh "$R" "$venv" || return
    fi
    # LMCache goes into the release's venv before any step starts (an idempotent install; a prebuilt venv must
    # already have it): the matrix runs in the background from the first step on, and a case that imports
    # LMCache's vLLM integration while pip writes the package meets half of it, so two related cases answer
    # differently (0.34.0: "No module named 'lmcache'" beside "No module named 'lmcache.logging'") and the
    # invariants count a violation that is ours, not vLLM's.
    if [[ -z $VENV_ROOT && -z $(gap "$R" lmcache) ]]; then
        run_step "$R" lmcache-install 0 scripts/install-lmcache.sh "$venv"
    fi
    local PYTEST=("$venv/bin/python" -m pytest -q -p no:cacheprovider) judging_start
    judging_start=$(date +%s)
    # vLLM's model-info cache: building a ModelConfig inspects the model's class in a subprocess (torch and vLLM
    # imported again, 5-10 CPU s) unless VLLM_CACHE_ROOT/modelinfos holds the class's entry for its module's hash.
    # One folder per release, kept across runs: releases judged one after another no longer overwrite each
    # other's entries in the one default folder, and a second run inspects nothing.
    export VLLM_CACHE_ROOT=$CACHE_DIR/vllm-cache/vllm-$R

    # ---- the release judged: the steps whose verdicts are about the release's own code (the config matrix, the
    # allocator, the connector suite on its connectors, LMCache's and its own scheduler), first; the `judged` row
    # says how long they took (wall, lmcache's install aside; the summary adds up their CPU seconds).
    # matrix: the release's era, when kvconform declares one. One process, no xdist: the era's invariant judgement
    # runs every cell (and its relatives) through vLLM, and the target keeps each answer, so the cells' own tests
    # cost little more (each xdist worker would run that judgement again). It runs in the background, beside the
    # allocator step; the connector steps, whose checks have wall-clock limits, start once it has ended.
    if [[ -n $(gap "$R" matrix) ]]; then skip "$R" matrix "$(gap "$R" matrix)"
    elif era=$(era_of "$venv" "$R" 2>"$dir/era.err"); then
        run_beside "$R" matrix 0 "${PYTEST[@]}" suites/config -p no:xdist --vllm-version "$era" --hma-target vllm \
            --kvconform-results="$dir/results-config.json" --junitxml="$dir/junit-config.xml"
        BESIDE_MATRIX=(nice -n "$BESIDE_MATRIX_NICE")
    else
        skip "$R" matrix "$(tail -n 1 "$dir/era.err")"
    fi

    # The release's connector list (vLLM imported: seconds of CPU), made beside the matrix and allocator steps (niced
    # with them) for the connector steps that follow them.
    local listing=$dir/.connectors-list listing_pid
    rm -f "$dir/.connector-names"
    connectors_of "$venv" "$dir/.connector-names" > "$listing" &
    listing_pid=$!

    # A release's allocator may fail scenarios because of its own bugs: those are reviewed findings
    # (harness/release/vllm_allocator_findings.toml), so the step accepts pytest's exit 1 and the next step
    # passes only when the failures are exactly the release's reviewed findings.
    if [[ -n $(gap "$R" allocator) ]]; then skip "$R" allocator "$(gap "$R" allocator)"; else
        run_step "$R" allocator "0 1" "${BESIDE_MATRIX[@]}" "${PYTEST[@]}" suites/allocator -n 2 --kv-allocator vllm \
            --kvconform-results="$dir/results-allocator.json" --junitxml="$dir/junit-allocator.xml" \
        && run_step "$R" allocator-findings 0 "${BESIDE_MATRIX[@]}" "$venv/bin/python" -m harness.release.allocator_findings \
            "$dir/results-allocator.json"
    fi

    BESIDE_MATRIX=()
    # ---- the connector steps: connectors, lmcache, engine -----------------------------------------------
    # vLLM's connectors failing checks is a finding for the report ("vLLM X's connectors"), not a broken
    # job: only pytest exit statuses other than 0/1 fail these steps. Connectors that need a package or a GPU
    # skip with the reason. Their checks have wall-clock limits, so each step's checks run with nothing of the
    # job beside them, one step after another.
    local chain=() connectors_cmd=() lmcache_cmd=() engine_cmd=()
    if [[ -z $(gap "$R" connectors) || -z $(gap "$R" lmcache) || -z $(gap "$R" engine) ]]; then
        wait "$listing_pid" 2>/dev/null
        [[ -s $dir/.connector-names ]] && export KVCONFORM_VLLM_REGISTERED_CONNECTORS=$dir/.connector-names
    fi
    if [[ -n $(gap "$R" connectors) ]]; then skip "$R" connectors "$(gap "$R" connectors)"; else
        mapfile -t connectors < "$listing"
        if (( ${#connectors[@]} == 0 )); then
            say "[$R connectors] FAILED: harness.targets.connector.vllm_target listed no connector (is vLLM $R usable in $venv?)" >&2
            record "$R" connectors FAILED 0 0 "no connector listed"; FAILED+=("$R connectors")
        else
            chain+=(connectors)
            connectors_cmd=("${PYTEST[@]}" suites/connector -n 2 -W ignore::DeprecationWarning \
                "${connectors[@]}" --kvconform-results="$dir/results-connectors.json" --junitxml="$dir/junit-connectors.xml")
        fi
    fi

    # lmcache: real LMCache as a target (issue 19 item 4). LMCache goes into the release's venv (an idempotent
    # install; a prebuilt venv must already have it); the suite starts LMCache's MP server on a free port and
    # stops it at the end. Multi-group presets are N/A ("declares HMA, refuses multi-group models on this
    # configuration": LMCache's engine-driven mode).
    if [[ -n $(gap "$R" lmcache) ]]; then skip "$R" lmcache "$(gap "$R" lmcache)"; else
        if "$venv/bin/python" -c "import lmcache" 2>/dev/null; then
            chain+=(lmcache)
            lmcache_cmd=(env LMCACHE_DISABLE_BANNER=1 "${PYTEST[@]}" suites/connector -n 2 \
                -W ignore::DeprecationWarning --kv-connector vllm:LMCacheMPConnector --kv-connector-timeout 180 \
                --kvconform-results="$dir/results-lmcache.json" --junitxml="$dir/junit-lmcache.xml")
        else
            skip "$R" lmcache "lmcache is not importable in $venv (scripts/install-lmcache.sh $venv)"
        fi
    fi

    # engine: the same connectors on the release's own Scheduler (issue 19 item 6). Checks it cannot express
    # are "N/A: under --kv-engine vllm: ...". Its async-scheduling checks (C42, C43) judge the release's own
    # scheduler: their failures must be exactly its reviewed defects (harness/release/vllm_scheduler_defects.toml,
    # the scheduler-defects step after it).
    if [[ -n $(gap "$R" engine) ]]; then skip "$R" engine "$(gap "$R" engine)"; else
        (( ${#connectors[@]} )) || mapfile -t connectors < "$listing"
        local engine_connectors=() name
        for name in "${ENGINE_CONNECTORS[@]}"; do
            if printf '%s\n' "${connectors[@]}" | grep -qx -e "--kv-connector=vllm:$name"; then
                engine_connectors+=(--kv-connector "vllm:$name")
            fi
        done
        if (( ${#engine_connectors[@]} == 0 )); then
            skip "$R" engine "vLLM $R registers none of ${ENGINE_CONNECTORS[*]}"
        else
            chain+=(engine)
            engine_cmd=("${PYTEST[@]}" suites/connector -n 2 -W ignore::DeprecationWarning \
                --kv-engine vllm "${engine_connectors[@]}" --kvconform-results="$dir/results-engine.json" \
                --junitxml="$dir/junit-engine.xml")
        fi
    fi

    # While the matrix still runs (one process: after the allocator step one core idles, and the matrix waits
    # 30 s for a connector constructor that never returns, CONSTRUCTOR_DEADLINE_S), the connector steps start,
    # all of them: their interpreters import torch and vLLM and collect the suite beside the matrix, and their
    # workers then wait (.ci/vllm_job_start_gate.py) for their step's turn: a gate file the job creates once the
    # matrix has ended and every early step is ready (connectors), or once the step before has ended. So the
    # checks still run one step at a time with nothing of the job beside them; only the start-ups moved.
    local step early=() gate
    if (( ${#BESIDE[@]} )); then
        for step in "${chain[@]}"; do
            local -n cmd=${step}_cmd
            gate=$dir/.turn-$step
            rm -f "$gate" "$gate".ready-*
            KVCONFORM_CI_START_AFTER=$gate PYTHONPATH="$ROOT/.ci:$PYTHONPATH" \
                run_beside "$R" "$step" "0 1" "${cmd[@]}" -p vllm_job_start_gate
            early+=("$step")
            unset -n cmd
        done
    fi
    wait_beside matrix
    for step in "${chain[@]}"; do
        if [[ " ${early[*]} " == *" $step "* ]]; then
            [[ $step == "${chain[0]}" ]] && wait_ready "$dir" "${early[@]}"
            touch "$dir/.turn-$step"
            say "[$R $step] its turn: its checks begin"
            wait_beside "$step"
        else
            local -n cmd=${step}_cmd
            run_step "$R" "$step" "0 1" "${cmd[@]}"
            unset -n cmd
        fi
        if [[ $step == engine && " ${FAILED[*]} " != *" $R engine "* ]]; then
            run_step "$R" scheduler-defects 0 "$venv/bin/python" -m harness.release.scheduler_defects \
                "$dir/results-engine.json"
        fi
    done
    unset KVCONFORM_VLLM_REGISTERED_CONNECTORS
    record "$R" judged total $(( $(date +%s) - judging_start )) "$(judged_cpu "$R")" \
        "the release judged ($JUDGED_STEPS): wall from the first step after the installs to the engine step's end"

    # ---- then vLLM's own tests on the reference (upstream) and the throughput figures (benchmarks) ----
    # The benchmarks, timed once in one process (no xdist), in the background beside the upstream step: their
    # verdicts are block tables, and each figure is a ratio of rounds interleaved in one process (reference, vLLM),
    # so load from the step beside lands on both sides alike.
    if [[ -n $(gap "$R" benchmarks) ]]; then skip "$R" benchmarks "$(gap "$R" benchmarks)"; else
        KVCONFORM_BENCHMARK_MAX_ROUNDS=1 run_beside "$R" benchmarks 0 "${PYTEST[@]}" \
            suites/benchmarks/test_allocator_throughput.py suites/benchmarks/test_block_pool_throughput.py -p no:xdist \
            --kvconform-results="$dir/results-benchmarks.json" --junitxml="$dir/junit-benchmarks.xml"
    fi

    # The whole tests/v1/core folder; the floor is the release's recorded pass rate on it
    # (upstream_floor in reference_impl/releases.toml; docs/upstream-tests.md), unless the variable overrides it.
    if [[ -n $(gap "$R" upstream) ]]; then skip "$R" upstream "$(gap "$R" upstream)"; else
        KVCONFORM_CI_VLLM_VERSION=$R run_step "$R" upstream 0 scripts/upstream-vllm-tests.sh "$venv" "$dir/upstream" \
            ${KVCONFORM_UPSTREAM_MIN_PASS_RATE:+--min-pass-rate "$KVCONFORM_UPSTREAM_MIN_PASS_RATE"}
    fi
    wait_beside

    # One results file and one report per release (exit 1 = the report lists failing cells, e.g. the findings
    # on vLLM's connectors: rendered all the same); the throughput table goes to the log too.
    local results=("$dir"/results-*.json)
    if [[ -n $(gap "$R" report) ]]; then skip "$R" report "$(gap "$R" report)"
    elif [[ -e ${results[0]} ]]; then
        run_step "$R" report "0 1" bash -c '"$1/bin/kvconform" merge "${@:3}" -o "$2/results.json.gz" >/dev/null || exit 2
            "$1/bin/kvconform" report --from "$2/results.json.gz" --output-dir "$2"' _ "$venv" "$dir" "${results[@]}"
        if [[ -f $dir/compatibility.md ]]; then
            awk '/^## Throughput/{on=1} on && /^## / && !/^## Throughput/{exit} on' "$dir/compatibility.md"
        fi
    fi
    # The release's judging as the clock saw it: steps that ran beside each other count once (the summary adds
    # up the steps' CPU seconds).
    record "$R" judging total $(( $(date +%s) - judging_start )) "" "wall from the first step after the install to the report"
}

# remove_venv RELEASE: frees the venv this job installed for RELEASE (and the release's wheel), unless the venvs
# are prebuilt or KVCONFORM_CI_VLLM_KEEP_VENVS=1.
remove_venv() {
    local venv
    venv=$(installed_venv "$1")
    [[ -z $VENV_ROOT && ${KVCONFORM_CI_VLLM_KEEP_VENVS:-0} != 1 && -d $venv ]] || return 0
    rm -rf "$venv" "${KVCONFORM_CACHE_DIR:-.cache}"/wheels/vllm-"$1"-*.whl
    say "[$1] removed its venv $venv and wheel ($(free_gib "$venv") GiB free now; KVCONFORM_CI_VLLM_KEEP_VENVS=1 keeps them)"
}

# The summary: per release, each step's status, wall and CPU time and note (skip reasons in full), and install
# against judging time; rendered by .ci/vllm-summary.sh from the two plain files beside it (the workflow's last job
# renders every runner's together). Written on the way out whatever ends the job (a failed step, a bash error, an
# interrupt or a runner's time limit), so the figures of the steps that did run are never lost; a step cut short
# is listed as "interrupted" with the time it had run.
IN_FLIGHT=""      # "release|step|start" of the step running in the foreground now
finish() {
    local status=$? release step t0 entry pid
    trap - EXIT
    if [[ -n $IN_FLIGHT ]]; then
        IFS='|' read -r release step t0 <<< "$IN_FLIGHT"
        record "$release" "$step" interrupted $(( $(date +%s) - t0 )) 0 \
            "the job ended (exit status $status) while this step ran; its CPU time was not measured"
        FAILED+=("$release $step")
    fi
    for entry in "${BESIDE[@]}"; do  # steps still running in the background: stopped, listed as interrupted
        IFS='|' read -r pid release step <<< "$entry"
        kill_tree "$pid"
        record "$release" "$step" interrupted 0 0 "the job ended (exit status $status) while this step ran beside others"
        FAILED+=("$release $step")
    done
    cpu_seconds
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), releases ${RELEASES[*]}, total $(( $(date +%s) - start ))s wall, $CPU_NOW CPU s;" \
         "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); disk: $free_at_start GiB free at the start," \
         "$(free_gib .cache) GiB at the end" > "$OUT/summary-head.txt"
    if (( ${#SUMMARY_ROWS[@]} )); then printf '%s\n' "${SUMMARY_ROWS[@]}"; fi > "$OUT/summary-rows.txt"
    .ci/vllm-summary.sh "$OUT" > "$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
    cat "$OUT/summary.md"
    if (( ${#FAILED[@]} )); then
        say "failed: ${FAILED[*]}" >&2
        (( status )) || status=1
    elif (( status == 0 )); then
        say "every release passed its steps (skips listed above, with reasons)"
    fi
    exit "$status"
}

start=$(date +%s)
free_at_start=$(free_gib .cache)
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
say "releases (newest first): ${RELEASES[*]}; $free_at_start GiB free on the disk of .cache"
for R in "${RELEASES[@]}"; do
    run_release "$R"
    remove_venv "$R"
done
exit 0
