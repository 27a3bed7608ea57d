"""vLLM's own allocator tests (`tests/v1/core`), run on vLLM and then on the reference allocator.

    python -m harness.upstream.vllm_core_tests --vllm-python .cache/venvs/vllm-0.33.0/bin/python \
        --work .cache/upstream --out .cache/upstream/upstream-vllm-0.33.0.json

1. The vLLM source distribution is downloaded from PyPI at run time (checked against the index's SHA-256;
   cached in --work); only its `tests/` tree and `pyproject.toml` (pytest markers) are extracted. No vLLM
   code is committed to kvconform.
2. The allocator test files run with the vLLM venv's Python on vLLM itself; tests that do not pass there on
   CPU (HF hub access, an accelerator, ...) are excluded, each with the reason pytest gave.
3. The same files run again on a staged copy whose imports go through `import_mapping` (the reference's
   `reference_impl.kv_cache` in place of `vllm.v1.core.*` and `vllm.v1.kv_cache_interface`).
4. The JSON records, per test, the outcome on vLLM and on the reference; one summary line is printed.

Exit status: 0, or 1 when `--min-pass-rate` is given and the reference passes a smaller share of the tests
that pass on vLLM; 2 for bad arguments or a download/extraction failure.
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
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

from harness.atomic_write import write_text_atomic
from harness.upstream.import_mapping import MAPPED_MODULES, stage_mapped_tests
from reference_impl.kv_cache.release import ENV_VAR as ALLOCATOR_RELEASE_ENV

__all__ = ["TEST_FILES", "download_sdist", "extract_tests", "run_pytest", "read_junit", "compare", "main"]

# The allocator test files of vLLM's `tests/v1/core` (issue 10's list).
TEST_FILES = (
    "tests/v1/core/test_prefix_caching.py",
    "tests/v1/core/test_single_type_kv_cache_manager.py",
    "tests/v1/core/test_kv_cache_utils.py",
    "tests/v1/core/prefix_cache/test_partial_prefix_cache_primitives.py",
    "tests/v1/core/prefix_cache/test_partial_prefix_cache_hits.py",
)

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
    for test_file in TEST_FILES:
        if not (root / test_file).is_file():
            raise UpstreamError(f"{sdist.name} has no {test_file}")
    return root


def run_pytest(python: str, root: Path, junit: Path, extra_path: list[Path], workers: int,
               log: Path, files: tuple[str, ...] = TEST_FILES, extra_env: dict[str, str] | None = None) -> int:
    """Run TEST_FILES under `root` with `python`, vLLM's pytest markers and no conftest (vLLM's root
    conftest needs the HF hub and model-test dependencies that these files do not use)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in [root, *extra_path])
    env.setdefault("HF_HUB_OFFLINE", "1")  # fail fast instead of retrying the network
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.update(extra_env or {})
    cmd = [python, "-m", "pytest", "-c", "pyproject.toml", "--rootdir", str(root), "--noconftest",
           "-p", "no:cacheprovider", "-p", "no:kvconform", "-q", f"--junitxml={junit}", *files]
    if workers > 1:
        cmd += ["-n", str(workers)]
    with open(log, "w") as out:
        return subprocess.run(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT).returncode


def read_junit(path: Path) -> dict[str, dict]:
    """Per test id ('file::name'): {'outcome': passed|failed|error|skipped, 'reason': first message line}."""
    if not path.exists():
        raise UpstreamError(f"pytest wrote no JUnit file {path} (see its log)")
    results: dict[str, dict] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name')}" if module else case.get("name", "")
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
        ref = on_reference.get(test_id, {"outcome": "missing", "reason": "not collected on the reference"})
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
            "pass_rate": round(rate, 4), "tests": tests}


def summary_line(version: str, result: dict) -> str:
    """The one line the CI log and docs/reference.md quote."""
    return (f"upstream: vLLM {version} tests/v1/core allocator tests: {result['collected']} collected, "
            f"{result['pass_on_vllm']} pass on vLLM (CPU), {result['pass_on_reference']} of them pass on the "
            f"reference ({100 * result['pass_rate']:.1f}%)")


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m harness.upstream.vllm_core_tests",
                                     description="Run vLLM's own allocator tests on vLLM and on the reference.")
    parser.add_argument("--vllm-python", required=True, help="Python of a venv with vLLM installed")
    parser.add_argument("--vllm-version", default="0.33.0")
    parser.add_argument("--work", type=Path, default=Path(".cache/upstream"))
    parser.add_argument("--out", type=Path, help="JSON results (default: WORK/upstream-vllm-VERSION.json)")
    parser.add_argument("--workers", type=int, default=1, help="pytest-xdist workers (1: no xdist)")
    parser.add_argument("--only", action="append", default=None, metavar="FILE",
                        help="run only this one of the test files (repeatable; for iterating on one file)")
    parser.add_argument("--min-pass-rate", type=float, default=None,
                        help="fail (exit 1) below this share, 0..1, of vLLM-passing tests passing on the reference")
    args = parser.parse_args(argv)
    if not Path(args.vllm_python).exists():
        print(f"upstream: --vllm-python {args.vllm_python!r} does not exist", file=sys.stderr)
        return 2
    if args.min_pass_rate is not None and not 0.0 <= args.min_pass_rate <= 1.0:
        print(f"upstream: --min-pass-rate must be in 0..1, got {args.min_pass_rate}", file=sys.stderr)
        return 2
    files = TEST_FILES
    if args.only:
        unknown = [f for f in args.only if f not in TEST_FILES]
        if unknown:
            print(f"upstream: --only {unknown[0]!r} is not one of: {', '.join(TEST_FILES)}", file=sys.stderr)
            return 2
        files = tuple(args.only)
    work = args.work.resolve()
    out = args.out or work / f"upstream-vllm-{args.vllm_version}.json"
    try:
        sdist = download_sdist(args.vllm_version, work)
        vllm_root = extract_tests(sdist, work / "vllm")
        ref_root = work / "reference" / vllm_root.name
        stage_mapped_tests(vllm_root, ref_root)
        outcomes = {}
        # The reference follows the release whose tests run where releases differ (reference_impl.kv_cache.release).
        ref_env = {ALLOCATOR_RELEASE_ENV: args.vllm_version}
        for target, root, extra, env in (("vllm", vllm_root, [], None), ("reference", ref_root, [_REPO_ROOT], ref_env)):
            junit = work / f"junit-{target}.xml"
            junit.unlink(missing_ok=True)
            run_pytest(args.vllm_python, root, junit, extra, args.workers, work / f"pytest-{target}.log", files, env)
            outcomes[target] = read_junit(junit)
    except UpstreamError as exc:
        print(f"upstream: {exc}", file=sys.stderr)
        return 2
    result = compare(outcomes["vllm"], outcomes["reference"])
    result = {"vllm_version": args.vllm_version, "files": list(files),
              "mapped_modules": MAPPED_MODULES, **result}
    write_text_atomic(out, json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(summary_line(args.vllm_version, result))
    print(f"upstream: per-test outcomes in {out}")
    if args.min_pass_rate is not None and result["pass_rate"] < args.min_pass_rate:
        print(f"upstream: pass rate {result['pass_rate']:.3f} is below --min-pass-rate {args.min_pass_rate}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
