"""The typed connector Protocols (`reference_impl.connector.protocol`) say what the engine calls: the
reference connectors satisfy them, their signatures are the base class's (and vLLM 0.33's, where vLLM is
installed), and a class missing a hook is refused by name before anything runs."""

from __future__ import annotations

import importlib.util
import inspect

import pytest

from harness.targets.connector.target import ConnectorLoadError, ConnectorTarget
from reference_impl.connector.base import KVConnectorBase_V1, KVConnectorRole, SupportsHMA
from reference_impl.connector.protocol import HMAKVConnector, KVConnector, ONE_OF, REQUIRED_HOOKS
from reference_impl.connector.template import TemplateConnector
from reference_impl.engine.core import EngineConfig, EngineCore
from tests.vllm_venvs import needs_vllm

HOOKS = [name for name in (*KVConnector.__dict__, *HMAKVConnector.__dict__)
         if not name.startswith("_") and callable(getattr(HMAKVConnector, name, None))]


def _built(spec: str):
    """Instances of a built-in connector, as the engine builds them (scheduler, worker)."""
    cls = ConnectorTarget("t", spec, "test", builtin=True).load()
    made = []
    EngineCore("fa_only", EngineConfig(), connector_factory=lambda c, r, k: made.append(cls(c, r, k)) or made[-1])
    return made


def test_the_template_connector_satisfies_the_hma_protocol():
    built = _built("reference_impl.connector.template:TemplateConnector")
    assert built and all(isinstance(c, HMAKVConnector) for c in built)
    assert {c.role for c in built} == {KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER}


def test_the_reference_connectors_satisfy_the_protocols():
    hma = _built("reference_impl.connector.lmcache_like:LMCacheLikeConnector")
    assert hma and all(isinstance(c, HMAKVConnector) for c in hma)
    plain = _built("reference_impl.connector.lmcache_like:ExampleConnector")
    assert all(isinstance(c, KVConnector) for c in plain)
    assert {c.role for c in hma} == {KVConnectorRole.SCHEDULER, KVConnectorRole.WORKER}


def _parameters(function) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("hook", HOOKS)
def test_hook_signatures_are_the_base_classes(hook):
    owner = SupportsHMA if hook == "request_finished_all_groups" else KVConnectorBase_V1
    assert _parameters(getattr(HMAKVConnector, hook)) == _parameters(getattr(owner, hook))


@pytest.mark.parametrize("hook", [h for h in HOOKS if h in vars(TemplateConnector)])
def test_the_template_keeps_the_hook_signatures(hook):
    """A vendor copies the template's hooks: their parameters are the Protocol's (vLLM 0.33's)."""
    assert _parameters(getattr(TemplateConnector, hook)) == _parameters(getattr(HMAKVConnector, hook))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason=needs_vllm("vLLM, to compare the hook signatures with its own"))
@pytest.mark.parametrize("hook", HOOKS)
def test_hook_signatures_are_vllms(hook):
    from vllm.distributed.kv_transfer.kv_connector.v1 import base

    owner = base.SupportsHMA if hook == "request_finished_all_groups" else base.KVConnectorBase_V1
    assert _parameters(getattr(HMAKVConnector, hook)) == _parameters(getattr(owner, hook))


def test_a_class_missing_a_hook_is_refused_by_name():
    assert "wait_for_save" in REQUIRED_HOOKS and ("get_transfer_results", "get_finished") in ONE_OF
    with pytest.raises(ConnectorLoadError, match="lacks the connector hooks .*wait_for_save"):
        ConnectorTarget("m", "tests.connector.test_protocol:NoSaveWait", "test").load()


class NoSaveWait(KVConnectorBase_V1):
    """Every hook of the base class but wait_for_save."""

    wait_for_save = None
