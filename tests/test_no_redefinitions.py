"""No function or class is defined twice in one module or class body.

A second `def` of the same name silently replaces the first, so the code a reader finds first may not be the
code that runs (the reference manager once carried two `prefix_cache_lookup_enabled`, and the older one was in
effect). The sources are read with ast; nothing is imported. Property setters/deleters, `typing.overload` and
`singledispatch` registrations legitimately reuse a name and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "reference_impl", "suites", "tests")
_REUSING_DECORATORS = (".setter", ".deleter", ".register", "overload")


def _redefinitions(source: str) -> list[tuple[str, str, int, int]]:
    """(scope, name, first line, second line) for each name defined twice in one module or class body."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.ClassDef)):
            continue
        first: dict[str, int] = {}
        for statement in node.body:
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if any(ast.unparse(d).endswith(_REUSING_DECORATORS) for d in statement.decorator_list):
                continue
            if statement.name in first:
                found.append((getattr(node, "name", "<module>"), statement.name, first[statement.name],
                              statement.lineno))
            first.setdefault(statement.name, statement.lineno)
    return found


def test_the_scan_finds_a_redefinition_and_spares_a_setter():
    source = (
        "class A:\n"
        "    def f(self): pass\n"
        "    @property\n"
        "    def p(self): pass\n"
        "    @p.setter\n"
        "    def p(self, v): pass\n"
        "    def f(self): pass\n"
    )
    assert _redefinitions(source) == [("A", "f", 2, 7)]


def test_no_name_is_defined_twice_in_one_scope():
    problems = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for scope, name, first, second in _redefinitions(path.read_text(encoding="utf-8")):
                problems.append(f"{path.relative_to(REPO)}: {scope}.{name} defined at line {first} and again at "
                                f"line {second} (the second silently replaces the first)")
    assert not problems, "\n".join(problems)
