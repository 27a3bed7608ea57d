"""kvconform's adapter around vLLM's own connectors, against the installed vLLM (skipped without one).

Run with the vLLM venv (scripts/install-vllm.sh): the adapter must hand vLLM's unmodified ExampleConnector
views of the engine's own KV memory, so a stored prompt reloads byte-exact into a wiped engine; the
adapter declares SupportsHMA exactly when vLLM's class does.
"""

from __future__ import annotations

import random

import torch

import pytest

from tests.vllm_venvs import needs_vllm

pytest.importorskip("vllm.distributed.kv_transfer.kv_connector.factory",
                    reason=needs_vllm())

from reference_impl.connector.base import supports_hma  # noqa: E402
from reference_impl.engine.core import EngineConfig, EngineCore  # noqa: E402
from harness.targets.connector.vllm_adapter import adapter_class, standardized_view  # noqa: E402


def _prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(32000) for _ in range(length)]


def _engine(cls, preset="fa_only") -> EngineCore:
    return EngineCore(preset, EngineConfig(num_blocks=200), connector_factory=cls)


def test_example_connector_round_trip_through_the_adapter():
    engine = _engine(adapter_class("ExampleConnector"))
    tokens = _prompt(1, 200)  # 200 = 12 blocks of 16 + 8: store and lookup keys agree (see docs/vendor.md)
    first = engine.add_request(engine.make_request(tokens, max_tokens=2))
    engine.run_until_done()
    assert first.num_external_computed_tokens == 0
    assert engine.manager.reset_prefix_cache()
    for worker in engine.workers:
        worker.backing.fill_(0xFF)
    again = engine.add_request(engine.make_request(tokens, max_tokens=2))
    engine.run_until_done()
    assert again.num_external_computed_tokens == 192, "vLLM's ExampleConnector offers the block-aligned prompt"
    assert not engine.read_errors, f"the reload read wrong KV: {engine.read_errors[:1]}"


def test_registered_views_are_the_engines_memory():
    engine = _engine(adapter_class("ExampleConnector"))
    inner_views = engine.workers[0].connector._kv_caches
    name = next(iter(inner_views))
    view = inner_views[name]
    assert view.shape[1:] == (2, 16, 16), "[B, H, N, C]: 2 KV heads, 16 tokens, K and V of head size 8"
    view[3].fill_(7)
    assert (engine.workers[0].kv_caches[name][3] == 7).all(), "a write through the view lands in engine memory"
    assert standardized_view(engine.workers[0].kv_caches[name]).data_ptr() == view.data_ptr()


@pytest.mark.parametrize("name, hma", [("ExampleConnector", False), ("DecodeBenchConnector", True),
                                       ("OffloadingConnector", True)])
def test_adapter_declares_hma_as_vllm_does(name, hma):
    assert supports_hma(adapter_class(name)) is hma


def test_multiconnector_is_hma_only_when_every_child_is():
    assert not supports_hma(adapter_class("MultiConnector", ("DecodeBenchConnector", "ExampleConnector")))
    assert supports_hma(adapter_class("MultiConnector", ("DecodeBenchConnector", "DecodeBenchConnector")))


def test_mamba_layers_register_as_one_int8_page_tensor():
    """vLLM 0.33 registers a Mamba layer as one [B, 1, 1, state bytes] int8 tensor over the page."""
    engine = _engine(adapter_class("DecodeBenchConnector"), preset="fa+mamba_align")
    worker = engine.workers[0]
    name = next(n for n in worker.kv_caches if n.endswith(".mamba"))
    view = worker.connector._kv_caches[name]
    states = worker.kv_caches[name]
    page = sum(s[0].numel() * s.element_size() for s in states)
    assert view.dtype == torch.int8 and tuple(view.shape) == (len(states[0]), 1, 1, page)
    view[5].fill_(3)
    assert all((s[5].view(torch.int8) == 3).all() for s in states), "the view covers every state of block 5"
    assert not any((s[4].view(torch.int8) == 3).all() for s in states), "and nothing of block 4"


def test_device_mirrors_chain_back_to_the_engine(monkeypatch):
    """A CUDA-only connector gets device mirrors; on this CPU machine the same chain runs with a CPU 'device':
    what the connector writes into the mirror reaches the engine's memory after the hook."""
    from harness.targets.connector import vllm_adapter as adapter

    cls = adapter_class("DecodeBenchConnector")
    monkeypatch.setattr(cls, "device", "cpu")
    engine = _engine(cls)
    connector = engine.workers[0].connector
    name = next(iter(connector._kv_caches))
    mirror = connector._kv_caches[name]
    engine_view = engine.workers[0].kv_caches[name]
    assert mirror.data_ptr() != standardized_view(engine_view).data_ptr(), "a mirror, not the engine's memory"
    with connector._synced():
        mirror[7].fill_(5)
    assert (engine_view[7] == 5).all()
    engine_view[8].fill_(6)
    with connector._synced():
        assert (mirror[8] == 6).all(), "the mirror sees the engine's writes at the next hook"
    assert adapter.on_device({}, "cpu") == ({}, [])
