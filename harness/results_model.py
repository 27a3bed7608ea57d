"""The results file (`reports/results.json.gz`): its schema, loading with validation, and cell identity.

A results file is JSON, gzip-compressed where its name ends in `.gz` (`kvconform report` writes
`results.json.gz`: the full run's 25 MB of JSON is about 1 MB compressed); every reader accepts either,
whatever the name says (`load_results` looks at the first bytes).

A results document is one JSON object::

    {"format": "kvconform-results", "schema_version": 5,
     "run_info": {...},             # the run (for a merged file: a summary of the runs)
     "runs": [{...}, ...],          # every run's own run_info (one entry for a single run)
     "results": [entry, ...]}

and each entry describes one test::

    {"id": nodeid, "suite": "config" | "allocator" | "connector" | "benchmark" | other,
     "cell": {...} | null,          # the suite's parameters as recorded with kvconform_record
     "params": {...},               # pytest's parametrize values (JSON-safe), for tests without a record
     "status": "passed" | "failed" | "skipped" | "error",
     "expected": ..., "actual": ...,
     "message": str | null,         # skip reason or failure summary
     "not_applicable": {"kind", "reason", "release", "refuses", "check", "preset"} | null,
     "skip_cause": {"kind", "reason", "needs", "packages"} | null,
     "duration": seconds, "run": index into "runs", "extra": {...}}

A skipped entry with a `not_applicable` record (`harness.outcomes`: kind profile, declaration, release, engine or
feature; the release that lacks an API) has the status "not applicable" (`status_of`); it stays "skipped" in the
file, as pytest counts it. A skipped entry with a `skip_cause` record (kind cannot-run-here or inconclusive)
stays "skipped"; the record says why, so no reader parses the message. Older files are read too: schema 1
(before the `not_applicable` record) gets the record its skips' wording implies
(`harness.outcomes.legacy_record`); schemas 1 and 2 (before `skip_cause`, and before a record kept its check
and preset apart from its reason) get the skip causes and those fields their wording implies
(`harness.outcomes.legacy_skip_cause`, `legacy_fields`), so they render and diff as they always did.

A config entry's `actual` (and the oracle's `expected`) is an outcome of `kvconform resolve`'s schema, the typed
outcome's JSON form (`reference_impl.config.outcome.Outcome`): each warning `{"id", "text"}`, the error
`{"id", "type", "stage", "text"}`, the ids given by the target that met the texts. Schema 4 is that form; files of
schemas 1 to 3 kept the warnings as texts (their ids in `warning_ids` beside them, or none before ids were given) and
the error's text under `message`: their config outcomes are read into the typed form as they are loaded
(`reference_impl.config.outcome.upgrade`), so they render and diff against newer files as they always did.

A connector entry whose cell names a model preset carries the number of KV cache groups of the model it ran,
`extra.num_kv_cache_groups` (`GROUPS_KEY`; schema 5): the report judges multi-group behaviour by it, and reads no
preset table of its own. Files of schemas 1 to 4 get it from their presets' names as they are loaded
(`reference_impl.engine.presets`, only for such files: it imports torch); a preset this kvconform does not know
gets none, and counts as single-group, as it did before the field.

Two entries describe the same *cell* when their suite and cell agree (or, without a cell, their test ids);
`merge` and `diff` compare cells by their *outcome*: the status and the target's actual result.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import json_error_text
from harness.outcomes import KINDS, SKIP_KINDS, legacy_fields, legacy_record, legacy_skip_cause

FORMAT = "kvconform-results"
GZIP_SUFFIX = ".gz"
_GZIP_MAGIC = b"\x1f\x8b"
SCHEMA_VERSION = 5
#: Schemas this kvconform reads: 1 lacks the `not_applicable` record, 2 the `skip_cause` record and the record's
#: `check` and `preset` (read from the skip's message instead); 1 to 3 keep config outcomes in the older form (read
#: into the typed one); 1 to 4 lack a connector entry's KV cache group count (read from its preset's name).
READABLE_SCHEMAS = (1, 2, 3, 4, 5)
#: The first schema whose config outcomes are in the typed form.
TYPED_OUTCOMES_SCHEMA = 4
#: The first schema whose connector entries carry their model's KV cache group count.
GROUP_COUNTS_SCHEMA = 5
#: The key in a connector entry's `extra` under which its suite records how many KV cache groups the model of the
#: cell's preset has (absent for a cell without a preset).
GROUPS_KEY = "num_kv_cache_groups"
STATUSES = ("passed", "failed", "skipped", "error")
#: What `status_of` tells apart: a skip with a `not_applicable` record is not applicable.
NOT_APPLICABLE = "not applicable"
REQUIRED_ENTRY_KEYS = ("id", "suite", "status")


class ResultsFileError(ValueError):
    """A results file that cannot be used: missing, not JSON, not kvconform's, or malformed."""


@dataclass
class ResultsDocument:
    """A loaded (or freshly collected) results document."""

    run_info: dict[str, Any]
    results: list[dict[str, Any]]
    runs: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.runs:
            self.runs = [self.run_info]

    def to_json(self) -> dict[str, Any]:
        """The document as the JSON object written to disk."""
        return {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "run_info": self.run_info,
            "runs": self.runs,
            "results": self.results,
        }

    def dumps(self) -> str:
        """Serialise deterministically: the header indented, then one result entry per line.

        One entry per line keeps big files fast to write (json's C encoder) and friendly to line diffs.
        """
        head = {k: v for k, v in self.to_json().items() if k != "results"}
        text = json.dumps(head, indent=1, ensure_ascii=False)
        entries = ",\n".join(json.dumps(entry, ensure_ascii=False) for entry in self.results)
        return f'{text[:-2]},\n "results": [\n{entries}\n ]\n}}\n' if entries else f'{text[:-2]},\n "results": []\n}}\n'

    def encode_for(self, path: str | os.PathLike) -> str | bytes:
        """What to write at `path`: the JSON text, gzip-compressed where the name ends in `.gz` (with no
        timestamp in the gzip header, so the same run gives the same bytes)."""
        text = self.dumps()
        if os.fspath(path).endswith(GZIP_SUFFIX):
            return gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)
        return text


def make_entry(
    *,
    nodeid: str,
    suite: str,
    status: str,
    cell: dict | None = None,
    params: dict | None = None,
    expected: Any = None,
    actual: Any = None,
    message: str | None = None,
    not_applicable: dict | None = None,
    skip_cause: dict | None = None,
    duration: float = 0.0,
    extra: dict | None = None,
    run: int = 0,
) -> dict[str, Any]:
    """One results entry with every key present, in the documented order."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r} is not one of {', '.join(STATUSES)}")
    return {
        "id": nodeid,
        "suite": suite,
        "cell": cell,
        "params": params or {},
        "status": status,
        "expected": expected,
        "actual": actual,
        "message": message,
        "not_applicable": not_applicable,
        "skip_cause": skip_cause,
        "duration": round(float(duration), 6),
        "run": run,
        "extra": extra or {},
    }


def status_of(entry: dict[str, Any]) -> str:
    """The entry's status among passed, failed, skipped, not applicable and error."""
    if entry["status"] == "skipped" and entry.get("not_applicable") is not None:
        return NOT_APPLICABLE
    return entry["status"]


def sort_entries(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries in a deterministic order, independent of how xdist scheduled the tests: by run, test id and
    `cell_key` (as one stable sort by the three would order them)."""
    # The cell key (a JSON text per cell) decides only between entries of one run and test id, which few share: it
    # is made for those alone (making it for every entry was most of the sort's time on a full run).
    ordered: list[dict[str, Any]] = []
    for _, tied in itertools.groupby(sorted(entries, key=_run_and_id), key=_run_and_id):
        tied = list(tied)
        ordered += sorted(tied, key=cell_key) if len(tied) > 1 else tied
    return ordered


def _run_and_id(entry: dict[str, Any]) -> tuple[int, str]:
    return entry.get("run", 0), entry["id"]


def cell_key(entry: dict[str, Any]) -> str:
    """The identity of the cell an entry describes (suite + canonical cell, else suite + test id)."""
    cell = entry.get("cell")
    if cell:
        return f"{entry['suite']}:{json.dumps(cell, sort_keys=True, separators=(',', ':'))}"
    return f"{entry['suite']}:{entry['id']}"


def message_key(said: Any) -> Any:
    """A config outcome's warning or error by what identifies it: its message id (with an error's type and stage),
    its text, whole, only where the target met no declared message (id None); a reworded message keeps its id."""
    if not isinstance(said, dict):
        return said
    key = {k: v for k, v in said.items() if k != "text"}
    if said.get("id") is None:
        key["text"] = said.get("text")
    return key


def outcome_of(entry: dict[str, Any]) -> dict[str, Any]:
    """What `diff` and `merge` compare: the status and the target's actual result (the case id left out).

    A config outcome's `rules` are left out too: they name how an implementation reached the outcome
    (the reference's rule ids, the vllm target's provenance notes), not the behaviour being compared.
    So is the wording of an `unknown` reason: that a cell cannot be decided is the behaviour, the
    explanation is each implementation's own. Its warnings and its error are compared by their message ids
    (`message_key`): a release that rewords a message vLLM says for the same reason changes no cell.
    """
    actual = entry.get("actual")
    if isinstance(actual, dict):
        actual = {k: v for k, v in actual.items() if k not in ("id", "rules")}
        if actual.get("unknown"):
            actual["unknown"] = True
        if isinstance(actual.get("warnings"), list):
            actual["warnings"] = [message_key(w) for w in actual["warnings"]]
        if "error" in actual:
            actual["error"] = message_key(actual["error"])
    return {"status": entry["status"], "actual": actual}


# What a command that reads a results file accepts: said where a user passed another file (a JUnit XML, the
# report's Markdown, the JSON of `kvconform diff`), the files a run leaves next to results.json.
ACCEPTED = ("accepted: the results.json.gz of `kvconform report`, or the results file of `kvconform merge -o` or "
            "`pytest --kvconform-results FILE` (JSON, gzip-compressed or not)")


def _fail(path: str | os.PathLike, what: str) -> ResultsFileError:
    return ResultsFileError(f"results file {os.fspath(path)}: {what}")


_MISSING = object()
_JSON_TYPES = ((bool, "boolean"), (dict, "object"), (list, "array"), (str, "string"), (int, "number"),
               (float, "number"))


def _found(value: Any) -> str:
    """What a field holds, for an error line: 'is missing' or 'is [] (an array)' (long values cut)."""
    if value is _MISSING:
        return "is missing"
    text = json.dumps(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    kind = next((name for cls, name in _JSON_TYPES if isinstance(value, cls)), "null")
    return f"is {text} ({'an' if kind[0] in 'ao' else 'a'} {kind})"


def _bad_field(path: str | os.PathLike, field_name: str, value: Any, accepted: str) -> ResultsFileError:
    return _fail(path, f"{field_name} {_found(value)}; accepted: {accepted}")


def parse_document(data: Any, path: str | os.PathLike = "<data>") -> ResultsDocument:
    """Validate a decoded JSON value as a results document; raise ResultsFileError naming the field, what it
    holds and what is accepted."""
    if not isinstance(data, dict):
        raise _fail(path, f"expected a JSON object with format {FORMAT!r}, got {type(data).__name__}; {ACCEPTED}")
    if data.get("format") != FORMAT:
        raise _fail(path, f"not a kvconform results file (format is {data.get('format')!r}, expected {FORMAT!r}); "
                          f"{ACCEPTED}")
    schema = data.get("schema_version", _MISSING)
    if schema not in READABLE_SCHEMAS or isinstance(schema, bool):
        raise _bad_field(path, "schema_version", schema,
                         f"{', '.join(map(str, READABLE_SCHEMAS[:-1]))} or {READABLE_SCHEMAS[-1]} (the schemas this "
                         "kvconform reads)")
    run_info = data.get("run_info", _MISSING)
    if not isinstance(run_info, dict):
        raise _bad_field(path, "run_info", run_info, "an object describing the run")
    runs = data.get("runs", [run_info])
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        raise _bad_field(path, "runs", runs, "a non-empty array of objects")
    results = data.get("results", _MISSING)
    if not isinstance(results, list):
        raise _bad_field(path, "results", results, "an array of test entries")
    for index, entry in enumerate(results):
        where = f"results[{index}]"
        if not isinstance(entry, dict):
            raise _bad_field(path, where, entry, "an object")
        for key in REQUIRED_ENTRY_KEYS:
            if not isinstance(entry.get(key), str):
                raise _bad_field(path, f"{where}.{key}", entry.get(key, _MISSING), "a string")
        if entry["status"] not in STATUSES:
            raise _bad_field(path, f"{where}.status", entry["status"], ", ".join(STATUSES))
        cell = entry.get("cell")
        if cell is not None and not isinstance(cell, dict):
            raise _bad_field(path, f"{where}.cell", cell, "an object or null")
        run = entry.setdefault("run", 0)
        if not isinstance(run, int) or isinstance(run, bool) or not 0 <= run < len(runs):
            raise _bad_field(path, f"{where}.run", run, f"an index into runs, 0 to {len(runs) - 1}")
        for key, default in (("cell", None), ("params", {}), ("expected", None), ("actual", None),
                             ("message", None), ("duration", 0.0), ("extra", {})):
            entry.setdefault(key, default)
        if "not_applicable" not in entry:
            entry["not_applicable"] = (legacy_record(entry["message"], entry["suite"])
                                       if schema == 1 and entry["status"] == "skipped" else None)
        record = entry["not_applicable"]
        if record is not None and (not isinstance(record, dict) or record.get("kind") not in KINDS):
            raise _bad_field(path, f"{where}.not_applicable", record,
                             f"null or an object whose kind is one of {', '.join(KINDS)}")
        if schema in (1, 2):  # before skips carried their causes
            if record is not None:
                entry["not_applicable"] = legacy_fields(record)
            entry.setdefault("skip_cause", legacy_skip_cause(entry["message"], entry["suite"])
                             if entry["status"] == "skipped" and record is None else None)
        cause = entry.setdefault("skip_cause", None)
        if cause is not None and (not isinstance(cause, dict) or cause.get("kind") not in SKIP_KINDS):
            raise _bad_field(path, f"{where}.skip_cause", cause,
                             f"null or an object whose kind is one of {', '.join(SKIP_KINDS)}")
        if schema < TYPED_OUTCOMES_SCHEMA:
            _upgrade_config_outcomes(entry)
        if schema < GROUP_COUNTS_SCHEMA:
            _add_group_count(entry)
        groups = entry["extra"].get(GROUPS_KEY) if isinstance(entry["extra"], dict) else None
        if groups is not None and (not isinstance(groups, int) or isinstance(groups, bool) or groups < 1):
            raise _bad_field(path, f"{where}.extra.{GROUPS_KEY}", groups,
                             "a positive number (the KV cache groups of the cell's model) or absent")
    return ResultsDocument(run_info=run_info, results=results, runs=runs)


def num_kv_cache_groups(entry: dict[str, Any]) -> int | None:
    """How many KV cache groups the model of a connector entry's cell has, as its suite recorded it; None for a
    cell without a preset (or an older file's preset this kvconform does not know)."""
    return (entry.get("extra") or {}).get(GROUPS_KEY)


def _add_group_count(entry: dict[str, Any]) -> None:
    """A connector entry of an older schema given the KV cache group count its suite now records: that of the
    preset its cell names, as this kvconform's presets build it."""
    preset = (entry.get("cell") or {}).get("preset")
    if entry["suite"] != "connector" or not isinstance(preset, str) or not isinstance(entry["extra"], dict):
        return
    from reference_impl.engine.presets import get_preset  # only for such files (it imports torch)

    try:
        groups = len(get_preset(preset).groups)
    except ValueError:  # no such preset ("-": a check that runs none), or one a later kvconform dropped
        return
    entry["extra"].setdefault(GROUPS_KEY, groups)


def _upgrade_config_outcomes(entry: dict[str, Any]) -> None:
    """A config entry's outcomes of an older schema (`actual`, and `expected` or the part of it a compacted entry
    keeps) in the typed outcome's form, their messages given the ids their target would have given: the one place
    a results file's message texts are read for their ids."""
    if entry["suite"] != "config":
        return
    from reference_impl.config.outcome import upgrade  # only for such files

    for key in ("actual", "expected"):
        if isinstance(entry[key], dict):
            upgrade(entry[key])


def load_results(path: str | os.PathLike) -> ResultsDocument:
    """Read and validate a results file; every problem is a ResultsFileError with one clear line."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise _fail(path, "no such file") from None
    except IsADirectoryError:
        raise _fail(path, "is a directory, expected a JSON file") from None
    except OSError as exc:
        raise _fail(path, f"cannot be read ({exc.strerror or exc})") from None
    if raw.startswith(_GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise _fail(path, f"is not a complete gzip file ({exc}); {ACCEPTED}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(path, "is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, f"is not valid JSON ({json_error_text(exc)}); {ACCEPTED}") from None
    return parse_document(data, path)


def cell_label(entry: dict[str, Any]) -> str:
    """A readable name for an entry's cell: 'config era=seed flag=False …', else the test id."""
    cell = entry.get("cell")
    if not cell:
        return f"{entry['suite']} {entry['id']}"
    parts = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, sort_keys=True)}" for k, v in cell.items())
    return f"{entry['suite']} {parts}"


# Which entry stands for a cell that appears more than once: a failing one, else one that ran.
_STANDS_FOR_CELL = {"error": 3, "failed": 2, "passed": 1, "skipped": 0}


def index_by_cell(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Cell key -> entry; where a cell appears twice (two tests that record one cell, as the connector suite's C24
    forced race and C24 did before they had cells of their own), a failing entry wins, then one that ran: the cell
    fails when any of its tests does, so `kvconform diff` cannot miss a regression behind a passing twin."""
    index: dict[str, dict[str, Any]] = {}
    for entry in entries:
        key = cell_key(entry)
        known = index.get(key)
        if known is None or _STANDS_FOR_CELL[entry["status"]] > _STANDS_FOR_CELL[known["status"]]:
            index[key] = entry
    return index
