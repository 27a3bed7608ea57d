"""No import cycle among the project's modules (`harness`, `reference_impl`, `suites`).

Every `import` statement counts, including those inside functions: an import moved into a function to dodge
a cycle at import time is still a cycle of concerns. The graph is read from the sources (ast), so nothing is
imported; its strongly connected components with more than one module are the cycles.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "reference_impl", "suites")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # `from pkg import mod` depends on pkg.mod when that is a module, else on pkg
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            edges |= {found for found in map(owner, targets) if found and found != name}
        # Importing a.b.c runs the packages a and a.b first: an import reaches their __init__ too (a cycle
        # through a package's __init__ is one even when the import names a submodule), except the packages
        # this module itself lives in, which are being imported already.
        own = {name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)} | {name}
        edges |= {parent for target in set(edges) for parent in _parents(target, modules) if parent not in own}
        edges.discard(name)
        graph[name] = edges
    return graph


def _parents(module: str, modules: dict[str, Path]) -> list[str]:
    """The packages of `module` that are modules of the scan (their __init__ runs when it is imported)."""
    parts = module.split(".")
    return [".".join(parts[:depth]) for depth in range(1, len(parts)) if ".".join(parts[:depth]) in modules]


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_the_detector_finds_a_cycle_through_a_function_local_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == {frozenset({"a", "b", "c"})}
    source = "def f():\n    from reference_impl.config import resolution\n"
    tree = ast.parse(source)
    assert any(isinstance(n, ast.ImportFrom) for n in ast.walk(tree)), "imports inside functions are walked"


def test_an_import_of_a_submodule_reaches_its_package_init(tmp_path):
    """`from p.q.base import x` runs p/q/__init__.py: a cycle through it is a cycle (config/factory.py and
    connector/__init__.py once were held apart only by import order)."""
    for path, text in {"p/__init__.py": "", "p/q/__init__.py": "from p.r import f\n", "p/q/base.py": "",
                       "p/r.py": "from p.q.base import x\n"}.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    modules = {"p": tmp_path / "p/__init__.py", "p.q": tmp_path / "p/q/__init__.py",
               "p.q.base": tmp_path / "p/q/base.py", "p.r": tmp_path / "p/r.py"}
    assert _cycles(_graph(modules)) == {frozenset({"p.q", "p.r"})}


@functools.cache
def _project_graph() -> dict[str, set[str]]:
    """The project's import graph, read once per process: both tests below walk it (parsing every module is
    about 0.8 CPU-s)."""
    return _graph(_modules())


def test_no_import_cycle_among_project_modules():
    graph = _project_graph()
    assert len(graph) > 150 and graph["harness.cli"], "the scan should see the project's modules and imports"
    cycles = sorted(sorted(c) for c in _cycles(graph))
    assert not cycles, f"import cycles: {cycles}"


def test_imports_run_down_the_floors_only():
    """suites -> harness -> reference_impl: reference_impl imports neither harness nor suites, and harness imports
    no suite (what both read, such as the connector checks' records, lives on the lower floor)."""
    graph = _project_graph()
    floor = {"reference_impl": 0, "harness": 1, "suites": 2}
    upward = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                    if floor[target.split(".")[0]] > floor[module.split(".")[0]])
    assert not upward, f"imports that run up a floor: {upward}"
