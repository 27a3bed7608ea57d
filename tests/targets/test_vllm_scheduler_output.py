"""The adapter hands a vLLM connector the scheduler output the installed release's own scheduler would build.

A request resumed after preemption is where releases differ: vLLM 0.33 sends it among the cached requests, flagged
in `CachedRequestData.resumed_req_ids`; vLLM 0.34's scheduler sends it as a new request (`NewRequestData`, whole
block table, every token so far to prefill) and its `CachedRequestData` has no `resumed_req_ids` (0.34's
ExampleConnector asserts on that: a resumed load it planned must come back among the new requests). The release's
dataclasses are stood in here by two small sets with those fields (no vLLM needed).
"""

from __future__ import annotations

import dataclasses
import types

import pytest

from harness.targets.connector import vllm_adapter as adapter_module
from harness.targets.allocator.capabilities import probe_capabilities
from harness.targets.connector.capabilities import CAPABILITIES
from reference_impl.engine.outputs import CachedRequestData, NewRequestData, SchedulerOutput


def _sched(with_resumed_ids: bool) -> types.SimpleNamespace:
    @dataclasses.dataclass
    class FakeNewRequestData:
        req_id: str
        prompt_token_ids: list
        mm_features: list
        sampling_params: object
        pooling_params: object
        block_ids: tuple
        num_computed_tokens: int
        lora_request: object
        prefill_token_ids: list
        prompt_embeds: object = None

    fields = [("req_ids", list), ("new_token_ids", list), ("all_token_ids", dict), ("new_block_ids", list),
              ("num_computed_tokens", list), ("num_output_tokens", list)]
    if with_resumed_ids:
        fields.insert(1, ("resumed_req_ids", set))
    fake_cached = dataclasses.make_dataclass("FakeCachedRequestData", fields)

    @dataclasses.dataclass
    class FakeSchedulerOutput:
        scheduled_new_reqs: list
        scheduled_cached_reqs: object
        num_scheduled_tokens: dict
        total_num_scheduled_tokens: int
        preempted_req_ids: set = dataclasses.field(default_factory=set)

    return types.SimpleNamespace(NewRequestData=FakeNewRequestData, CachedRequestData=fake_cached,
                                 SchedulerOutput=FakeSchedulerOutput)


@pytest.fixture
def convert(monkeypatch):
    def run(with_resumed_ids: bool, so: SchedulerOutput):
        sched = _sched(with_resumed_ids)
        monkeypatch.setattr(adapter_module, "_vllm", lambda: types.SimpleNamespace(sched=sched))
        # The adapter asks the release's capability table; its resumed_req_ids row is probed from the stand-ins.
        have, _ = probe_capabilities({"sched": sched}, {"resumed_req_ids": CAPABILITIES["resumed_req_ids"]})
        monkeypatch.setattr(adapter_module, "release_has", lambda name: name in have)
        adapter = object.__new__(adapter_module.VllmConnectorAdapter)
        adapter._requests = {"resumed": types.SimpleNamespace(prompt_token_ids=[1, 2, 3], sampling_params=None,
                                                              lora_request=None)}
        adapter.vllm_kv_cache_config = types.SimpleNamespace(kv_cache_groups=[object()])
        monkeypatch.setattr(adapter_module.VllmConnectorAdapter, "_block_state", lambda self, so: None)
        return adapter._scheduler_output(so)
    return run


def _output() -> SchedulerOutput:
    cached = CachedRequestData(
        req_ids=["running", "resumed"], resumed_req_ids={"resumed"}, new_token_ids=[[], []],
        all_token_ids={"resumed": [1, 2, 3, 9]}, new_block_ids=[([7],), ([4, 5],)], num_computed_tokens=[32, 3],
        num_output_tokens=[2, 1])
    return SchedulerOutput(
        scheduled_new_reqs=[NewRequestData("fresh", [8, 8], ([6],), 0)], scheduled_cached_reqs=cached,
        num_scheduled_tokens={"fresh": 2, "running": 1, "resumed": 1}, total_num_scheduled_tokens=4)


def test_a_release_with_resumed_req_ids_gets_the_resumed_request_among_the_cached_ones(convert):
    out = convert(True, _output())
    assert [r.req_id for r in out.scheduled_new_reqs] == ["fresh"]
    cached = out.scheduled_cached_reqs
    assert cached.req_ids == ["running", "resumed"] and cached.resumed_req_ids == {"resumed"}
    assert cached.new_block_ids == [([7],), ([4, 5],)]
    assert cached.all_token_ids == {"resumed": [1, 2, 3, 9]}


def test_a_release_without_resumed_req_ids_gets_the_resumed_request_as_a_new_one(convert):
    out = convert(False, _output())
    new = {r.req_id: r for r in out.scheduled_new_reqs}
    assert list(new) == ["fresh", "resumed"], "0.34 sends a resumed request among the new ones, after the fresh"
    resumed = new["resumed"]
    assert resumed.prompt_token_ids == [1, 2, 3], "its prompt, as vLLM's NewRequestData.from_request gives it"
    assert resumed.block_ids == ([4, 5],) and resumed.num_computed_tokens == 3, "its whole table, computed so far"
    assert resumed.prefill_token_ids == [1, 2, 3, 9], "every token so far (prompt and output) is prefilled again"
    cached = out.scheduled_cached_reqs
    assert cached.req_ids == ["running"] and cached.new_block_ids == [([7],)]
    assert cached.num_computed_tokens == [32] and cached.num_output_tokens == [2] and cached.new_token_ids == [[]]
    assert not hasattr(cached, "resumed_req_ids")
    assert new["fresh"].prefill_token_ids == [8, 8]


class _Manager:
    """What the adapter reads of the bound KV cache manager to build the block state."""

    def __init__(self, offloads: dict) -> None:
        self.offloads = offloads

    def take_boundary_state_offloads(self) -> dict:
        offloads, self.offloads = self.offloads, {}
        return offloads

    @staticmethod
    def get_block_ids(req_id: str) -> tuple[list[int], ...]:
        return ({"fresh": [6], "running": [1, 7], "idle": [2], "resumed": [4, 5], "offloaded": [3]}[req_id],)


def _block_state(monkeypatch, state_cls, so: SchedulerOutput):
    monkeypatch.setattr(adapter_module, "_vllm", lambda: types.SimpleNamespace(
        sched=types.SimpleNamespace(KVConnectorBlockState=state_cls)))
    monkeypatch.setattr(adapter_module, "release_has", lambda name: name == "block_state")
    adapter = object.__new__(adapter_module.VllmConnectorAdapter)
    adapter._requests = {r: object() for r in ("fresh", "running", "idle", "resumed", "offloaded")}
    adapter._kv_cache_manager = _Manager({"offloaded": [(0, 3, 256)], "gone": [(0, 9, 256)]})
    return adapter._block_state(so)


def _output_with_idle_request() -> SchedulerOutput:
    """`_output()` plus a cached request scheduled this step without new blocks, and no step for 'offloaded'."""
    cached = CachedRequestData(
        req_ids=["running", "idle", "resumed"], resumed_req_ids={"resumed"}, new_token_ids=[[], [], []],
        all_token_ids={"resumed": [1, 2, 3, 9]}, new_block_ids=[([7],), None, ([4, 5],)],
        num_computed_tokens=[32, 16, 3], num_output_tokens=[2, 1, 1])
    return SchedulerOutput(
        scheduled_new_reqs=[NewRequestData("fresh", [8, 8], ([6],), 0)], scheduled_cached_reqs=cached,
        num_scheduled_tokens={"fresh": 2, "running": 1, "idle": 1, "resumed": 1}, total_num_scheduled_tokens=5)


def test_a_release_with_a_block_table_snapshot_gets_the_tables_its_scheduler_snapshots(monkeypatch):
    """vLLM 0.29's KVConnectorBlockState is a snapshot (`block_ids`) of the new requests, the cached ones given
    blocks this step and those with a Mamba hand-off still live (0.29.0 scheduler.py:1286-1305)."""
    @dataclasses.dataclass
    class SnapshotBlockState:
        block_ids: dict
        boundary_state_offloads: dict

    state = _block_state(monkeypatch, SnapshotBlockState, _output_with_idle_request())
    assert state.block_ids == {"fresh": ([6],), "running": ([1, 7],), "resumed": ([4, 5],), "offloaded": ([3],)}
    assert state.boundary_state_offloads == {"offloaded": [(0, 3, 256)], "gone": [(0, 9, 256)]}


def test_a_release_with_a_block_table_resolver_gets_every_scheduled_request(monkeypatch):
    """vLLM 0.30+ resolve the table of any request scheduled this step, or with a live hand-off, on demand."""
    @dataclasses.dataclass
    class ResolvingBlockState:
        req_ids: set
        resolve_block_ids: object
        boundary_state_offloads: dict

    state = _block_state(monkeypatch, ResolvingBlockState, _output_with_idle_request())
    assert state.req_ids == {"fresh", "running", "idle", "resumed", "offloaded"}
    assert state.resolve_block_ids("idle") == ([2],)
