"""The check records (`harness/connector_checks.py`) and the connector suite's tests agree: every declared check has
a test marked `kv_check("Cnn")`, every such mark names a declared check, and each record's facts are well formed
(its tier, backdoor use, connector kinds and capabilities are ones the suite knows)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from harness.connector_checks import BACKDOOR_USES, CHECKS, TIERS
from harness.targets.connector.capabilities import CAPABILITIES
from harness.targets.connector.profile import KINDS

SUITE = Path(__file__).resolve().parents[2] / "suites" / "connector"


def marked_checks() -> dict[str, list[str]]:
    """Check id -> the suite's test functions marked `kv_check(id)` (read from the test files' syntax, so that a
    test whose mark names an unknown id is found without running it)."""
    found: dict[str, list[str]] = {}
    for path in sorted(SUITE.glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            for decorator in node.decorator_list:
                func = decorator.func if isinstance(decorator, ast.Call) else None
                name = getattr(func, "attr", None) or getattr(func, "id", None)
                if name == "kv_check":
                    assert decorator.args and isinstance(decorator.args[0], ast.Constant), (
                        f"{path.name}:{node.lineno}: kv_check's id is a literal")
                    found.setdefault(decorator.args[0].value, []).append(f"{path.name}::{node.name}")
    return found


def test_every_declared_check_has_a_test():
    marked = marked_checks()
    assert marked, "no kv_check marks found in suites/connector: is the walk broken?"
    untested = sorted(set(CHECKS) - set(marked))
    assert not untested, f"checks declared in harness/connector_checks.py with no test marked kv_check: {untested}"


def test_every_test_declares_a_known_check():
    unknown = {check: tests for check, tests in marked_checks().items() if check not in CHECKS}
    assert not unknown, f"tests marked kv_check with an id that has no record in harness/connector_checks.py: {unknown}"


def test_records_are_well_formed():
    names = [check.name for check in CHECKS.values()]
    assert len(set(names)) == len(names), "two checks share a name"
    for check_id, check in CHECKS.items():
        assert re.fullmatch(r"C\d\d", check_id) and check.id == check_id, check_id
        assert check.tier in TIERS, f"{check_id}: tier {check.tier!r}"
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", check.name), f"{check_id}: name {check.name!r}"
        assert check.description and "\n" not in check.description, check_id
        assert set(check.needs) <= set(CAPABILITIES), f"{check_id}: needs {check.needs}"
        assert set(check.not_for) <= set(KINDS) - {"stores"}, f"{check_id}: not_for {sorted(check.not_for)}"
        assert all("{kind}" in reason for reason in check.not_for.values()), check_id
        assert isinstance(check.time_factor, int) and check.time_factor >= 1, check_id
        if check.backdoor is not None:
            how, backdoors = check.backdoor
            assert how in BACKDOOR_USES and backdoors.startswith("kvconform_"), f"{check_id}: backdoor {check.backdoor}"
            # A verdict that needs a backdoor cannot be a MUST: every MUST check decides from behaviour.
            assert how != "needs" or check.tier == "SHOULD", check_id
        assert not check.declaration_only or check.multi_group, check_id
