"""kvconform's MultiConnector (reference_impl/connector/multi.py) with a child that does not declare SupportsHMA:
on a single-group model the child gets the single-group finish hook, as vLLM's scheduler calls it on such a
connector; kvconform's adapter of a vLLM connector without SupportsHMA offers no all-groups hook at all, so the
MultiConnector called None (check C37 with vllm:ExampleConnector as a child, vLLM 0.14.0)."""

from __future__ import annotations

import uuid

from reference_impl.config.objects import KVTransferConfig
from reference_impl.connector.lmcache_like import ExampleConnector
from reference_impl.connector.store import drop_shared_store
from reference_impl.engine.core import EngineConfig, EngineCore, ModelConfig

FINISHED: list[tuple[str, str]] = []


class SingleGroupHookOnly(ExampleConnector):
    """The reference example connector as kvconform's adapter offers a vLLM connector without SupportsHMA."""

    request_finished_all_groups = None

    def request_finished(self, request, block_ids):
        FINISHED.append((request.request_id, "request_finished"))
        return super().request_finished_all_groups(request, (block_ids,))  # the parent's cleanup


def test_a_child_without_supports_hma_gets_the_single_group_finish_hook():
    store = f"multi-test-{uuid.uuid4().hex[:8]}"
    children = [{"kv_connector": "SingleGroupHookOnly", "kv_connector_module_path": __name__, "kv_role": "kv_both",
                 "kv_connector_extra_config": {"store_name": f"{store}-0"}},
                {"kv_connector": "LMCacheLikeConnector", "kv_role": "kv_both",
                 "kv_connector_extra_config": {"store_name": f"{store}-1"}}]
    config = EngineConfig(model_config=ModelConfig(f"kvconform/multi-test/{store}"), num_blocks=200,
                          kv_transfer_config=KVTransferConfig(kv_connector="MultiConnector", kv_role="kv_both",
                                                              kv_connector_extra_config={"connectors": children}))
    engine = EngineCore("fa_only", config)
    try:
        request = engine.add_request(engine.make_request(list(range(1, 300)), max_tokens=2))
        engine.run_until_done()
        assert (request.request_id, "request_finished") in FINISHED
        assert not engine.read_errors
    finally:
        for index in range(2):
            drop_shared_store(f"{store}-{index}")
