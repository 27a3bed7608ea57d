"""What a connector did when the connector suite ran its real class on a vLLM release: the "run" half of the
support table's cells (`harness.report.support_section`).

One record per connector and release (`RunVerdict`), from two sources:

- a run-verdict file, by default the committed `harness/report/connector_runs.json`: reviewed verdicts, each
  with its cause and a link to the evidence (a docs page and section), written from the CI vLLM job's results
  (vLLM's connectors and LMCache's, `docs/vllm-connectors.md`);
- the results being reported: connector-suite entries of a vLLM connector (`vllm-<release>:<Name>`, merged from
  the CI job with `kvconform merge`), judged by `harness.report.connector_section.hma_verdict`.

- the per-release verdict files of the rejudged CI runs, `docs/vllm-connector-verdicts/<release>.json` (format
  `kvconform-vllm-connector-verdicts/1`, `harness.report.vllm_verdicts`): each connector's verdict on kvconform's
  engine, its cause, the file itself as the evidence. They are the newer measurement: for a connector and release
  both have, they win over the committed run-verdict file.

A record of a file wins over one from the results for the same connector and release: it carries the reviewed
cause. The run-verdict file is JSON, a list of records or `{"runs": [...]}`; each record:

    {"connector": "LMCacheMPConnector", "release": "0.34.0", "verdict": "fail",
     "cause": "lmcache 0.5.6 reads `resumed_req_ids`, which vLLM 0.34.0 removed, on every step",
     "evidence": "docs/vllm-connectors.md#lmcache-on-vllm-0340-and-0130-hand-written",
     "with": "lmcache 0.5.6"}

`verdict` is the connector's HMA verdict on multi-group models: `pass` (every MUST check that applies passes),
`fail` (a MUST check fails), `not-exercised` (it ran, but no multi-group behaviour was judged), `not-run` (the
suite could not run it: `cause` says what is missing) or `unknown`. `evidence` is a path from the repository
root with an optional `#anchor`, or `#anchor` of the report itself; `with` names the package version the run
used, where one matters. Other keys are ignored.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference_impl.releases import version_order_key

RUNS_FILE = Path(__file__).with_name("connector_runs.json")
VERDICTS_DIR = Path(__file__).resolve().parents[2] / "docs" / "vllm-connector-verdicts"
VERDICTS_FORMAT = "kvconform-vllm-connector-verdicts/"
# A verdict file's words -> the run verdicts here (a connector without SupportsHMA was run without HMA; one that
# cannot run here, or has no preset it applies to, was not judged).
_FILE_VERDICTS = {"no-hma": "not-exercised", "cannot-run": "not-run", "not-applicable": "not-run"}
VERDICTS = ("pass", "fail", "not-exercised", "not-run", "unknown")
# other spellings a summary may use for the same verdicts
_SYNONYMS = {"passed": "pass", "ok": "pass", "failed": "fail", "not_exercised": "not-exercised", "n/a": "not-exercised",
             "na": "not-exercised", "not_run": "not-run", "cannot-run": "not-run", "skipped": "not-run"}
SYMBOLS = {"pass": "✅", "fail": "❌", "not-exercised": "➖", "not-run": "❔", "unknown": "❔"}
_RELEASE = re.compile(r"^\d+\.\d+\.\d+\S*$")


@dataclass(frozen=True)
class RunVerdict:
    """What `connector` did with HMA when the connector suite ran it on vLLM `release`."""

    connector: str
    release: str
    verdict: str
    cause: str = ""
    evidence: str = ""
    with_package: str = ""


class RunFileError(ValueError):
    """A run-verdict file that does not follow the schema (the message names the field, the value, what is accepted)."""


def _field(record: dict, index: int, key: str, required: bool = True) -> str:
    value = record.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise RunFileError(f"runs[{index}].{key}: {value!r} is not accepted; expected a non-empty string")
    return value.strip()


def _run_of(record: dict) -> dict:
    """The run verdict and cause of a verdict file's record. An HMA verdict left unknown because the connector
    fails its checks on single-group models too (a crash on every step) is a failed run: it does not work there,
    whatever its HMA support."""
    verdict = str(record.get("verdict"))
    failed = (record.get("cells") or {}).get("failed") or 0
    if verdict == "unknown" and failed:
        return {"verdict": "fail", "cause": f"fails on every model, single-group too ({failed} cells): "
                                            f"{record.get('cause') or 'see the evidence'}"}
    return {"verdict": _FILE_VERDICTS.get(verdict, verdict)}


def parse_verdicts_file(document: dict, evidence: str) -> list[RunVerdict]:
    """The records of one release's verdict file (`kvconform-vllm-connector-verdicts/1`): the connectors run on
    kvconform's engine, `evidence` (the file's path from the repository root) as their evidence."""
    release = document.get("release")
    if not isinstance(release, str) or not _RELEASE.match(release):
        raise RunFileError(f"{evidence}: release: {release!r} is not accepted; expected a vLLM release X.Y.Z")
    connectors = document.get("connectors")
    if not isinstance(connectors, list):
        raise RunFileError(f"{evidence}: connectors: {type(connectors).__name__} is not accepted; expected a list")
    records = [dict(record, release=release, evidence=evidence, **_run_of(record))
               for record in connectors if isinstance(record, dict) and record.get("engine", "kvconform") == "kvconform"]
    try:
        return parse_runs(records)
    except RunFileError as exc:
        raise RunFileError(f"{evidence}: {exc}") from None


def load_verdict_files(directory: Path = VERDICTS_DIR) -> list[RunVerdict]:
    """The records of every release's verdict file in `directory` (none when it does not exist)."""
    runs: list[RunVerdict] = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise RunFileError(f"{path}: cannot be read as JSON ({exc})") from None
        if isinstance(document, dict) and str(document.get("format", "")).startswith(VERDICTS_FORMAT):
            runs += parse_verdicts_file(document, f"{directory.parent.name}/{directory.name}/{path.name}")
    return runs


def committed_runs() -> list[RunVerdict]:
    """The committed run verdicts: the run-verdict file, then the rejudged verdict files (which win)."""
    return load_runs() + load_verdict_files()


def parse_runs(document: Any) -> list[RunVerdict]:
    """The records of a run-verdict document (a list, or an object with a "runs" list)."""
    records = document.get("runs") if isinstance(document, dict) else document
    if not isinstance(records, list):
        raise RunFileError(f"runs: {type(records).__name__} is not accepted; expected a list of records "
                           "(or an object whose \"runs\" is one)")
    runs = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise RunFileError(f"runs[{index}]: {record!r} is not accepted; expected an object")
        release = _field(record, index, "release")
        if not _RELEASE.match(release):
            raise RunFileError(f"runs[{index}].release: {release!r} is not accepted; expected a vLLM release X.Y.Z")
        verdict = _field(record, index, "verdict").lower()
        verdict = _SYNONYMS.get(verdict, verdict)
        if verdict not in VERDICTS:
            raise RunFileError(f"runs[{index}].verdict: {record['verdict']!r} is not accepted; expected one of "
                               f"{', '.join(VERDICTS)}")
        runs.append(RunVerdict(_field(record, index, "connector"), release, verdict,
                               _field(record, index, "cause", False), _field(record, index, "evidence", False),
                               _field(record, index, "with", False)))
    return runs


def load_runs(path: Path | str | None = None) -> list[RunVerdict]:
    """The records of a run-verdict file (default: the committed one; none when that is absent)."""
    path = Path(path) if path is not None else RUNS_FILE
    if not path.exists() and path == RUNS_FILE:
        return []
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise RunFileError(f"{path}: cannot be read as JSON ({exc})") from None
    return parse_runs(document)


_HMA_SYMBOL_VERDICTS = {"✅": "pass", "❌": "fail", "➖": "not-exercised", "❔": "unknown"}


def runs_from_results(entries: list[dict[str, Any]]) -> list[RunVerdict]:
    """One record per vLLM connector and release the results ran (`vllm-<release>:<Name>` connector entries),
    its verdict as the report's "May each connector declare SupportsHMA?" judges it."""
    from harness.report.connector_section import hma_verdict
    from harness.report.vllm_connectors_section import release_anchor, vllm_connector_of

    grouped: dict[tuple[str, str], list] = defaultdict(list)
    for entry in entries:
        found = vllm_connector_of(entry)
        if found is not None:
            grouped[found].append(entry)
    runs = []
    for (release, connector), found in sorted(grouped.items()):
        if all(e["status"] == "skipped" for e in found):
            reason = next((e.get("message") for e in found if e.get("message")), "")
            runs.append(RunVerdict(connector, release, "not-run", str(reason), f"#{release_anchor(release)}"))
            continue
        line = hma_verdict(connector, found)
        verdict = _HMA_SYMBOL_VERDICTS.get(line[:1], "unknown")
        runs.append(RunVerdict(connector, release, verdict, "" if verdict == "pass" else line[1:].strip(),
                               f"#{release_anchor(release)}"))
    return runs


def combined_runs(entries: list[dict[str, Any]], reviewed: list[RunVerdict]) -> dict[str, list[RunVerdict]]:
    """Connector -> its records, release by release: the reviewed ones, and the results' for the releases the
    reviewed ones lack."""
    by_key = {(run.connector, run.release): run for run in runs_from_results(entries)}
    by_key.update({(run.connector, run.release): run for run in reviewed})
    out: dict[str, list[RunVerdict]] = defaultdict(list)
    for (connector, _), run in sorted(by_key.items(), key=lambda item: (item[0][0], version_order_key(item[0][1]))):
        out[connector].append(run)
    return dict(out)

