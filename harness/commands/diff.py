"""`kvconform diff BASE.json HEAD.json`: the cells whose outcome changed between two runs; the CI gate.

A cell's outcome is its status and the target's actual result (see `harness.results_model.outcome_of`).
Every change falls in one class, listed in this order whatever the two runs cover:

  regressed   the cell fails in HEAD and did not in BASE (passed or skipped there, or a new failing cell)
  fixed       the cell failed in BASE and does not in HEAD
  changed     any other change of outcome: a cell failing in both runs another way (`harness.failure_groups.
              same_failure`: its typed facts differ, a connector check's recorded cause or a config cell's
              message ids; without them, its first line once paths, ids, addresses and numbers are taken out:
              one bug fixed and another met), a passing cell whose outcome moved

Two runs of vLLM on two releases (one release each: its connectors, or its allocator with `--kv-allocator vllm`)
are compared cell by cell with the release left out of the connector's name and of the allocator cell's target, so
the diff lists what changed between the releases (a check a release lacks the API for is "N/A on X.Y.Z: reason"
there, `harness.targets.connector.capabilities` and `allocator_capabilities`).

Cells present in one run only (the runs' scopes differ: one era against every era, one suite against all)
are summarised in one line, never listed one by one (`--all` lists them), except a failing cell new in HEAD,
which is a regression. Changes of one class are grouped the way the console groups failures
(`harness.failure_groups`): cells that now fail the same way form one line, so a pull-request comment stays
short however many cells a change touches.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from harness.errors import UsageError
from harness.failure_groups import (FAILING_STATUSES, FailureGroup, cell_name, check_of, entry_what, group_entries,
                                    group_failures, same_failure, split_check)
from harness.report.config_section import SUITE as CONFIG_SUITE, era_sort_key, outcome_cell
from harness.results_model import ResultsFileError, cell_label, index_by_cell, load_results, outcome_of

# Group lines a diff prints at most (a pull-request comment, not a log); --all lists every cell.
MAX_GROUPS = 30
FORMATS = ("text", "md", "json", "github")
CLASSES = ("regressed", "fixed", "changed")


EXIT_NO_REGRESSION, EXIT_REGRESSED, EXIT_SCOPES_DIFFER = 0, 1, 3
EPILOG = f"""exit status:
  {EXIT_NO_REGRESSION}  nothing regressed (cells may have been fixed or changed otherwise)
  {EXIT_REGRESSED}  regressions: a cell fails in HEAD that passed (or was skipped, or was absent) in BASE
  2  usage error (a file that is not a kvconform results file, a bad option)
  {EXIT_SCOPES_DIFFER}  nothing regressed, but the runs do not cover the same cells (one era against all, one suite
     against all): the comparison is partial; with --changed-only only the common cells count, so never {EXIT_SCOPES_DIFFER}

formats: text (default), md (a pull-request comment), json (every cell, machine-readable),
github (GitHub Actions workflow commands: an ::error annotation per group of regressed cells, a ::warning
per group of cells failing in both runs, a ::notice with the summary)"""


def register(subparsers) -> None:
    """Add the `diff` subcommand."""
    parser = subparsers.add_parser("diff", help="list the cells whose outcome changed between two results files",
                                   description=__doc__.split("\n\n")[0], epilog=EPILOG)
    parser.add_argument("base", metavar="BASE.json")
    parser.add_argument("head", metavar="HEAD.json")
    parser.add_argument("--format", choices=FORMATS, default="text", type=str.lower,
                        help="text (default), md, json or github (see below)")
    parser.add_argument("--all", dest="every_cell", action="store_true",
                        help="list every changed cell (and every cell of one run only) instead of one line per way "
                             "of changing")
    parser.add_argument("--changed-only", action="store_true",
                        help="compare only the cells both runs have; cells of one run only are counted, not judged")
    parser.set_defaults(run=run)


def describe_outcome(entry: dict[str, Any] | None) -> str:
    """'passed ⚪ HMA off: <warning>' and the like; '—' for a cell that is absent."""
    if entry is None:
        return "—"
    text = entry["status"]
    actual = entry.get("actual")
    if entry["suite"] == CONFIG_SUITE and isinstance(actual, dict):
        cell = outcome_cell(actual)
        text += f" {cell.text}" + (f" ({'; '.join(cell.notes)})" if cell.notes else "")
    elif entry["status"] != "passed" and entry.get("message"):
        text += f" ({entry['message']})"
    return text


def compute_changes(base: list[dict], head: list[dict]) -> list[tuple[str, str, dict | None, dict | None]]:
    """(kind, cell label, base entry, head entry) for every changed, added or removed cell, sorted by label."""
    base_cells, head_cells = index_by_cell(base), index_by_cell(head)
    changes = []
    for key in sorted(base_cells.keys() | head_cells.keys()):
        before, after = base_cells.get(key), head_cells.get(key)
        if before is None:
            changes.append(("added", cell_label(after), None, after))
        elif after is None:
            changes.append(("removed", cell_label(before), before, None))
        elif outcome_of(before) != outcome_of(after) or not same_failure(before, after):
            changes.append(("changed", cell_label(after), before, after))
    changes.sort(key=lambda change: (change[1], change[0]))
    return changes


def _md_escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def change_what(kind: str, before: dict | None, after: dict | None) -> str:
    """How one cell changed, in words shared by every cell that changed alike: what now goes wrong (a cell
    that fails now), what no longer does (one that passes now), else the old and the new outcome."""
    if kind != "changed":
        entry = after if after is not None else before
        state = f"{entry['status']}: {entry_what(entry)}" if entry["status"] in FAILING_STATUSES else describe_outcome(entry)
        return f"{kind}, {state}"
    if after["status"] in FAILING_STATUSES and before["status"] in FAILING_STATUSES \
            and entry_what(before) != entry_what(after):
        # failing in both runs, another way: a fix and a new failure in one cell, both said
        was = split_check(entry_what(before))[2]  # the same cell: its check and preset are said once
        return f"now {after['status']}: {entry_what(after)} (was {before['status']}: {was})"
    if after["status"] in FAILING_STATUSES and before["status"] != after["status"]:
        return f"now {after['status']}: {entry_what(after)}"
    if before["status"] in FAILING_STATUSES and after["status"] not in FAILING_STATUSES:
        return f"now {describe_outcome(after)}, was {before['status']}: {entry_what(before)}"
    return f"{describe_outcome(before)} -> {describe_outcome(after)}"


def _kind(before: dict | None, after: dict | None) -> str:
    return "added" if before is None else "removed" if after is None else "changed"


def group_changes(changes) -> list[FailureGroup]:
    """The changes ((class or kind, label, base entry, head entry)) grouped by suite and `change_what`, the
    largest group first."""
    return group_failures(
        ((after or before)["suite"], change_what(_kind(before, after), before, after), cell_name((after or before)["id"]),
         None, None, _failing_check(before, after))
        for _, _label, before, after in changes)


def _failing_check(before: dict | None, after: dict | None) -> tuple[str, str] | None:
    """The (check id, preset) of a connector cell that fails on either side (its change names the check and groups
    by its cause), from the cell's record; None for another change."""
    entry = after or before
    if entry["suite"] != "connector" or not (_failing(before) or _failing(after)):
        return None
    return check_of(entry.get("cell"))


def _failing(entry: dict | None) -> bool:
    return entry is not None and entry["status"] in FAILING_STATUSES


def classify(kind: str, before: dict | None, after: dict | None) -> str:
    """'regressed', 'fixed', 'changed', or 'only in base' / 'only in head' for a cell of one run only."""
    if kind == "added":
        return "regressed" if _failing(after) else "only in head"
    if kind == "removed":
        return "only in base"
    if _failing(after) and not _failing(before):
        return "regressed"
    if _failing(before) and not _failing(after):
        return "fixed"
    return "changed"


@dataclass
class Comparison:
    """Two runs compared: each change with its class, the cells of one run only, the cells failing in both."""

    base_name: str
    head_name: str
    changes: list[tuple[str, str, dict | None, dict | None]]  # (class, label, base entry, head entry)
    only_in_base: list[dict]
    only_in_head: list[dict]
    still_failing: list[dict]
    changed_only: bool = False

    def of(self, name: str) -> list:
        """The changes of one class, in label order."""
        return [change for change in self.changes if change[0] == name]

    @property
    def scopes_differ(self) -> bool:
        """True when one run has cells the other lacks."""
        return bool(self.only_in_base or self.only_in_head)

    def exit_status(self) -> int:
        """1 on a regression, else 3 when the scopes differ (never with --changed-only), else 0."""
        if self.of("regressed"):
            return EXIT_REGRESSED
        return EXIT_SCOPES_DIFFER if self.scopes_differ and not self.changed_only else EXIT_NO_REGRESSION


def compare(base: list[dict], head: list[dict], base_name: str, head_name: str, changed_only: bool = False) -> Comparison:
    """Classify every change between two runs' entries (`--changed-only`: cells of both runs only)."""
    changes, only_base, only_head = [], [], []
    for kind, label, before, after in compute_changes(base, head):
        name = classify(kind, before, after)
        if changed_only and kind != "changed":
            name = "only in head" if kind == "added" else "only in base"
        if name == "only in base":
            only_base.append(before)
        elif name == "only in head":
            only_head.append(after)
        else:
            changes.append((name, label, before, after))
        if kind == "added" and name == "regressed":
            only_head.append(after)  # counted in the scope line too: the cell is new
    base_cells = index_by_cell(base)
    still = [entry for key, entry in index_by_cell(head).items()
             if _failing(entry) and _failing(base_cells.get(key)) and outcome_of(entry) == outcome_of(base_cells[key])
             and same_failure(entry, base_cells[key])]
    return Comparison(base_name, head_name, changes, only_base, only_head, still, changed_only)


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _side(entries: list[dict]) -> str:
    """'1,072 cells (config: eras seed, v0.14; connector 12)': what a run alone covers, by suite."""
    by_suite: dict[str, list[dict]] = {}
    for entry in entries:
        by_suite.setdefault(entry["suite"], []).append(entry)
    parts = []
    for suite, items in sorted(by_suite.items(), key=lambda item: -len(item[1])):
        eras = sorted({str((e.get("cell") or {}).get("era")) for e in items if (e.get("cell") or {}).get("era")},
                      key=era_sort_key)
        shown = ", ".join(eras[:6]) + (f", … ({len(eras)} eras)" if len(eras) > 6 else "")
        parts.append(f"{suite} {len(items):,}" + (f" (eras {shown})" if eras else ""))
    return _plural(len(entries), "cell") + (f": {'; '.join(parts)}" if parts else "")


def summary_line(comparison: Comparison) -> str:
    """One line: the counts per class, and how the scopes differ."""
    counts = ", ".join(f"{len(comparison.of(name)):,} {name}" for name in CLASSES)
    text = f"kvconform diff {comparison.base_name} -> {comparison.head_name}: {counts}"
    if comparison.scopes_differ:
        text += (f"; scopes differ: only in base {_side(comparison.only_in_base)}; only in head "
                 f"{_side(comparison.only_in_head)}")
        if comparison.changed_only:
            text += " (--changed-only: not judged)"
    return text


def _grouped(changes) -> list[tuple[str, FailureGroup]]:
    """(class, group) in class order, the largest group first within a class."""
    return [(name, group) for name in CLASSES for group in group_changes([c for c in changes if c[0] == name])]


def format_comparison(comparison: Comparison, fmt: str, every_cell: bool = False) -> str:
    """The comparison as text, Markdown, JSON or GitHub workflow commands."""
    if fmt == "json":
        return json.dumps(comparison_json(comparison), indent=1, ensure_ascii=False) + "\n"
    if fmt == "github":
        return github_commands(comparison)
    base_name, head_name = comparison.base_name, comparison.head_name
    if not comparison.changes and not comparison.scopes_differ:
        return f"No cell changed its outcome between {base_name} and {head_name}.\n"
    headline = summary_line(comparison)
    if every_cell:
        listed = comparison.changes + [("only in base", cell_label(e), e, None) for e in comparison.only_in_base] + [
            ("only in head", cell_label(e), None, e) for e in comparison.only_in_head
            if not any(c[3] is e for c in comparison.changes)]
        if fmt == "md":
            lines = [f"**{headline}**", "", "| change | cell | base | head |", "|---|---|---|---|"]
            lines += [f"| {kind} | {_md_escape(label)} | {_md_escape(describe_outcome(b))} | "
                      f"{_md_escape(describe_outcome(h))} |" for kind, label, b, h in listed]
        else:
            lines = [headline]
            lines += [f"{kind}: {label}: {describe_outcome(b)} -> {describe_outcome(h)}" for kind, label, b, h in listed]
        return "\n".join(lines) + "\n"
    groups = _grouped(comparison.changes)
    see = f"{head_name} (or kvconform diff --all)"
    shown = groups[:MAX_GROUPS]
    rest = groups[len(shown):]
    more = (f"… and {len(rest):,} more group{'s' if len(rest) != 1 else ''} "
            f"({_plural(sum(g.count for _, g in rest), 'cell')}), see {see}") if rest else None
    if fmt == "md":
        lines = [f"**{headline}**", ""]
        if shown:
            lines += ["| class | cells | suite | how the outcome changed | first cell |", "|---|---:|---|---|---|"]
            lines += [f"| {name} | {g.count:,} | {g.suite} | {_md_escape(g.what)} | {_md_escape(g.cells[0])} |"
                      for name, g in shown]
        if more:
            lines += ["", more]
        return "\n".join(lines) + "\n"
    lines = [headline]
    for name in CLASSES:
        of_class = [g for cls, g in shown if cls == name]
        if of_class:
            lines.append(f"{name}:")
            lines += [f"  {g.line()}" for g in of_class]
    if more:
        lines.append(more)
    return "\n".join(lines) + "\n"


def _cell_json(name: str, before: dict | None, after: dict | None) -> dict:
    entry = after if after is not None else before
    return {"class": name, "suite": entry["suite"], "id": entry["id"], "cell": entry.get("cell"),
            "label": cell_label(entry), "what": change_what(_kind(before, after), before, after),
            "base": None if before is None else {"status": before["status"], "outcome": describe_outcome(before)},
            "head": None if after is None else {"status": after["status"], "outcome": describe_outcome(after)}}


def comparison_json(comparison: Comparison) -> dict:
    """The machine-readable diff: the summary, the exit status, every changed cell by class."""
    payload: dict = {
        "format": "kvconform-diff", "base": comparison.base_name, "head": comparison.head_name,
        "exit_status": comparison.exit_status(), "scopes_differ": comparison.scopes_differ,
        "changed_only": comparison.changed_only,
        "counts": {**{name: len(comparison.of(name)) for name in CLASSES},
                   "only_in_base": len(comparison.only_in_base), "only_in_head": len(comparison.only_in_head),
                   "failing_in_both": len(comparison.still_failing)},
        "summary": summary_line(comparison),
    }
    for name in CLASSES:
        payload[name] = [_cell_json(name, before, after) for _, _, before, after in comparison.of(name)]
    return payload


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def github_commands(comparison: Comparison) -> str:
    """GitHub Actions workflow commands: an error annotation per group of regressed cells, a warning per
    group of cells failing in both runs, a notice with the summary (what a workflow step prints)."""
    lines = []
    for group in group_changes([c for c in comparison.changes if c[0] == "regressed"])[:MAX_GROUPS]:
        title = _escape_property(f"kvconform: {_plural(group.count, group.suite + ' cell')} regressed")
        lines.append(f"::error title={title}::{_escape_data(group.what)} (first: {_escape_data(group.cells[0])})")
    for group in group_entries(comparison.still_failing)[:MAX_GROUPS]:
        title = _escape_property(f"kvconform: {_plural(group.count, group.suite + ' cell')} failing in base and head")
        lines.append(f"::warning title={title}::{_escape_data(group.what)} (first: {_escape_data(group.cells[0])})")
    lines.append(f"::notice title=kvconform diff::{_escape_data(summary_line(comparison))}")
    return "\n".join(lines) + "\n"


# A vLLM connector's report name carries its release ("vllm-0.34.0:ExampleConnector", harness.targets.connector.vllm_target);
# an allocator cell of `--kv-allocator vllm` names its target "vllm-0.34.0" (harness.targets.allocator.target).
_CONNECTOR_RELEASE = re.compile(r"^vllm-(\d+\.\d+\.\d+):")
_ALLOCATOR_RELEASE = re.compile(r"^vllm-(\d+\.\d+\.\d+)$")


def _named_release(entry: dict) -> tuple[str, str, str] | None:
    """(cell field, its value, the vLLM release it names) for a connector cell of a vLLM connector or an allocator
    cell of the vLLM allocator; None for any other cell."""
    cell = entry.get("cell") or {}
    connector = str(cell.get("connector", ""))
    if match := _CONNECTOR_RELEASE.match(connector):
        return "connector", connector, match.group(1)
    target = str(cell.get("target", ""))
    if entry.get("suite") == "allocator" and (match := _ALLOCATOR_RELEASE.match(target)):
        return "target", target, match.group(1)
    return None


def vllm_releases(entries: list[dict]) -> set[str]:
    """The vLLM releases the entries' cells name: a vLLM connector's, or the vLLM allocator target's."""
    return {named[2] for entry in entries if (named := _named_release(entry)) is not None}


def across_releases(base: list[dict], head: list[dict]) -> tuple[list[dict], list[dict], tuple[str, str] | None]:
    """(base, head, (base release, head release)) with each vLLM connector cell named without its release
    (`vllm:ExampleConnector`) and each vLLM allocator cell's target `vllm`, when each run checked one vLLM release
    and the releases differ, so that a cell of one release meets the same cell of the other ("what changed
    between 0.33.0 and 0.34.0"); else the entries as they are and None (a run of several releases keeps them
    apart)."""
    releases = vllm_releases(base), vllm_releases(head)
    if len(releases[0]) != 1 or len(releases[1]) != 1 or releases[0] == releases[1]:
        return base, head, None

    def neutral(entries: list[dict]) -> list[dict]:
        out = []
        for entry in entries:
            if (named := _named_release(entry)) is not None:
                field, value, _ = named
                value = _CONNECTOR_RELEASE.sub("vllm:", value) if field == "connector" else "vllm"
                entry = {**entry, "cell": {**entry["cell"], field: value}}
            out.append(entry)
        return out

    return neutral(base), neutral(head), (next(iter(releases[0])), next(iter(releases[1])))


def run(args) -> int:
    """Print the comparison; the exit status says whether anything regressed (see EPILOG)."""
    try:
        base, head = load_results(args.base), load_results(args.head)
    except ResultsFileError as exc:
        raise UsageError(f"kvconform diff: {exc}") from None
    base_entries, head_entries, releases = across_releases(base.results, head.results)
    base_name, head_name = args.base, args.head
    if releases is not None:
        base_name, head_name = (f"{name} (vLLM {release})" for name, release in zip((base_name, head_name), releases))
    comparison = compare(base_entries, head_entries, base_name, head_name, args.changed_only)
    print(format_comparison(comparison, args.format, args.every_cell), end="")
    return comparison.exit_status()
