"""Random differential of the config resolver against the installed vLLM release.

    PYTHONPATH=. /path/to/vllm-venv/bin/python -m harness.differential --count 600 --seed 34 [--out FILE]

Draws `--count` random cases (`harness.random_cases`) for the installed release, answers each with the
reference resolver (`kvconform resolve`) and with the real vLLM (the `vllm` config target), and compares the
two outcomes field by field: the resolved flag, the warnings in order, the error's type, message and stage,
and whether the outcome is unknown. A case the vLLM target cannot evaluate on this machine (it says unknown
with a reason) is counted apart, not as agreement. Prints every mismatch and one summary line; exit status 1
when a case differs, 0 otherwise, 4 without a usable vLLM.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from typing import Any

from harness.atomic_write import write_text_atomic
from harness.errors import UsageError
from harness.random_cases import CaseGenerator

_COMPARED = ("resolved_disable_hma", "warnings", "error")


def differences(reference: dict[str, Any], vllm: dict[str, Any]) -> list[str]:
    """How the resolver's outcome differs from vLLM's (empty when they agree)."""
    if bool(reference.get("unknown")) != bool(vllm.get("unknown")):
        return [f"unknown: resolver {reference.get('unknown')!r}, vllm {vllm.get('unknown')!r}"]
    if vllm.get("unknown"):
        return []
    return [f"{key}: resolver {reference.get(key)!r}, vllm {vllm.get(key)!r}"
            for key in _COMPARED if reference.get(key) != vllm.get(key)]


def coverage(case: dict[str, Any]) -> list[str]:
    """What a case exercises, for the run's figures (extra configs, speculative methods, trees, HiSparse)."""
    text = repr(case)
    found = []
    if "kv_connector_extra_config" in text:
        found.append("extra_config")
    if "transfer_mode" in text:
        found.append("nixl_transfer_mode")
    if "host_pool_gib" in text:
        found.append("hisparse_host_pool")
    method = case.get("speculative_method")
    if isinstance(method, dict):
        found.append("custom_speculative_method")
    elif method is not None:
        found.append("speculative_method_name")
    if "'children'" in text:
        found.append("grandchildren")
    if case.get("multi_connector_children") is not None:
        found.append("multi_connector")
    if case.get("hisparse") or "HiSparseConnector" in text:
        found.append("hisparse")
    if case.get("kv_offloading_size") is not None:
        found.append("offloading")
    return found


def run(count: int, seed: int, start: int = 0) -> dict[str, Any]:
    """Run the differential; returns the figures and the mismatching cases."""
    from harness.targets.vllm_config import load_target
    from reference_impl.config.cases import resolve_case

    target = load_target()
    generator = CaseGenerator(target.era, target.version, seed)
    tally: Counter = Counter()
    covered: Counter = Counter()
    mismatches = []
    began = time.monotonic()
    for case in generator.cases(count, start):
        covered.update(coverage(case))
        reference, vllm = resolve_case(dict(case)), target(dict(case))
        found = differences(reference, vllm)
        if found:
            tally["mismatch"] += 1
            mismatches.append({"case": case, "differences": found, "resolver": reference, "vllm": vllm})
        elif vllm.get("unknown") and not reference.get("unknown"):
            tally["vllm_not_evaluable"] += 1
        elif vllm.get("unknown"):
            tally["both_unknown"] += 1
        else:
            tally["agree"] += 1
            tally["error" if vllm.get("error") else "resolved"] += 1
            tally["with_warnings"] += bool(vllm.get("warnings"))
    return {"vllm": target.version, "era": target.era, "seed": seed, "start": start, "count": count,
            "seconds": round(time.monotonic() - began, 1), "tally": dict(tally), "coverage": dict(sorted(covered.items())),
            "mismatches": mismatches}


def main(argv: list[str] | None = None) -> int:
    """Command line: run, print the mismatches and a summary, optionally write the JSON report."""
    parser = argparse.ArgumentParser(prog="python -m harness.differential", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=500, help="number of random cases (default 500)")
    parser.add_argument("--seed", type=int, default=34, help="seed of the case sequence (default 34)")
    parser.add_argument("--start", type=int, default=0, help="first case number (to resume a sequence)")
    parser.add_argument("--out", metavar="FILE", help="write the figures and mismatches as JSON")
    args = parser.parse_args(argv)
    if args.count < 1 or args.start < 0:
        parser.error(f"--count {args.count} / --start {args.start}: expected a positive count and a start >= 0")
    try:
        report = run(args.count, args.seed, args.start)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    for item in report["mismatches"]:
        print(f"MISMATCH {json.dumps(item['case'])}")
        for line in item["differences"]:
            print(f"  {line}")
    tally = report["tally"]
    print(f"differential vLLM {report['vllm']} (era {report['era']}), seed {report['seed']}, cases "
          f"{report['start']}..{report['start'] + report['count'] - 1}: {tally.get('agree', 0)} agree "
          f"({tally.get('resolved', 0)} resolved, {tally.get('error', 0)} errors, {tally.get('with_warnings', 0)} "
          f"with warnings), {tally.get('both_unknown', 0)} unknown on both, {tally.get('vllm_not_evaluable', 0)} "
          f"not evaluable on vLLM here, {tally.get('mismatch', 0)} mismatches; {report['seconds']} s")
    print("cases with: " + ", ".join(f"{name} {number}" for name, number in report["coverage"].items()))
    if args.out:
        write_text_atomic(args.out, json.dumps(report, indent=1) + "\n")
    return 1 if report["mismatches"] else 0


if __name__ == "__main__":
    sys.exit(main())
