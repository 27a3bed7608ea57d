"""Comparing a target's outcome with the oracle's, and the one-line summaries the golden files hold."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from reference_impl.config.factory import package_installed
from reference_impl.config.outcome import Outcome, OutcomeShapeError
from suites.config.matrix import Cell
from suites.config.oracle import Expectation
from suites.config.tables import messages

# KVCONFORM_GOLDEN_DIR points the suite at another golden folder (the harness's own tests use a copy).
GOLDEN_DIR = Path(os.environ.get("KVCONFORM_GOLDEN_DIR") or Path(__file__).with_name("golden"))
OUTCOME_KEYS = ("resolved_disable_hma", "warnings", "error", "unknown")


# The matrix models an environment without the connectors' optional packages: an outcome that is vLLM's import error
# for one of them cannot be judged where that package is installed (vLLM then resolves the package's own class), e.g.
# a vLLM venv that also serves the LMCache step.
_MISSING_PACKAGE = re.compile(r"No module named '(?P<package>[\w.]+)'|Please install (?P<install>mooncake) ")


def installed_missing_package(outcome: dict) -> str | None:
    """The optional package whose absence `outcome` (vLLM's import error for it) depends on, when this environment
    has that package installed; None otherwise."""
    error = Outcome.from_dict(outcome).error
    found = _MISSING_PACKAGE.search(error.text if error is not None else "")
    package = found and (found["package"] or found["install"])
    if package and package_installed(package.split(".")[0]):
        return package
    return None


def decided_by_installed_package(outcome: dict) -> bool:
    """Whether the reference's `outcome` turns on an optional package that this environment has installed: vLLM's
    import error for it, or the resolver's unknown for the class the installed package supplies."""
    return installed_missing_package(outcome) is not None or "package_installed" in (outcome.get("rules") or [])


def golden_path(era: str) -> Path:
    """The committed golden file of one era."""
    return GOLDEN_DIR / f"{era}.txt"


def golden_header(era: str) -> str:
    """The comment block that opens an era's golden file (what a line means)."""
    return (
        f"Config matrix golden outcomes of the reference resolver, era {era}.\n"
        "One cell per line: resolved HMA (on = HMA enabled, off = disabled), warnings and errors by message id\n"
        "(suites/config/tables/messages.toml). Regenerate: pytest suites/config --update-golden"
    )


def _message_patterns() -> list[tuple[str, re.Pattern]]:
    patterns = []
    for message_id, entry in messages().items():
        body = re.escape(entry["text"])
        body = body.replace(re.escape("{name}"), r"(?P<name>\S+?)").replace(re.escape("{module}"), r"\S+")
        body = re.sub(r"\\\{[a-z_]+\\\}", lambda _: r".+?", body)  # any other field: free text
        if entry["text"].endswith("{name}"):  # a name at the very end runs to the end of the text
            body += r"\Z"
        # an empty text (a bare assert) labels only an empty message
        patterns.append((message_id, re.compile(body if body else r"\A\Z")))
    return patterns


_PATTERNS = _message_patterns()


def message_label(text: str) -> str:
    """`W-C`, `E-F(ExampleConnector)` for a known message text; the quoted text otherwise."""
    for message_id, pattern in _PATTERNS:
        match = pattern.search(text)
        if match:
            name = match.groupdict().get("name")
            return f"{message_id}({name})" if name else message_id
    return json.dumps(text)


def _typed(outcome: Any) -> Outcome | None:
    """`outcome` read as the typed outcome; None for a value that is none."""
    try:
        return Outcome.from_dict(outcome)
    except OutcomeShapeError:
        return None


def summarize(outcome: Any) -> str:
    """A one-line, readable summary of an outcome (the golden file's value): the messages by the oracle's own
    reading of their texts (`message_label`)."""
    typed = _typed(outcome)
    if typed is None:
        return f"malformed {type(outcome).__name__}"
    if typed.unknown:
        return "unknown"
    warnings = " ".join(message_label(text) for text in typed.warning_texts)
    error = typed.error
    if error:
        head = f"error {error.type}@{error.stage} {message_label(str(error.text))}"
    else:
        resolved = typed.resolved_disable_hma
        head = {False: "on", True: "off"}.get(resolved, f"resolved={resolved!r}")
    return f"{head} | warn {warnings}" if warnings else head


def _describe(outcome: Outcome) -> str:
    if outcome.unknown:
        return f"unknown ({outcome.unknown})"
    if outcome.error:
        error = outcome.error
        return f"{error.type} at stage {error.stage}: {error.text!r}"
    return f"resolved_disable_hma={outcome.resolved_disable_hma!r}"


def outcome_mismatches(expected: dict, actual: Any) -> list[str]:
    """Each way `actual` differs from `expected`: resolved value, warnings (in order, each expected text a
    substring of the actual one), error type / text (substring) / stage, and unknown-ness. The texts are judged;
    the ids are the target's reading of its own texts."""
    typed = _typed(actual) if isinstance(actual, dict) and all(key in actual for key in OUTCOME_KEYS) else None
    if typed is None:
        return [f"target returned {actual!r}, not an outcome with keys {', '.join(OUTCOME_KEYS)}"]
    want_outcome = Outcome.from_dict(expected)
    problems = []
    if bool(want_outcome.unknown) != bool(typed.unknown):
        problems.append(f"expected {_describe(want_outcome)}, got {_describe(typed)}")
        return problems
    if want_outcome.unknown:
        return problems
    want_error, got_error = want_outcome.error, typed.error
    if (want_error is None) != (got_error is None):
        problems.append(f"expected {_describe(want_outcome)}, got {_describe(typed)}")
    elif want_error is not None:
        for field in ("type", "stage"):
            if getattr(want_error, field) != getattr(got_error, field):
                problems.append(f"error {field}: expected {getattr(want_error, field)!r}, got "
                                f"{getattr(got_error, field)!r}")
        if want_error.text not in str(got_error.text):
            problems.append(f"error message: expected it to contain {want_error.text!r}, got {got_error.text!r}")
    elif want_outcome.resolved_disable_hma != typed.resolved_disable_hma:
        problems.append(f"expected {_describe(want_outcome)}, got {_describe(typed)}")
    want, got = want_outcome.warning_texts, typed.warning_texts
    if len(want) != len(got) or any(w not in g for w, g in zip(want, got)):
        want_ids = [message_label(text) for text in want]
        got_ids = [message_label(text) for text in got]
        problems.append(f"warnings in order: expected {want_ids}, got {got_ids}")
    return problems


def _hma_named(summary: str) -> str:
    """'off | warn W-C' -> 'HMA off | warn W-C' (a golden summary read outside its file)."""
    return f"HMA {summary}" if summary.partition(" ")[0] in ("on", "off") else summary


def what_went_wrong(expectation: Expectation, problems: list[str], actual: Any = None) -> str:
    """One line, the same for every cell that fails alike: the expected and the actual outcome in the golden
    files' short form (or the differences, where those forms agree) and the first spec rule the oracle applied."""
    if not isinstance(actual, dict):  # the target raised or returned no outcome: no rule is to blame
        return "; ".join(problems)
    unknown = expectation.outcome.get("unknown")
    first_rule = expectation.because[0] if expectation.because else (str(unknown) if unknown else "no rule fired")
    want, got = _hma_named(summarize(expectation.outcome)), _hma_named(summarize(actual))
    what = f"expected `{want}`, got `{got}`" if want != got else "; ".join(problems)
    return f"{what} ({first_rule})"


def explain(cell: Cell, expectation: Expectation, problems: list[str], actual: Any = None) -> str:
    """The assertion message of a failing cell. Its first line says what went wrong without naming the cell
    (`what_went_wrong`), so cells that fail alike group under it (`harness.failure_groups`); the next lines
    name the cell, list each difference and every spec rule that fired."""
    dims = ", ".join(f"{key} {value!r}" for key, value in cell.dimensions.items())
    lines = [what_went_wrong(expectation, problems, actual), f"config cell {cell.id} ({dims}) does not conform:"]
    lines += [f"  - {problem}" for problem in problems]
    lines.append("  spec rules (oracle): " + ("; ".join(expectation.because) or "no rule fired"))
    return "\n".join(lines)


def target_raised(exc: BaseException) -> str:
    """The problem of a target that raised instead of returning an outcome: the exception and where it was
    raised (the innermost frame), without building a traceback report for every failing cell."""
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    where = f" at {Path(frame.tb_frame.f_code.co_filename).name}:{frame.tb_lineno}" if frame is not None else ""
    return f"target raised {type(exc).__name__}{where}: {exc}"
