"""`kvconform diff BASE.json HEAD.json`: the cells whose outcome changed between two runs.

A cell's outcome is its status and the target's actual result (see `harness.results_model.outcome_of`).
Cells present in only one run are listed as added or removed and count as changes too, so a shrinking
matrix cannot hide a regression. The changes are grouped the way the console groups failures
(`harness.failure_groups`): cells that now fail the same way, that now pass, or whose outcome moved the
same way form one line, so a pull-request comment stays short however many cells a change touches;
`--all` lists every cell. Exit status: 0 nothing changed, 1 something did, 2 bad input.
"""

from __future__ import annotations

from typing import Any

from harness.errors import UsageError
from harness.failure_groups import FAILING_STATUSES, FailureGroup, cell_name, entry_what, format_groups, group_failures
from harness.report.config_section import SUITE as CONFIG_SUITE, outcome_cell
from harness.results_model import ResultsFileError, cell_label, index_by_cell, load_results, outcome_of

# Group lines a diff prints at most (a pull-request comment, not a log); --all lists every cell.
MAX_GROUPS = 30


def register(subparsers) -> None:
    """Add the `diff` subcommand."""
    parser = subparsers.add_parser("diff", help="list the cells whose outcome changed between two results files",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("base", metavar="BASE.json")
    parser.add_argument("head", metavar="HEAD.json")
    parser.add_argument("--format", choices=("text", "md"), default="text",
                        help="text (default) or md, a Markdown table for a pull-request comment")
    parser.add_argument("--all", dest="every_cell", action="store_true",
                        help="list every changed cell instead of one line per way of changing")
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
        elif outcome_of(before) != outcome_of(after):
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
    if after["status"] in FAILING_STATUSES and (before["status"] != after["status"]
                                                or entry_what(before) != entry_what(after)):
        return f"now {after['status']}: {entry_what(after)}"
    if before["status"] in FAILING_STATUSES and after["status"] not in FAILING_STATUSES:
        return f"now {describe_outcome(after)}, was {before['status']}: {entry_what(before)}"
    return f"{describe_outcome(before)} -> {describe_outcome(after)}"


def group_changes(changes) -> list[FailureGroup]:
    """The changes grouped by suite and `change_what`, the largest group first."""
    return group_failures(
        ((after or before)["suite"], change_what(kind, before, after), cell_name((after or before)["id"]))
        for kind, _label, before, after in changes)


def format_changes(changes, base_name: str, head_name: str, fmt: str, every_cell: bool = False) -> str:
    """The changes as plain text or Markdown: one line per way of changing, or with `every_cell` per cell."""
    counts = {kind: sum(1 for c in changes if c[0] == kind) for kind in ("changed", "added", "removed")}
    headline = (f"{counts['changed']} changed, {counts['added']} added, {counts['removed']} removed "
                f"between {base_name} and {head_name}")
    if not changes:
        return f"No cell changed its outcome between {base_name} and {head_name}.\n"
    if every_cell:
        if fmt == "md":
            lines = [f"**kvconform diff:** {headline}", "", "| change | cell | base | head |", "|---|---|---|---|"]
            lines += [f"| {kind} | {_md_escape(label)} | {_md_escape(describe_outcome(b))} | "
                      f"{_md_escape(describe_outcome(h))} |" for kind, label, b, h in changes]
        else:
            lines = [headline]
            lines += [f"{kind}: {label}: {describe_outcome(b)} -> {describe_outcome(h)}" for kind, label, b, h in changes]
        return "\n".join(lines) + "\n"
    groups = group_changes(changes)
    see = f"{head_name} (or kvconform diff --all)"
    if fmt == "md":
        shown = groups[:MAX_GROUPS]
        lines = [f"**kvconform diff:** {headline}, in {len(groups):,} group{'s' if len(groups) != 1 else ''}", "",
                 "| cells | suite | how the outcome changed | first cell |", "|---:|---|---|---|"]
        lines += [f"| {g.count:,} | {g.suite} | {_md_escape(g.what)} | {_md_escape(g.cells[0])} |" for g in shown]
        if len(groups) > len(shown):
            rest = groups[len(shown):]
            lines += ["", f"… and {len(rest):,} more groups ({sum(g.count for g in rest):,} cells), see {see}"]
        return "\n".join(lines) + "\n"
    return "\n".join([headline, *format_groups(groups, max_lines=MAX_GROUPS, see=see)]) + "\n"


def run(args) -> int:
    """Print the changes; exit 1 when there are any."""
    try:
        base, head = load_results(args.base), load_results(args.head)
    except ResultsFileError as exc:
        raise UsageError(f"kvconform diff: {exc}") from None
    changes = compute_changes(base.results, head.results)
    print(format_changes(changes, args.base, args.head, args.format, args.every_cell), end="")
    return 1 if changes else 0
