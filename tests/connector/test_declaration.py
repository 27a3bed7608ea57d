"""The declared connector under test (`harness.ConnectorUnderTest`, issue 33 item 5): a declaration and the bare
class with the same options make the same target and decide the same checks; the template's backdoors live on its
declaration, not on the product class, and are the ones the checks use; backdoors on the connector class (the older
channel) are still used where the declaration implements none; a bad declaration is one line naming the field, its
value and what is accepted (exit status 2 from the command line)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import ConnectorUnderTest
from harness.errors import EXIT_USAGE
from harness.targets.connector.declaration import BACKDOOR_METHODS, DECLARATION_KEY, DeclarationError
from harness.targets.connector.profile import split_declaration
from harness.targets.connector.selection import connector_target
from reference_impl.connector.backdoors import BACKDOOR_METHODS as PROTOCOL_BACKDOORS
from harness.targets.connector.template_declaration import TemplateConnectorUnderTest
from reference_impl.connector.template import TemplateConnector
from tests.connector.declared import ClassBackdoors
from tests.connector.suite_process import results_by_test, suite_command

REPO = Path(__file__).resolve().parents[2]
BARE = "reference_impl.connector.template:TemplateConnector"
TEMPLATE_DECLARATION = "harness.targets.connector.template_declaration:TemplateConnectorUnderTest"
CLASS_BACKDOORS = "tests.connector.declared:ClassBackdoors"
CLASS_BACKDOORS_DECLARED = "tests.connector.declared:ClassBackdoorsDeclared"
BARE_RENAMED = "tests.connector.declared:ShippedTemplate"


def test_a_declaration_may_implement_every_backdoor_of_the_protocol():
    assert BACKDOOR_METHODS == PROTOCOL_BACKDOORS


def test_the_template_class_carries_no_backdoor_and_its_declaration_implements_each():
    assert [name for name in dir(TemplateConnector) if name.startswith("kvconform_")] == []
    assert all(callable(vars(TemplateConnectorUnderTest).get(name)) for name in BACKDOOR_METHODS)


def test_the_template_declared_and_the_bare_template_with_its_extra_config_are_one_configuration():
    declared = connector_target(TEMPLATE_DECLARATION)
    bare = connector_target(BARE)
    bare.apply_run_options(*split_declaration({DECLARATION_KEY: TemplateConnectorUnderTest().profile_fields()}))
    assert declared.name == bare.name == "TemplateConnector"
    assert declared.load() is bare.load() is TemplateConnector
    assert (declared.extra_config, declared.declared) == (bare.extra_config, bare.declared)
    assert declared.profile == bare.profile
    assert declared.profile.source == "inferred, options declared"  # kind not declared: inferred
    assert bare.declaration.default and not declared.declaration.default


def test_the_run_options_merge_over_the_declaration():
    target = connector_target(TEMPLATE_DECLARATION)
    target.apply_run_options({"chunk_size": 512}, {"store_scope": "engine"})
    assert target.extra_config == {"chunk_size": 512}
    assert target.profile.store_scope == "engine"  # the run's "kvconform" object overrides the declared field
    assert target.profile.async_load_config == {"load_async": True}  # the rest stays declared


class _Sixteen(ConnectorUnderTest):
    """A declaration whose chunk-size backdoor answers 16 whatever the connector's own says."""

    connector = ClassBackdoors

    def kvconform_chunk_size(self, connector) -> int:
        return 16


def test_backdoors_come_from_the_declaration_else_from_the_class():
    plain = object.__new__(TemplateConnector)
    plain.chunk_size = 64
    assert connector_target(TEMPLATE_DECLARATION).backdoor("kvconform_chunk_size", plain)() == 64
    assert connector_target(BARE).backdoor("kvconform_chunk_size", plain) is None  # the product offers none
    older = object.__new__(ClassBackdoors)
    older.chunk_size = 32
    for spec in (CLASS_BACKDOORS, CLASS_BACKDOORS_DECLARED):  # the class's own methods: the older channel
        assert connector_target(spec).backdoor("kvconform_chunk_size", older)() == 32, spec
    assert _Sixteen().backdoor("kvconform_chunk_size", older)() == 16  # the declaration's wins over the class's


@pytest.mark.parametrize("spec, needle", [
    ("tests.connector.declared:BadKind", "BadKind.kind is 'cache'; accepted: stores (stores and loads KV), dummy "
                                         "(fills dummy KV), transfer (transfers KV between instances only)"),
    ("tests.connector.declared:TypoField", "TypoField.store_scop is not a field of a declaration; accepted: "
                                           "connector, name, extra_config, kind, multi_group, async_load_config, "
                                           "store_scope, block_size_option"),
    ("tests.connector.declared:NoConnector", "NoConnector.connector is 'reference_impl.connector.template:"
                                             "TemplateConnector'; accepted: a connector class"),
])
def test_a_bad_declaration_names_the_field_the_value_and_what_is_accepted(spec, needle):
    with pytest.raises(DeclarationError) as info:
        connector_target(spec)
    assert str(info.value) == f"--kv-connector {spec}: {needle}"
    assert info.value.exit_code == EXIT_USAGE


def test_the_command_line_refuses_a_bad_declaration_in_one_line_with_exit_status_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--suite", "suites.connector",
                           "--kv-connector", "tests.connector.declared:BadKind", "--output-dir", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip().splitlines() == [
        "kvconform report: --kv-connector tests.connector.declared:BadKind: BadKind.kind is 'cache'; accepted: stores "
        "(stores and loads KV), dummy (fills dummy KV), transfer (transfers KV between instances only)"]


# C01 reads the class; C08 (a SHOULD) decides only through kvconform_evict; C10 is sharpened by the tracked tables.
CHECKS = ("c01", "c08", "c10")


def test_the_suite_decides_the_same_on_the_declaration_as_on_the_bare_class_and_uses_its_backdoors(tmp_path):
    """One suite run, three targets: the template's declaration (its backdoors on the declaration), the template
    with the same backdoors on its class under the same profile (the older channel), and the template class bare (no
    backdoors anywhere)."""
    results = tmp_path / "results.json"
    cmd = suite_command(results, [TEMPLATE_DECLARATION, CLASS_BACKDOORS_DECLARED, BARE_RENAMED], extra_config="{}",
                        selection=list(CHECKS))
    done = subprocess.run(cmd + ["-s"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    by_test = results_by_test(results)
    where = done.stdout[-4000:]
    assert by_test, where

    def outcomes(name: str) -> dict[str, str]:
        return {test.replace(f"[{name}-", "[").replace(f"[{name}]", "[]"): entry["status"]
                for test, entry in by_test.items() if f"[{name}-" in test or f"[{name}]" in test}

    template, older, bare = (outcomes("TemplateConnector"), outcomes("ClassBackdoorsDeclared"),
                             outcomes("ShippedTemplate"))
    assert template and template == older, where
    assert set(template.values()) == {"passed"}, where  # C08 decides: the declaration's kvconform_evict is used
    c08 = {test for test in bare if test.startswith("test_c08")}
    assert c08 and {bare[test] for test in c08} == {"skipped"}, where  # no backdoor anywhere: C08 cannot decide
    assert "kvconform_evict on the connector class" in done.stdout, where
    assert ("kv-connector profile: ClassBackdoorsDeclared: stores and loads KV, declares HMA, async loads configured, "
            "a store that lives and dies with its process (a new process starts empty) (inferred, options declared)"
            ) in done.stdout, where


def test_an_entry_point_names_a_declaration_and_a_bad_one_is_a_load_error_of_its_own(monkeypatch):
    from importlib import metadata

    from harness.targets.connector import selection

    points = [metadata.EntryPoint("Declared", TEMPLATE_DECLARATION, selection.ENTRY_POINT_GROUP),
              metadata.EntryPoint("Bad", "tests.connector.declared:BadKind", selection.ENTRY_POINT_GROUP)]
    monkeypatch.setattr(selection.metadata, "entry_points", lambda group: points if group == selection.ENTRY_POINT_GROUP
                        else [])
    declared, bad = selection.entry_point_targets()
    assert declared.name == "Declared" and declared.profile.store_scope == "process"
    assert declared.backdoor("kvconform_chunk_size", object.__new__(TemplateConnector)) is not None
    with pytest.raises(DeclarationError, match=r"^entry point 'Bad' tests.connector.declared:BadKind: BadKind.kind"):
        bad.load()  # the suite reports it as the connector's load error (unusable_targets), not at selection
