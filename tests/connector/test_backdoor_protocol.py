"""The backdoor contract (`reference_impl.connector.backdoors`): every `kvconform_*` method the suite asks
for is declared in the Protocol, and the built-in connector (on its class) and the template's declaration (the
connector instance after `self`) offer exactly the declared ones, with the declared parameters."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from reference_impl.connector.backdoors import BACKDOOR_METHODS, BACKDOOR_PREFIX, KVConformBackdoors
from harness.targets.connector.template_declaration import TemplateConnectorUnderTest
from reference_impl.connector.lmcache_like import LMCacheLikeConnector
from harness.connector_checks import CHECKS

ROOT = Path(__file__).resolve().parents[2]
# Reviewed: the backdoors the suite knows today.
DECLARED = ("kvconform_chunk_size", "kvconform_evict", "kvconform_tracked_block_ids", "kvconform_object_keys",
            "kvconform_open_state")
_NAME = re.compile(r"\bkvconform_[a-z_]+")
_ASKED = re.compile(r"backdoor\([^()]*?\"(kvconform_[a-z_]+)\"")  # ctx.backdoor(engine, "kvconform_x") and the optional one


def test_the_protocol_declares_the_reviewed_backdoors():
    assert BACKDOOR_METHODS == DECLARED


def test_every_backdoor_the_suite_names_is_declared():
    named = {name for c in CHECKS.values() if c.backdoor for name in _NAME.findall(c.backdoor[1])}
    asked = {name for path in (ROOT / "suites" / "connector").glob("*.py") for name in _ASKED.findall(path.read_text())}
    assert len(asked) >= 4, f"the scan should find the suite's backdoor calls, found {sorted(asked)}"
    named |= asked
    assert named and named <= set(BACKDOOR_METHODS), sorted(named - set(BACKDOOR_METHODS))


def test_the_builtin_connector_offers_exactly_the_declared_backdoors_with_their_parameters():
    offered = {name for name in dir(LMCacheLikeConnector) if name.startswith(BACKDOOR_PREFIX)}
    assert offered == set(BACKDOOR_METHODS)
    for name in BACKDOOR_METHODS:
        ours = list(inspect.signature(getattr(LMCacheLikeConnector, name)).parameters)
        declared = list(inspect.signature(getattr(KVConformBackdoors, name)).parameters)
        assert ours == declared, f"{name}: {ours} != {declared}"


def test_the_template_declaration_offers_exactly_the_declared_backdoors_with_the_connector_first():
    offered = {name for name, value in vars(TemplateConnectorUnderTest).items()
               if name.startswith(BACKDOOR_PREFIX) and callable(value)}
    assert offered == set(BACKDOOR_METHODS)
    for name in BACKDOOR_METHODS:
        ours = list(inspect.signature(getattr(TemplateConnectorUnderTest, name)).parameters)
        declared = list(inspect.signature(getattr(KVConformBackdoors, name)).parameters)
        assert ours == ["self", "connector", *declared[1:]], f"{name}: {ours} != self, connector, {declared[1:]}"
