"""`kvconform checks`: every connector conformance check, with its tier and where it is described.

The checks are their records (`harness/connector_checks.py`): id, tier (MUST/SHOULD), short name, one-line
description, the backdoor that sharpens it, the API it needs, the connector kinds it is not for.
`docs/connector-checks.md` is the same list rendered by `checks_markdown()` (a test keeps it current), one
anchor per check, so every link this command prints resolves.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.connector_checks import CHECKS, TIERS

DOC_PAGE = "docs/connector-checks.md"
# The page in the checkout kvconform runs from (absent where kvconform is installed without its docs).
_CHECKOUT_PAGE = Path(__file__).resolve().parents[2] / DOC_PAGE


def register(subparsers) -> None:
    """Add the `checks` subcommand."""
    parser = subparsers.add_parser(
        "checks", help="list the connector conformance checks with their tier and description",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 listed; 2 usage error\n\n"
               "Run them: pytest --pyargs suites.connector --kv-connector mypkg.mod:MyConnector (docs/vendor.md).")
    parser.add_argument("--format", choices=("text", "md", "json"), default="text", type=str.lower,
                        help="text (default), md (the table of docs/connector-checks.md) or json")
    parser.add_argument("--tier", choices=TIERS, default=None, type=str.upper, help="only the checks of this tier")
    parser.set_defaults(run=run)


def catalogue() -> list[dict]:
    """Every check as {id, tier, name, description, backdoor, needs, not_for, time_factor, multi_group, link},
    in id order."""
    return [{"id": check.id, "tier": check.tier, "name": check.name, "description": check.description,
             "backdoor": " ".join(check.backdoor) if check.backdoor else None,
             "needs": list(check.needs), "not_for": sorted(check.not_for), "time_factor": check.time_factor,
             "multi_group": check.multi_group, "link": f"{DOC_PAGE}#{check.id.lower()}"}
            for check in CHECKS.values()]


def page_from_cwd() -> str:
    """Where the checks page is, as a path that opens from the current directory: relative to it when the
    checkout's page exists (a vendor running from their own folder), else the page's path in the project."""
    if not _CHECKOUT_PAGE.is_file():
        return DOC_PAGE
    try:
        return Path(os.path.relpath(_CHECKOUT_PAGE)).as_posix()
    except ValueError:  # another drive (Windows): no relative path
        return _CHECKOUT_PAGE.as_posix()


def checks_markdown() -> str:
    """The text of docs/connector-checks.md."""
    checks = catalogue()
    must = sum(1 for c in checks if c["tier"] == "MUST")
    lines = [
        "# Connector conformance checks",
        "",
        f"The connector suite's {len(checks)} checks ({must} MUST, {len(checks) - must} SHOULD), generated from "
        "their records in `harness/connector_checks.py` (`kvconform checks --format md` prints this table; a test "
        "keeps this page current). Each check runs once per preset where presets matter (`fa_only`, `fa+swa`, "
        "`fa16+swa32`, `fa+mamba_align`, `fa+swa+mamba`); a failure's first line is `C07 [fa+swa]: <first "
        "evidence>`. The checks follow section 4.2 of the connector spec; how to run them: [vendor.md](vendor.md). "
        "A new check is its record there and its test marked `@pytest.mark.kv_check(\"Cnn\")` in "
        "`suites/connector/`; then this page is written again (`kvconform checks --format md > "
        "docs/connector-checks.md`) and the README's count (`python -m harness.release.doc_tables`).",
        "",
        "*needs*: the connector API the check cannot be observed without (on a release that lacks it the check is "
        "not applicable), `hma` for a check that runs a multi-group model whatever its preset; *not for*: the "
        "connector kinds it does not apply to ([connector-profiles.md](connector-profiles.md)); *time*: its time "
        "limit in units of `--kv-connector-timeout`.",
        "",
        "| id | tier | name | what it checks | backdoor | needs | not for | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for check in checks:
        anchor = f'<a id="{check["id"].lower()}"></a>'
        needs = ["hma"] * check["multi_group"] + check["needs"]
        lines.append(f"| {anchor}{check['id']} | {check['tier']} | `{check['name']}` | {_cell(check['description'])} | "
                     f"{check['backdoor'] or '–'} | {', '.join(needs) or '–'} | {', '.join(check['not_for']) or '–'} "
                     f"| {check['time_factor']}x |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """`text` as one cell of a Markdown table (a bare '|' would end the cell)."""
    return text.replace("|", "\\|")


def run(args) -> int:
    """Print the catalogue."""
    checks = [c for c in catalogue() if args.tier is None or c["tier"] == args.tier]
    if args.format == "json":
        print(json.dumps(checks, indent=1))
    elif args.format == "md":
        print(checks_markdown(), end="")
    else:
        width = max(len(c["name"]) for c in checks)
        page = page_from_cwd()  # the JSON's links stay project-relative: programs resolve them in the project
        for check in checks:
            print(f"{check['id']}  {check['tier']:<6}  {check['name']:<{width}}  {check['description']}  "
                  f"({page}#{check['id'].lower()})")
    return 0
