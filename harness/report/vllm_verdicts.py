"""The run verdicts of vLLM's connectors on one release, as data: one JSON file per release under
`docs/vllm-connector-verdicts/`, and the README's tables of them.

    python -m harness.report.vllm_verdicts write RESULTS.json... -o docs/vllm-connector-verdicts/0.34.0.json
    python -m harness.report.vllm_verdicts readme docs/vllm-connector-verdicts/*.json

`write` reads the results files of the CI vLLM job's connector steps on one release (`connectors`, `lmcache`,
`engine`: `.ci/vllm-job.sh`) and writes, per connector that ran or could not run, its HMA verdict, its root causes
(`harness.report.vllm_findings`, classified by structured keys), the checks that ran and the cell counts. `readme`
prints the README's tables from such files (releases side by side, vLLM's example connectors in a block of their
own). The file's format (`FORMAT`), one object:

    {"format": "kvconform-vllm-connector-verdicts/1", "release": "0.34.0", "suite_commit": "...",
     "generated_by": "python -m harness.report.vllm_verdicts write ...", "results": ["results-connectors.json", ...],
     "connectors": [{"connector": "OffloadingConnector", "engine": "kvconform" | "vllm",
                     "block": "deployed" | "example",
                     "verdict": "pass" | "fail" | "not-exercised" | "no-hma" | "unknown" | "cannot-run",
                     "symbol": "✅" | "❌" | "➖" | "❔" | "⛔", "hma_verdict": "<the report's sentence>",
                     "cause": "<root causes, '; '-joined, or why it could not run>",
                     "declares_hma": true, "cells": {"passed": 0, "failed": 0, "n/a": 0, "inconclusive": 0,
                     "not run": 0, "error": 0}, "checks_ran": ["C01", ...], "multi_group_checks_ran": ["C05", ...],
                     "findings": [{"root": "...", "verdict": "connector bug" | "unclassified", "upstream": "...",
                                   "checks": ["C06"], "cells": 3}],
                     "wall_s": 12.3}, ...]}
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter

from harness.atomic_write import write_text_atomic
from harness.errors import UsageError
from harness.report.connector_section import DECLARATION_CHECK_IDS, declares_hma, hma_verdict, is_multi_group
from harness.report.vllm_findings import (ENGINE_SUFFIX, by_vllm_connector, connector_status, findings_of,
                                          split_ran)
from harness.results_model import load_results
from harness.targets.vllm_connector_facts import is_example

FORMAT = "kvconform-vllm-connector-verdicts/1"
# The HMA verdict's first character -> the file's verdict word ("➖" is split by what the sentence says).
_VERDICTS = {"✅": "pass", "❌": "fail", "❔": "unknown"}
STATUSES = ("passed", "failed", "error", "n/a", "inconclusive", "not run")


def _verdict_word(sentence: str) -> str:
    symbol = sentence[:1]
    if symbol == "➖":
        return "no-hma" if "does not declare" in sentence else "not-exercised"
    return _VERDICTS.get(symbol, "unknown")


def _check_id(entry: dict) -> str:
    return str((entry.get("cell") or {}).get("check", "?")).split(" ")[0]


def connector_verdict(name: str, items: list[dict]) -> dict:
    """The verdict record of one connector that ran (`name` as the findings page names it)."""
    sentence = hma_verdict(name.removesuffix(ENGINE_SUFFIX), items)
    findings = findings_of(name, items)
    ran = [e for e in items if e["status"] in ("passed", "failed")]
    multi = sorted({_check_id(e) for e in ran if is_multi_group(e) and _check_id(e) not in DECLARATION_CHECK_IDS})
    counts = Counter(connector_status(e) for e in items)
    roots = [f.known.root if f.known else f"unclassified ({f.key})" for f in findings]
    return {
        "connector": name.removesuffix(ENGINE_SUFFIX),
        "engine": "vllm" if name.endswith(ENGINE_SUFFIX) else "kvconform",
        "block": "example" if is_example(name.removesuffix(ENGINE_SUFFIX)) else "deployed",
        "verdict": _verdict_word(sentence),
        "symbol": sentence[:1],
        "hma_verdict": sentence,
        "cause": "; ".join(roots),
        "declares_hma": declares_hma(items),
        "cells": {status: counts[status] for status in STATUSES},
        "checks_ran": sorted({_check_id(e) for e in ran}),
        "multi_group_checks_ran": multi,
        "findings": [{"root": f.known.root if f.known else f"unclassified ({f.key})",
                      "verdict": f.known.verdict if f.known else "unclassified",
                      "upstream": f.known.upstream if f.known else "",
                      "checks": list(f.checks), "cells": f.count} for f in findings],
        "wall_s": round(sum(float(e.get("duration") or 0) for e in items), 1),
    }


def verdicts(entries: list[dict], results: list[str], commit: str | None) -> dict:
    """The verdicts file's object for the entries of one release's runs."""
    by_connector, versions = by_vllm_connector(entries)
    if len(versions) != 1:
        raise UsageError(f"results: the verdicts file is of one vLLM release; these results are of "
                         f"{', '.join(sorted(versions)) or 'none'}")
    ran, unavailable = split_ran(by_connector)
    records = [connector_verdict(name, items) for name, items in ran.items()]
    for name, reason in unavailable.items():
        records.append({"connector": name.removesuffix(ENGINE_SUFFIX),
                        "engine": "vllm" if name.endswith(ENGINE_SUFFIX) else "kvconform",
                        "block": "example" if is_example(name.removesuffix(ENGINE_SUFFIX)) else "deployed",
                        "verdict": "cannot-run", "symbol": "⛔", "hma_verdict": "", "cause": reason,
                        "declares_hma": None, "cells": {}, "checks_ran": [], "multi_group_checks_ran": [],
                        "findings": [], "wall_s": 0.0})
    records.sort(key=lambda r: (r["block"] != "deployed", r["connector"].lower(), r["engine"]))
    return {"format": FORMAT, "release": versions.pop(), "suite_commit": commit,
            "generated_by": "python -m harness.report.vllm_verdicts write " + " ".join(results),
            "results": results, "connectors": records}


def load_verdicts(path: str) -> dict:
    """A verdicts file; UsageError naming the file when it is not one."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read a verdicts file: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"{path}: format is {data.get('format') if isinstance(data, dict) else None!r}; "
                         f"accepted: {FORMAT!r}")
    return data


def readme_tables(files: list[dict]) -> str:
    """The README's tables: connectors people deploy, then vLLM's example connectors, each connector's verdict
    and root causes per release (the releases in the order given), connectors that ran on some release only."""
    releases = [f["release"] for f in files]
    rows: dict[tuple[str, str, str], dict[str, dict]] = {}
    for data in files:
        for record in data["connectors"]:
            if record["verdict"] == "cannot-run":
                continue
            rows.setdefault((record["block"], record["connector"], record["engine"]), {})[data["release"]] = record
    lines = []
    for block, title in (("deployed", "Connectors people deploy"),
                         ("example", "vLLM's example connectors (and kvconform's MultiConnector pairing with one as "
                                     "a child), apart from the connectors people deploy")):
        keys = sorted(k for k in rows if k[0] == block)
        if not keys:
            continue
        lines += [f"{title}:", "", "| connector | " + " | ".join(f"{r}: HMA verdict, failing cells, root causes"
                                                                   for r in releases) + " |",
                  "| --- |" + " --- |" * len(releases)]
        for key in keys:
            name = key[1] + (" (vLLM's scheduler)" if key[2] == "vllm" else "")
            cells = []
            for release in releases:
                record = rows[key].get(release)
                if record is None:
                    cells.append("not run")
                    continue
                cells.append(f"{record['symbol']} {_short_verdict(record)}; {record['cells'].get('failed', 0)} failed"
                             + (f": {record['cause']}" if record["cause"] else ""))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _short_verdict(record: dict) -> str:
    """'declares HMA and may (N multi-group checks ran)', 'declares HMA, not exercised: <reason>', ..."""
    verdict = record["verdict"]
    if verdict == "pass":
        return f"declares HMA and may ({len(record['multi_group_checks_ran'])} multi-group checks ran)"
    if verdict == "fail":
        return "declares HMA, fails MUST checks on multi-group models"
    if verdict == "no-hma":
        return "does not declare HMA"
    reason = record["hma_verdict"].split("not exercised", 1)[-1].lstrip(": ").rstrip(".")
    if verdict == "not-exercised":
        return f"declares HMA, not exercised: {reason}"
    return f"unknown: {reason}" if reason else "unknown"


def main(argv: list[str] | None = None) -> int:
    """`write` a release's verdicts file, or print the README's tables (`readme`)."""
    parser = argparse.ArgumentParser(prog="python -m harness.report.vllm_verdicts", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="a release's verdicts file from its results files")
    write.add_argument("results", nargs="+")
    write.add_argument("-o", "--output", required=True)
    readme = sub.add_parser("readme", help="the README's tables from verdicts files (releases in the order given)")
    readme.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            documents = [load_results(path) for path in args.results]
            entries = [e for document in documents for e in document.results]
            data = verdicts(entries, [p.rsplit("/", 1)[-1] for p in args.results],
                            documents[0].run_info.get("git_commit"))
            write_text_atomic(args.output, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
        else:
            sys.stdout.write(readme_tables([load_verdicts(path) for path in args.files]))
    except UsageError as exc:
        print(f"vllm_verdicts: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
