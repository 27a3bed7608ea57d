"""One spec grammar for every kind of target (`harness.target_spec`): what each spec parses to, and that a
built-in connector named on the command line is the built-in (it used to pass `kvconform report`'s up-front
check and then fail at collection, "expected 'module:Class'"). The bad specs' one-line answers, from
pytest and `kvconform report`, are rows of tests/test_bad_input_catalogue.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import EXIT_TARGET
from harness.target_spec import KINDS, TargetError, parse_spec
from harness.targets.connector.selection import BUILTIN_TARGETS, check_loadable, select_targets

ROOT = Path(__file__).resolve().parents[2]

# kind, text -> (builtin, vllm_name, module, attribute)
PARSED = [
    ("config", "vllm", ("vllm", None, None, None)),
    ("config", " pkg.mod:resolve ", (None, None, "pkg.mod", "resolve")),
    ("config", "pkg.mod:Cls.method", (None, None, "pkg.mod", "Cls.method")),
    ("config", "vllm:Name", (None, None, "vllm", "Name")),  # only connectors have vllm: names
    ("allocator", "reference", ("reference", None, None, None)),
    ("allocator", "vllm", ("vllm", None, None, None)),
    ("allocator", "pkg:make", (None, None, "pkg", "make")),
    ("connector", "LMCacheLikeConnector", ("LMCacheLikeConnector", None, None, None)),
    ("connector", "MultiConnector", ("MultiConnector", None, None, None)),
    ("connector", "vllm:ExampleConnector", (None, "ExampleConnector", None, None)),
    ("connector", "kvconform:ExampleConnector", ("ExampleConnector", None, None, None)),  # the report's label
    ("connector", "vllm:MultiConnector[A,B]", (None, "MultiConnector[A,B]", None, None)),
    ("connector", "vendor.kv:Conn", (None, None, "vendor.kv", "Conn")),
]


@pytest.mark.parametrize("kind, text, expected", PARSED, ids=[f"{k}-{t.strip()}" for k, t, _ in PARSED])
def test_spec_parses(kind, text, expected):
    spec = parse_spec(kind, text)
    assert (spec.builtin, spec.vllm_name, spec.module, spec.attribute) == expected


REFUSED = [
    ("config", "", "--hma-target '': not of the form module:callable or one of vllm"),
    ("config", "pkg.mod", "--hma-target pkg.mod: not of the form module:callable or one of vllm"),
    ("config", ":f", "--hma-target :f: not of the form"),
    ("allocator", "pkg:", "--kv-allocator pkg:: not of the form module:factory or one of reference, vllm"),
    ("allocator", "vlm", "--kv-allocator vlm: not of the form module:factory or one of reference, vllm; did you mean vllm?"),
    ("connector", "vllm:", "--kv-connector 'vllm:': names no connector; accepted: module:Class or vllm:NAME or one of "
                           "LMCacheLikeConnector, ExampleConnector, MultiConnector"),
    ("connector", "ExampleConector", "did you mean ExampleConnector?"),
    ("connector", "kvconform:Foo", "--kv-connector 'kvconform:Foo': names none of kvconform's connectors "
                                   "(LMCacheLikeConnector, ExampleConnector, MultiConnector)"),
]


@pytest.mark.parametrize("kind, text, message", REFUSED, ids=[f"{k}-{t!r}" for k, t, _ in REFUSED])
def test_malformed_spec_is_one_line_exit_4(kind, text, message):
    with pytest.raises(TargetError) as info:
        parse_spec(kind, text)
    assert info.value.exit_code == EXIT_TARGET
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_option_named_is_the_one_the_user_typed():
    with pytest.raises(TargetError) as info:
        parse_spec("config", "vlm", option="--target")
    assert str(info.value).startswith("--target vlm: ")


def test_every_kind_names_its_pytest_option():
    assert {kind: k.option for kind, k in KINDS.items()} == {
        "config": "--hma-target", "allocator": "--kv-allocator", "connector": "--kv-connector"}


def test_builtin_connector_by_name_is_the_builtin():
    builtin = {t.name: t for t in BUILTIN_TARGETS}
    target = check_loadable("MultiConnector")
    assert (target.name, target.builtin, target.extra_config) == \
        ("MultiConnector", True, builtin["MultiConnector"].extra_config)
    assert target.load().__module__ == "reference_impl.connector.multi"
    chosen = select_targets(["LMCacheLikeConnector"], include_builtins=True)
    assert [t.name for t in chosen] == ["ExampleConnector", "MultiConnector", "LMCacheLikeConnector"], \
        "asking for the built-ins too lists each built-in once"


def test_the_builtin_connectors_have_one_reader_that_harness_and_engine_share():
    """harness reads the names without importing the reference engine, through the engine's own reader, and no
    other source names the data file (a string literal of its name)."""
    from reference_impl.connector import BUILTIN_CONNECTORS
    from harness.target_spec import BUILTIN_CONNECTORS as harness_names

    assert harness_names == BUILTIN_CONNECTORS and "LMCacheLikeConnector" in BUILTIN_CONNECTORS
    sources = [path for folder in ("harness", "reference_impl", "suites") for path in (ROOT / folder).rglob("*.py")]
    readers = [str(path.relative_to(ROOT)) for path in sources
               if '"builtin_connectors.json"' in path.read_text(encoding="utf-8")]
    assert readers == ["reference_impl/connector/builtin_names.py"], readers


def test_pytest_collects_a_builtin_connector_named_on_the_command_line():
    """What `kvconform report --kv-connector LMCacheLikeConnector` passes to pytest: the built-in's checks."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "--co", "-q",
                           "-p", "no:cacheprovider", "-p", "no:xdist", "--kv-connector", "LMCacheLikeConnector"],
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    items = [line for line in proc.stdout.splitlines() if "::" in line]
    assert items and all("LMCacheLikeConnector" in line for line in items if "[" in line), items[:5]
    assert not any("ExampleConnector" in line for line in items)
