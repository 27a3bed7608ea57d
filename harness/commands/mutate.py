"""`kvconform mutate`: the connector suite's own mutation score. Each bug class of the project's catalogue
(`harness/connector_mutants.py`) is injected into the template connector, one at a time, and the connector suite
runs on the mutant as on a vendor's copy of the template (`--kv-connector module:Declaration`: the template's
declaration, its profile and its backdoors, over the mutated class; black-box unless `--backdoors on`); a mutant is
caught when any check fails on it.

Prints one line per mutant (caught or not caught, the check written for its class, the checks that failed) and the
score. `--checks named` runs only the check written for each class (the quick sample CI runs); `--checks all` (the
default) the whole suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.errors import UsageError

CHECK_MODES = ("all", "named")


def register(subparsers) -> None:
    """Add the `mutate` subcommand."""
    parser = subparsers.add_parser(
        "mutate", help="inject each catalogued bug class into the template connector and report which checks catch it",
        description=__doc__.split("\n\n")[0],
        epilog="exit status: 0 every mutant caught; 1 a mutant not caught (or its run wrote no results); "
               "2 usage error\n\nThe full score, as the README states it: kvconform mutate -j 2")
    parser.add_argument("--mutant", action="append", default=None, metavar="NAME",
                        help="only this mutant (repeatable; default: every mutant of the catalogue)")
    parser.add_argument("--checks", choices=CHECK_MODES, default="all",
                        help="all (default): the whole connector suite on each mutant; named: only the check "
                             "written for its bug class")
    parser.add_argument("--backdoors", choices=("on", "off"), default="off",
                        help="off (default): black-box, as a vendor without backdoors; on: the backdoors of the "
                             "template's declaration sharpen the checks that consult them")
    parser.add_argument("-j", "--jobs", type=int, default=2, metavar="N", help="mutants run at once (default 2)")
    parser.add_argument("--timeout", type=float, default=60, metavar="S",
                        help="per-check time limit in seconds (--kv-connector-timeout; default 60)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.set_defaults(run=run)


def module_name(name: str) -> str:
    """The importable module a mutant's source is written to."""
    return "kvconform_mutant_" + name.replace("-", "_")


def declaration_module(name: str) -> str:
    """The importable module of the mutant's declaration (`harness.connector_mutants.declaration_source`)."""
    return module_name(name) + "_declared"


def suite_command(mutant_name: str, folder: Path, check: str, checks: str, backdoors: str,
                  timeout: float) -> list[str]:
    """The pytest command that runs the connector suite on one mutant, writing `folder/<module>.json`."""
    from harness.connector_mutants import DECLARATION_CLASS

    module = module_name(mutant_name)
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider", "-q",
           "-p", "no:randomly", "-p", "no:xdist", "--tb=no", "--kv-connector-timeout", f"{timeout:g}",
           "--kv-connector-backdoors", backdoors, "--kvconform-results", str(folder / f"{module}.json"),
           "--kv-connector", f"{declaration_module(mutant_name)}:{DECLARATION_CLASS}"]
    if checks == "named":
        cmd += ["-k", f"test_{check.lower()}_"]
    return cmd


def failing_checks(results: Path) -> list[str] | None:
    """The check ids that failed (or errored) in a results file, in id order; None when the file is missing."""
    if not results.exists():
        return None
    document = json.loads(results.read_text())
    return sorted({e["cell"]["check"].split()[0] for e in document["results"]
                   if e["status"] in ("failed", "error") and "check" in (e.get("cell") or {})})


def run_mutants(names: list[str], checks: str, backdoors: str, jobs: int, timeout: float) -> list[dict]:
    """Run the suite on each mutant (`jobs` at once); one row per mutant: name, bug, check, twin, caught_by
    (None when its run wrote no results), seconds."""
    from harness.connector_mutants import declaration_source, mutant, mutated_source

    chosen = [mutant(name) for name in names]
    rows: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="kvconform-mutants-") as scratch:
        folder = Path(scratch)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([scratch] + [p for p in sys.path if p]))
        pending = list(chosen)
        running: dict[str, tuple[subprocess.Popen, float]] = {}
        while pending or running:
            while pending and len(running) < jobs:
                candidate = pending.pop(0)
                (folder / f"{module_name(candidate.name)}.py").write_text(mutated_source(candidate))
                (folder / f"{declaration_module(candidate.name)}.py").write_text(
                    declaration_source(module_name(candidate.name)))
                cmd = suite_command(candidate.name, folder, candidate.check, checks, backdoors, timeout)
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                running[candidate.name] = (proc, time.monotonic())
            for name, (proc, started) in list(running.items()):
                if proc.poll() is not None:
                    del running[name]
                    rows[name] = {"seconds": time.monotonic() - started,
                                  "caught_by": failing_checks(folder / f"{module_name(name)}.json")}
            time.sleep(0.2)
    return [{"name": m.name, "bug": m.bug, "check": m.check, "twin": m.twin, **rows[m.name]} for m in chosen]


def summary(rows: list[dict], checks: str, backdoors: str) -> str:
    """The score line."""
    caught = [r for r in rows if r["caught_by"]]
    missed = [f"{r['name']} ({r['check']})" for r in rows if not r["caught_by"]]
    scope = "the whole suite" if checks == "all" else "the check written for each class"
    line = (f"mutation score: {len(caught)} of {len(rows)} bug classes caught ({scope}, backdoors {backdoors}, "
            "the template's declaration)")
    return line + (f"; not caught: {', '.join(missed)}" if missed else "")


def run(args) -> int:
    """Run the mutants and print the table and the score."""
    from harness.connector_mutants import MUTANTS

    names = [m.name for m in MUTANTS]
    if args.list:
        for m in MUTANTS:
            print(f"{m.name}  {m.check}  {m.bug}")
        return 0
    for name in args.mutant or ():
        if name not in names:
            raise UsageError(f"--mutant {name!r} is not a mutant; accepted: {', '.join(names)}")
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs} must be at least 1")
    if args.timeout <= 0:
        raise UsageError(f"--timeout {args.timeout:g} must be a positive number of seconds")
    selected = list(dict.fromkeys(args.mutant)) if args.mutant else names
    rows = run_mutants(selected, args.checks, args.backdoors, args.jobs, args.timeout)
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        if r["caught_by"] is None:
            verdict = "no results (the suite run did not finish)"
        elif r["caught_by"]:
            verdict = f"caught      by {', '.join(r['caught_by'])}"
        else:
            verdict = "NOT CAUGHT"
        print(f"{r['name']:<{width}}  written for {r['check']}  {verdict}  ({r['seconds']:.0f} s; {r['bug']})")
    print(summary(rows, args.checks, args.backdoors))
    return 0 if all(r["caught_by"] for r in rows) else 1
