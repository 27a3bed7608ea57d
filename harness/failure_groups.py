"""What went wrong: failing cells grouped by the first line of their failure message (connector checks: by
root cause).

One home for the grouping the console summary (`harness.plugins.console`), `kvconform diff` and the
report's failures section share. A suite states what went wrong in the first line of a failure's message
(the config matrix: the differences and the rule that decided; a connector check: "C07 [preset]: first
evidence"; an allocator assertion: its message); cells that failed the same way form one group, so a
target that breaks one rule reads as one line however many cells that rule covers.

A connector check's evidence names the check and preset ("C16 [fa_only]: ...") and then the cause, full of
request ids, block numbers, token counts and store paths that differ from cell to cell. Its failures are
grouped by root cause: per connector, by the cause with those taken out (`cause_key`), whatever check found
it; the group says which checks did ("C16, C20, C25: <the first cell's cause>"). One bug that several
checks trip over reads as one line.

Whether a cell that fails in two runs failed the same way (`same_failure`, what `kvconform diff` calls unchanged)
is decided by the failure's typed facts where both entries carry them (`typed_failure_key`: a connector check's
recorded cause, a config cell's outcomes by their message ids), so rewording a message changes no diff; by the
first line with ids and numbers taken out (`text_failure_key`) only where an entry has none (an allocator or
benchmark assertion, a config target that raised, a results file written before checks kept their causes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.failure_causes import cause_of, unrecorded_in_one
from harness.results_model import message_key

FAILING_STATUSES = ("failed", "error")
# pytest's prefixes that say nothing about what went wrong (pytest.fail's, a bare assert's)
_NOISE_PREFIXES = ("Failed: ", "AssertionError: ")
_WHAT_LIMIT = 300
_PARAMS = re.compile(r"\[(.*)\](#\d+)?$")
_DIGITS = re.compile(r"(\d+)")
# 'suites.connector.runner.ConnectorHookError: ...' -> 'ConnectorHookError: ...'
_QUALIFIED_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*: )")


def first_line(message: str | None) -> str:
    """The first non-empty line of a failure message, whitespace collapsed, pytest's noise prefix dropped."""
    for line in (message or "").splitlines():
        line = " ".join(line.split())
        if line:
            for prefix in _NOISE_PREFIXES:
                line = line.removeprefix(prefix)
            line = _QUALIFIED_EXCEPTION.sub("", line)
            return line[:_WHAT_LIMIT] if len(line) <= _WHAT_LIMIT else line[:_WHAT_LIMIT - 1] + "…"
    return ""


def cell_name(nodeid: str) -> str:
    """A short name of the cell a test id stands for: its parameter id ('seed-N-cuda-kv_events-noconn'),
    else the test function's name; a second record of one test keeps its '#n'."""
    match = _PARAMS.search(nodeid)
    if match:
        return match.group(1) + (match.group(2) or "")
    return nodeid.rsplit("::", 1)[-1]


# "C16 [fa_only]: " in a connector check's first line (anywhere: `kvconform diff` puts "now failed: " first).
_CHECK = re.compile(r"\b(C\d{2}) \[([^\]]+)\]: ")
_PATH = re.compile(r"(?:/[^\s'\"/]+)+/([^\s'\"/]+)")
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{8,}\b")  # request ids, hashes (with a digit: not a word)
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")  # "<object at 0x7f...>": differs from process to process
_NUMBER = re.compile(r"\d+")
# "<symptom> — while: <scenario>: <details>" (suites.connector.context.scenario): the scenario is the check's.
_SCENARIO = re.compile(r" — while: [^:]*")
# "stored under {cache salt tenant-a, ..., model name kvconform/fa_only/<store>, ...}" (harness.key_components): the
# cell's own key record, whose model name differs per check and preset.
_KEY_RECORD = re.compile(r"\{[^{}]*\}")


def cause_key(cause: str) -> str:
    """The grouping key of a connector failure's cause: the check's scenario and a key check's records of what was
    stored left out, store paths cut to their last part, then request ids and hashes, then every number (block
    ids, token counts, positions, ranks, shapes) replaced by a placeholder."""
    cause = _PATH.sub(lambda m: "…/" + m.group(1), _KEY_RECORD.sub("{…}", _SCENARIO.sub("", cause)))
    return _NUMBER.sub("N", _HEX_ID.sub("<id>", _ADDRESS.sub("<address>", cause)))


def failure_signature(entry: dict[str, Any]) -> str | None:
    """How a failing entry went wrong, from its typed facts where it has them (`typed_failure_key`), else from its
    message's first line (`text_failure_key`); None for an entry that does not fail. Two runs of one cell that
    fail with the same signature failed the same way; a different signature is a different failure (a bug
    fixed and another one met in the same cell, what `kvconform diff` must not call unchanged). Two entries are
    compared with `same_failure`, which keys both on the same kind of facts."""
    if entry["status"] not in FAILING_STATUSES:
        return None
    typed = typed_failure_key(entry)
    return typed if typed is not None else text_failure_key(entry)


def same_failure(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether two runs of one cell failed the same way (both failing): by their typed facts where both entries
    carry them, so a reworded message with the same ids is the same failure and another id is another; by their
    messages' first lines (`text_failure_key`) where either lacks them (a results file written before checks kept
    their causes)."""
    if before["status"] not in FAILING_STATUSES or after["status"] not in FAILING_STATUSES:
        return failure_signature(before) == failure_signature(after)
    # a cause field one run recorded and the other's suite did not yet (`LATER_FIELDS`) is left out of both
    unrecorded = unrecorded_in_one(cause_of(before), cause_of(after))
    typed = typed_failure_key(before, unrecorded), typed_failure_key(after, unrecorded)
    if None not in typed:
        return typed[0] == typed[1]
    return text_failure_key(before) == text_failure_key(after)


def _outcome_key(outcome: Any) -> Any:
    """A config outcome (expected or actual) by its typed facts: the resolved value, the warnings' and the error's
    ids (`harness.results_model.message_key`), whether it is unknown; the case id and the rules that reached it
    left out (as
    `harness.results_model.outcome_of` leaves them out)."""
    if not isinstance(outcome, dict):
        return outcome
    key = {k: v for k, v in outcome.items() if k not in ("id", "rules", "warnings", "error", "unknown")}
    key["warnings"] = [message_key(w) for w in outcome.get("warnings") or ()]
    key["error"] = message_key(outcome.get("error"))
    key["unknown"] = bool(outcome.get("unknown"))
    return key


def typed_failure_key(entry: dict[str, Any], leave_out: frozenset[str] = frozenset()) -> str | None:
    """A failing entry's failure by its typed facts, or None where it has none (then only its text says):

    * a connector check's cell: the root cause its check recorded (`harness.failure_causes`: the tag and what it
      names, a hook, an exception's class, key components, the function that holds the expectation), the key
      the report's root causes group by;
    * a config cell the target answered: the oracle's expected outcome and the target's by their message ids
      (`_outcome_key`).

    An allocator or benchmark assertion, a config target that raised, a connector failure recorded without a cause
    (a setup error, a results file written before checks kept causes) have none. `leave_out`: fields of the
    recorded cause not compared (`same_failure`: one the other run could not record)."""
    status = entry["status"]
    cause = cause_of(entry) if entry.get("suite") == "connector" else {}
    cause = {k: v for k, v in cause.items() if k not in leave_out}
    if cause:
        return json.dumps({"status": status, "cause": cause}, sort_keys=True)
    if entry.get("suite") == "config" and isinstance(entry.get("actual"), dict):
        return json.dumps({"status": status, "expected": _outcome_key(entry.get("expected")),
                           "actual": _outcome_key(entry["actual"])}, sort_keys=True)
    return None


def text_failure_key(entry: dict[str, Any]) -> str:
    """A failing entry's failure by its message's first line, with what differs from run to run taken out
    (`cause_key`: paths, ids, addresses, numbers): the fallback where the entry carries no typed facts."""
    check, _preset, cause = split_check(entry_what(entry))
    return f"{check or ''}{cause_key(cause)}"


def split_check(what: str) -> tuple[str | None, str | None, str]:
    """(check id, preset, the rest) of a connector failure's first line; (None, None, what) for other lines."""
    match = _CHECK.search(what)
    if match is None:
        return None, None, what
    return match.group(1), match.group(2), what[:match.start()] + what[match.end():]


@dataclass(slots=True)
class FailureGroup:
    """Cells of one suite that went wrong the same way (`what`), in the order they were added; for connector
    checks, the checks that found the cause (`checks`, in the order first seen)."""

    suite: str
    what: str
    cells: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many cells failed this way."""
        return len(self.cells)

    def line(self) -> str:
        """'2,304 config cells: <what> — first: <cell>'."""
        noun = "cell" if self.count == 1 else "cells"
        first = "first: " if self.count > 1 else ""
        return f"{self.count:,} {self.suite} {noun}: {self.what or '(no message)'} — {first}{self.cells[0]}"


def natural_key(text: str, *, ignore_case: bool = False) -> list:
    """The sort key of names with numbers in them (cell names, test ids, check ids): 'c2' before 'c10', the digits
    compared as numbers; `ignore_case` also folds letters to lower case (the report's tables, read by people)."""
    text = text.lower() if ignore_case else text
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(text)]


def _connector_of(cell: str, preset: str | None) -> str:
    """The connector part of a connector check's cell name ('<connector>-<preset>', or '<connector>')."""
    return cell[: -len(preset) - 1] if preset and preset != "-" and cell.endswith("-" + preset) else cell


def check_of(cell: dict[str, Any] | None) -> tuple[str, str] | None:
    """(check id, preset) of a connector check's recorded cell ({"check": "C16 <name>", "preset": ...}), or None
    for a cell that names no check."""
    check = str((cell or {}).get("check") or "").split(" ")[0]
    return (check, str((cell or {}).get("preset") or "-")) if check else None


def group_failures(failures: Iterable[tuple]) -> list[FailureGroup]:
    """(suite, what, cell) triples -> groups, the largest first (ties: by suite, then what); the cells of a
    group in natural order, so the first one named does not depend on the order reports arrived in (xdist).
    Connector checks group by connector and root cause; their cells are named '<check> <cell>' and the group's
    `what` is '<checks>: <cause of its first cell>'. A fourth element, when given, names the connector (from the
    record; otherwise it is read off the cell name); a fifth, the cause the check recorded
    (`harness.failure_causes`): the root cause is that typed key where a cell has one, else its words with ids
    and numbers taken out (`cause_key`); a sixth, the (check id, preset) the cell recorded (`check_of`): which
    check failed, read off the first line's "C16 [preset]: " only where a cell has no record."""
    groups: dict[tuple, FailureGroup] = {}
    causes: dict[tuple, list[tuple[str, str]]] = {}
    for suite, what, cell, *scope in failures:
        check, preset, cause = split_check(what) if suite == "connector" else (None, None, what)
        recorded_check = scope[2] if len(scope) > 2 and scope[2] else None
        if recorded_check is not None:
            check, preset = recorded_check  # the words after the check's own "C16 [preset]: " are shown
        if check is None:
            key: tuple = (suite, what)
        else:
            recorded = scope[1] if len(scope) > 1 and scope[1] else None
            root = json.dumps(recorded, sort_keys=True) if recorded else cause_key(cause)
            key = (suite, scope[0] if scope and scope[0] else _connector_of(cell, preset), bool(recorded), root)
            cell = f"{check} {cell}"
        group = groups.get(key)
        if group is None:
            group = groups[key] = FailureGroup(suite, what)
        group.cells.append(cell)
        if check is not None:
            if check not in group.checks:
                group.checks.append(check)
            causes.setdefault(key, []).append((cell, cause))
    for key, group in groups.items():
        group.cells.sort(key=natural_key)
        if group.checks:
            group.checks.sort(key=natural_key)
            first_cause = min(causes[key], key=lambda pair: natural_key(pair[0]))[1]
            group.what = f"{', '.join(group.checks)}: {first_cause}"
    return sorted(groups.values(), key=lambda g: (-g.count, g.suite, g.what))


def entry_what(entry: dict[str, Any]) -> str:
    """What went wrong for one results entry: its message's first line (an error says so)."""
    what = first_line(entry.get("message")) or entry["status"]
    return f"error: {what}" if entry["status"] == "error" else what


def group_entries(entries: Iterable[dict[str, Any]]) -> list[FailureGroup]:
    """The failing (failed or error) results entries, grouped by suite and what went wrong (a connector check's
    cell by the cause it recorded)."""
    return group_failures((entry["suite"], entry_what(entry), cell_name(entry["id"]),
                           (entry.get("cell") or {}).get("connector"), cause_of(entry) or None,
                           check_of(entry.get("cell")) if entry["suite"] == "connector" else None)
                          for entry in entries if entry["status"] in FAILING_STATUSES)


def format_groups(groups: list[FailureGroup], *, max_lines: int, see: str) -> list[str]:
    """One line per group, at most `max_lines` lines in all; the last says how much was left out and where
    to look (`see`)."""
    if len(groups) <= max_lines:
        return [group.line() for group in groups]
    shown = groups[:max(1, max_lines - 1)]
    rest = groups[len(shown):]
    left = sum(group.count for group in rest)
    return [group.line() for group in shown] + [
        f"… and {len(rest):,} more group{'s' if len(rest) != 1 else ''} ({left:,} "
        f"cell{'s' if left != 1 else ''}), see {see}"]
