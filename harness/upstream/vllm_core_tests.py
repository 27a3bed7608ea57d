"""vLLM's own `tests/v1/core` folder, run on vLLM and then on the reference allocator.

    python -m harness.upstream.vllm_core_tests --vllm-python .cache/venvs/vllm-X.Y.Z/bin/python \
        --vllm-version X.Y.Z --work .cache/upstream --out .cache/upstream/upstream-vllm-X.Y.Z.json

(--vllm-version's default: the release registry's newest release with an upstream floor, `upstream_default`.)

1. The vLLM source distribution is downloaded from PyPI at run time (checked against the index's SHA-256;
   cached in --work); only its `tests/` tree and `pyproject.toml` (pytest markers) are extracted. No vLLM
   code is committed to kvconform.
2. The whole `tests/v1/core` folder runs with the vLLM venv's Python on vLLM itself, on vLLM's CPU platform
   (`VLLM_TARGET_DEVICE=cpu`) and an offline Hugging Face cache holding the config.json of every model the
   folder names (`offline_hub`); tests that still do not pass there (weights, an accelerator, ...) are
   excluded, each with the reason pytest gave. The tests reviewed as unable to pass there
   (`harness/upstream/not_on_cpu.toml`: a model class whose module needs a package the CPU install lacks, an
   engine start) are not run while the package they need is absent; they are excluded with their cause's
   reason (`--run-all` runs them, and fails when one passes).
3. The same folder runs again with the allocator swapped for the reference: the test files' imports go
   through `import_mapping`, and `process_alias` makes vLLM's `vllm.v1.core` allocator modules and its spec
   module the reference's for the whole process, so vLLM's `Scheduler` allocates through
   `reference_impl.kv_cache` and vLLM's other code sees the reference's spec classes.
4. The JSON records, per test, the outcome on vLLM and on the reference, and the counts per file; one
   summary line and one line per file are printed.

Exit status: 0, or 1 when the reference passes a smaller share of the tests that pass on vLLM than the
floor (`--min-pass-rate`, else the release's `upstream_floor` in the release registry,
reference_impl/releases.toml; a release without one enforces nothing); 2 for bad arguments or a
download/extraction failure.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.atomic_write import write_text_atomic
from harness.upstream.import_mapping import MAPPED_MODULES, stage_mapped_tests
from harness.upstream.offline_hub import load_model_configs, named_models, write_offline_hub
from harness.upstream.process_alias import PROCESS_MODULES
from harness.upstream.not_on_cpu import NotOnCpuError, not_on_cpu
from harness.upstream.select_tests import DROPPED_SUFFIX, ENV as SELECT_ENV, EXCLUDE_ENV
from reference_impl.kv_cache.release import ENV_VAR as ALLOCATOR_RELEASE_ENV
from reference_impl.releases import RELEASES, upstream_default

__all__ = ["TEST_DIR", "download_sdist", "extract_tests", "run_pytest", "read_junit", "compare", "per_file",
           "main"]

# The folder of vLLM's tests the job runs, whole.
TEST_DIR = "tests/v1/core"

# Per release, the pass-rate floor on the whole folder: the release registry's `upstream_floor` (reviewed data in
# reference_impl/releases.toml, a few points under the share measured when the release was added;
# docs/upstream-tests.md has the figures). Raise it when a mismatch is fixed; a drop below it is a regression of
# the reference.
FLOORS = {row.version: row.upstream_floor for row in RELEASES if row.upstream_floor is not None}
# A release without an entry (not measured yet): its figures are reported and nothing is enforced; the
# job's output says so, and recording a floor is part of adding the release (docs/new-release.md).
DEFAULT_FLOOR = 0.0

_INDEX = "https://pypi.org/simple/{name}/"
_REPO_ROOT = Path(__file__).resolve().parents[2]


class UpstreamError(Exception):
    """A download, extraction or run that could not produce results."""


def download_sdist(version: str, cache_dir: Path, name: str = "vllm") -> Path:
    """The sdist `name-version.tar.gz`, from the cache or from PyPI's JSON simple index (hash-checked)."""
    target = cache_dir / f"{name}-{version}.tar.gz"
    if target.exists():
        return target
    request = urllib.request.Request(_INDEX.format(name=name),
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            index = json.load(response)
    except OSError as exc:
        raise UpstreamError(f"cannot read the PyPI index of {name}: {exc}") from None
    wanted = f"{name}-{version}.tar.gz"
    entry = next((f for f in index.get("files", []) if f.get("filename") == wanted), None)
    if entry is None:
        raise UpstreamError(f"PyPI has no source distribution {wanted}")
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(entry["url"], timeout=600) as response, open(partial, "wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        raise UpstreamError(f"cannot download {entry['url']}: {exc}") from None
    expected = entry.get("hashes", {}).get("sha256")
    if expected and digest.hexdigest() != expected:
        partial.unlink()
        raise UpstreamError(f"{wanted}: sha256 {digest.hexdigest()} does not match the index ({expected})")
    partial.replace(target)
    return target


def extract_tests(sdist: Path, dest: Path) -> Path:
    """Extract `tests/` and `pyproject.toml` of the sdist into `dest`; returns the extracted root."""
    with tarfile.open(sdist) as tar:
        top = tar.getmembers()[0].name.split("/")[0]
        members = [m for m in tar.getmembers()
                   if m.name == f"{top}/pyproject.toml" or m.name.startswith(f"{top}/tests/")]
        if dest.exists():
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        tar.extractall(dest, members=members, filter="data")
    root = dest / top
    if not (root / TEST_DIR).is_dir():
        raise UpstreamError(f"{sdist.name} has no {TEST_DIR}")
    return root


def run_pytest(python: str, root: Path, junit: Path, extra_path: list[Path], workers: int,
               log: Path, files: tuple[str, ...] = (TEST_DIR,), hub_cache: Path | None = None,
               plugins: tuple[str, ...] = (), select: Path | None = None,
               extra_env: dict[str, str] | None = None, exclude: Path | None = None) -> int:
    """Run `files` under `root` with `python`, vLLM's pytest markers and no conftest (vLLM's root
    conftest needs model-test dependencies these files do not use), on vLLM's CPU platform and offline.

    `hub_cache`: the offline Hugging Face cache (`offline_hub`); `plugins`: extra `-p` plugins, loaded
    before any test module is imported; `select`: a file of node ids, the only tests to run
    (`select_tests`); `exclude`: a file of node ids not to run (`select_tests` writes those it left out to the
    file's name plus `.dropped`); `extra_env`: more environment variables."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [root, *extra_path])
    env["HF_HUB_OFFLINE"] = "1"  # the hub is the local cache only: fail fast instead of retrying the network
    env["TRANSFORMERS_OFFLINE"] = "1"
    env["VLLM_TARGET_DEVICE"] = "cpu"  # the CUDA wheel detects no platform on a machine without a GPU
    # vLLM 0.34's CPU platform refuses an x86 machine unless `vllm.triton_utils.HAS_TRITON` holds (its CPU model
    # runner compiles Triton kernels; triton-cpu is not on PyPI). With exactly one active Triton driver or,
    # as on a Ray worker, an empty CUDA_VISIBLE_DEVICES, vLLM keeps HAS_TRITON for the installed Triton. These
    # tests run no kernel: the empty variable lets `VllmConfig` build (300 scheduler tests of 0.34.0 that
    # otherwise stop at "vLLM on x86 CPUs requires Triton (triton-cpu)"); they run on the CPU platform
    # anyway (above), so hiding GPUs changes nothing else.
    env["CUDA_VISIBLE_DEVICES"] = ""
    if select is not None:
        env[SELECT_ENV] = str(select)
    if exclude is not None:
        env[EXCLUDE_ENV] = str(exclude)
    if select is not None or exclude is not None:
        plugins = (*plugins, "harness.upstream.select_tests")
    if hub_cache is not None:
        env["HF_HUB_CACHE"] = str(hub_cache)
        # vLLM inspects each model class once in a subprocess (about a minute on 2 cores) and caches the
        # result under VLLM_CACHE_ROOT: the caller's (the CI job keeps one per release across runs), else one
        # next to the hub, reused by both runs.
        env["VLLM_CACHE_ROOT"] = os.environ.get("VLLM_CACHE_ROOT") or str(hub_cache.with_name("vllm-cache"))
    env.update(extra_env or {})
    cmd = [python, "-m", "pytest", "-c", "pyproject.toml", "--rootdir", str(root), "--noconftest",
           "-p", "no:cacheprovider", "-p", "no:kvconform", *(a for p in plugins for a in ("-p", p)),
           "-q", f"--junitxml={junit}", *files]
    if workers > 1:
        cmd += ["-n", str(workers)]
    with open(log, "w") as out:
        return subprocess.run(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


def _test_id(classname: str, name: str, root: Path | None) -> str:
    """'file.py::[Class::]name' from JUnit's dotted classname: the longest dotted prefix that is a file
    under `root` is the module, the rest test classes (without `root`: the whole classname is the module)."""
    if not classname:  # a file that could not be collected: pytest names the module, dotted
        return name.replace(".", "/") + ".py" if name.startswith("tests.") else name
    parts = classname.split(".")
    cut = len(parts)
    if root is not None:
        cut = next((i for i in range(len(parts), 0, -1) if (root / "/".join(parts[:i])).with_suffix(".py").is_file()),
                   len(parts))
    return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])


def read_junit(path: Path, root: Path | None = None) -> dict[str, dict]:
    """Per test id ('file::name', or 'file::Class::name' when `root` locates the file): {'outcome':
    passed|failed|error|skipped, 'reason': first message line}."""
    if not path.exists():
        raise UpstreamError(f"pytest wrote no JUnit file {path} (see its log)")
    results: dict[str, dict] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = _test_id(case.get("classname", ""), case.get("name", ""), root)
        outcome, reason = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                reason = (node.get("message") or node.text or "").strip().splitlines()[0:1]
                reason = reason[0][:300] if reason else ""
                break
        results[test_id] = {"outcome": outcome, "reason": reason}
    return results


def compare(on_vllm: dict[str, dict], on_reference: dict[str, dict]) -> dict:
    """Per-test outcomes on both targets, the excluded tests with reasons, and the two counts."""
    tests = {}
    passing_on_vllm = passing_on_both = 0
    for test_id in sorted(on_vllm):
        vllm = on_vllm[test_id]
        missing = ("missing", "not collected on the reference") if vllm["outcome"] == "passed" \
            else ("not run", "excluded: it does not pass on vLLM")
        ref = on_reference.get(test_id, {"outcome": missing[0], "reason": missing[1]})
        row = {"vllm": vllm["outcome"], "reference": ref["outcome"]}
        if vllm["outcome"] != "passed":
            row["excluded"] = vllm["reason"] or vllm["outcome"]
        else:
            passing_on_vllm += 1
            if ref["outcome"] == "passed":
                passing_on_both += 1
            else:
                row["reference_reason"] = ref["reason"]
        tests[test_id] = row
    rate = passing_on_both / passing_on_vllm if passing_on_vllm else 0.0
    return {"collected": len(on_vllm), "pass_on_vllm": passing_on_vllm, "pass_on_reference": passing_on_both,
            "pass_rate": round(rate, 4), "files": per_file(tests), "tests": tests}


def per_file(tests: dict[str, dict]) -> dict[str, dict]:
    """Per test file: tests collected, passing on vLLM, and of those passing on the reference."""
    files: dict[str, dict] = {}
    for test_id, row in tests.items():
        counts = files.setdefault(test_id.split("::", 1)[0],
                                  {"collected": 0, "pass_on_vllm": 0, "pass_on_reference": 0})
        counts["collected"] += 1
        if row["vllm"] == "passed":
            counts["pass_on_vllm"] += 1
            counts["pass_on_reference"] += row["reference"] == "passed"
    return dict(sorted(files.items()))


def summary_line(version: str, result: dict) -> str:
    """The one line the CI log and the README quote. The share is computed from the counts (the stored
    `pass_rate` is already rounded to 4 places, and rounding it again can go up: 1100/1130 is 97.3%)."""
    share = result["pass_on_reference"] / result["pass_on_vllm"] if result["pass_on_vllm"] else 0.0
    return (f"upstream: vLLM {version} {TEST_DIR}: {result['collected']} collected, "
            f"{result['pass_on_vllm']} pass on vLLM (CPU), {result['pass_on_reference']} of them pass on the "
            f"reference ({100 * share:.1f}%)")


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m harness.upstream.vllm_core_tests",
                                     description="Run vLLM's own allocator tests on vLLM and on the reference.")
    parser.add_argument("--vllm-python", required=True, help="Python of a venv with vLLM installed")
    parser.add_argument("--vllm-version", default=upstream_default(),
                        help="the release whose tests run (default: the release registry's newest release with an "
                             "upstream floor, %(default)s)")
    parser.add_argument("--work", type=Path, default=Path(".cache/upstream"))
    parser.add_argument("--out", type=Path, help="JSON results (default: WORK/upstream-vllm-VERSION.json)")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (1: no xdist)")
    parser.add_argument("--only", action="append", default=None, metavar="FILE",
                        help=f"run only this file or folder under {TEST_DIR} (repeatable; for iterating on one file)")
    parser.add_argument("--min-pass-rate", type=float, default=None,
                        help="fail (exit 1) below this share, 0..1, of vLLM-passing tests passing on the reference "
                             "(default: the release's upstream_floor in reference_impl/releases.toml; none enforced "
                             "without one)")
    parser.add_argument("--run-all", action="store_true",
                        help="run on vLLM the tests harness/upstream/not_on_cpu.toml lists as unable to pass there too "
                             "(the default leaves them out), and fail (exit 1) when one of them passes: the list is wrong")
    args = parser.parse_args(argv)
    if not Path(args.vllm_python).exists():
        print(f"upstream: --vllm-python {args.vllm_python!r} does not exist", file=sys.stderr)
        return 2
    if args.min_pass_rate is not None and not 0.0 <= args.min_pass_rate <= 1.0:
        print(f"upstream: --min-pass-rate must be in 0..1, got {args.min_pass_rate}", file=sys.stderr)
        return 2
    files: tuple[str, ...] = (TEST_DIR,)
    if args.only:
        outside = [f for f in args.only if not (f + "/").startswith(TEST_DIR + "/")]
        if outside:
            print(f"upstream: --only {outside[0]!r} is not under {TEST_DIR}/", file=sys.stderr)
            return 2
        files = tuple(args.only)
    work = args.work.resolve()
    out = args.out or work / f"upstream-vllm-{args.vllm_version}.json"
    try:
        sdist = download_sdist(args.vllm_version, work)
        vllm_root = extract_tests(sdist, work / "vllm")
        for path in files:
            if not (vllm_root / path).exists():
                raise UpstreamError(f"vLLM {args.vllm_version} has no {path}")
        ref_root = work / "reference" / vllm_root.name
        stage_mapped_tests(vllm_root, ref_root)
        configs = load_model_configs()
        named = named_models(vllm_root / TEST_DIR)
        hub = work / "hf-hub"
        write_offline_hub(hub, {m: c for m, c in configs.items() if m in named})
        missing = sorted(named - set(configs))
        if missing:
            print(f"upstream: no model config for {', '.join(missing)} (their tests run without one)")
        # Tests that cannot pass on vLLM here (reviewed, harness/upstream/not_on_cpu.toml): not run, unless --run-all.
        not_run, present = not_on_cpu(args.vllm_version, args.vllm_python)
        for cause in present:
            print(f"upstream: {cause.needs} is installed: the {len(cause.tests)} tests of not_on_cpu.toml's "
                  f"{cause.name} run")
        exclude = None
        if not_run and not args.run_all:
            exclude = work / "not-on-cpu.txt"
            exclude.write_text("".join(f"{t}\n" for t in sorted(not_run)), encoding="utf-8")
            Path(str(exclude) + DROPPED_SUFFIX).unlink(missing_ok=True)
        outcomes, seconds = {}, {}
        for target in ("vllm", "reference"):
            junit = work / f"junit-{target}.xml"
            junit.unlink(missing_ok=True)
            started = time.monotonic()
            if target == "vllm":
                # harness (the exclusion plugin) after the release's own tests folder on the path, as on the
                # reference run
                run_pytest(args.vllm_python, vllm_root, junit, [_REPO_ROOT] if exclude else [], args.workers,
                           work / "pytest-vllm.log", files, hub_cache=hub, exclude=exclude)
                outcomes["vllm"] = read_junit(junit, vllm_root)
                if exclude is not None:
                    dropped = Path(str(exclude) + DROPPED_SUFFIX)
                    if not dropped.exists():
                        raise UpstreamError(f"the vLLM run wrote no {dropped.name} (see its log)")
                    for test_id in dropped.read_text(encoding="utf-8").split():
                        outcomes["vllm"][test_id] = {"outcome": "not run", "reason": not_run[test_id]}
            else:
                # Only what passed on vLLM is compared: the rest is not run again.
                select = work / "passed-on-vllm.txt"
                select.write_text("".join(f"{t}\n" for t, r in sorted(outcomes["vllm"].items())
                                          if r["outcome"] == "passed"), encoding="utf-8")
                run_pytest(args.vllm_python, ref_root, junit, [_REPO_ROOT], args.workers,
                           work / "pytest-reference.log", files, hub_cache=hub,
                           plugins=("harness.upstream.process_alias",), select=select,
                           # the reference follows the release whose tests run (reference_impl.kv_cache.release)
                           extra_env={ALLOCATOR_RELEASE_ENV: args.vllm_version})
                outcomes["reference"] = read_junit(junit, ref_root)
            seconds[target] = round(time.monotonic() - started)
    except (UpstreamError, NotOnCpuError) as exc:
        print(f"upstream: {exc}", file=sys.stderr)
        return 2
    result = compare(outcomes["vllm"], outcomes["reference"])
    result = {"vllm_version": args.vllm_version, "paths": list(files), "mapped_modules": MAPPED_MODULES,
              "process_modules": PROCESS_MODULES, "models_without_config": missing, "wall_seconds": seconds,
              **result}
    write_text_atomic(out, json.dumps(result, indent=1, sort_keys=True) + "\n")
    left_out = sum(row["vllm"] == "not run" for row in result["tests"].values())
    if left_out:
        print(f"upstream: {left_out} tests not run on vLLM: they cannot pass there (harness/upstream/not_on_cpu.toml, "
              "each with its reason in the JSON; --run-all runs them)")
    wrong = sorted(t for t in not_run if result["tests"].get(t, {}).get("vllm") == "passed") if args.run_all else []
    for test_id in wrong:
        print(f"upstream: {test_id} passes on vLLM: not_on_cpu.toml should not list it")
    print(summary_line(args.vllm_version, result) + f" [{seconds['vllm']} s on vLLM, {seconds['reference']} s on the "
          "reference]")
    for path, counts in result["files"].items():
        print(f"upstream:   {path}: {counts['collected']} collected, {counts['pass_on_vllm']} pass on vLLM, "
              f"{counts['pass_on_reference']} of them on the reference")
    print(f"upstream: per-test outcomes in {out}")
    floor = args.min_pass_rate if args.min_pass_rate is not None else FLOORS.get(args.vllm_version, DEFAULT_FLOOR)
    origin = "--min-pass-rate" if args.min_pass_rate is not None else (
        f"the recorded floor of {args.vllm_version}" if args.vllm_version in FLOORS
        else f"no floor recorded for {args.vllm_version}: nothing enforced")
    if not args.only:
        print(f"upstream: floor {floor} ({origin})")
    if args.only:
        print("upstream: --only runs part of the folder: no floor applies")
    elif result["pass_rate"] < floor:
        print(f"upstream: pass rate {result['pass_rate']:.3f} is below {origin} ({floor})")
        return 1
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
