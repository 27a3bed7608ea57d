"""Store + load of one 32k-token request on `fa+swa` through the LMCache-like connector, side by side with a
plain torch copy of the same blocks on the same tensors (issue target: connector >= 0.5x the plain copy).

Setup runs the request through the mini engine once to capture the step metadata (every store of the
single-step prefill, then every load of a second identical request); a timed round replays the worker's
`wait_for_save` (into an emptied store) and `start_load_kv`. The plain copy gathers the same block ids
per layer into CPU tensors and scatters the loaded ones back, in batches of 64 blocks (one whole-table
`index_copy_` is several times slower on the CPU torch build, so batching is the fair peer). Under xdist nothing is timed and no metrics are recorded.
"""

from __future__ import annotations

import uuid

import pytest
import torch

from reference_impl.config.objects import KVTransferConfig
from reference_impl.engine.core import EngineConfig, EngineCore
from suites.connector.context import prompt

TOKENS = 32 * 1024
WORKLOAD = "connector.store_load_32k[fa+swa]"
_MEDIANS: dict[str, float] = {}


@pytest.fixture(scope="module")
def captured():
    """(worker connector, store metadata, load metadata, per-layer stored ids, per-layer loaded ids, KV views)."""
    ktc = KVTransferConfig(kv_connector="LMCacheLikeConnector",
                           kv_connector_extra_config={"store_name": f"bench-{uuid.uuid4().hex}", "cpu_bytes": 1 << 31})
    engine = EngineCore("fa+swa", EngineConfig(kv_transfer_config=ktc, num_blocks=4400, max_num_batched_tokens=TOKENS,
                                               max_model_len=TOKENS + 64))
    metas = []
    tokens = prompt(32, TOKENS)
    for request_tokens in (tokens, tokens + [1]):
        engine.add_request(engine.make_request(request_tokens))
        engine.run_until_done(before_execute=lambda so: metas.append(so.kv_connector_metadata), idle_steps=0)
        assert engine.manager.reset_prefix_cache()
    save_meta = next(m for m in metas if m.saves)
    load_meta = next(m for m in metas if m.loads)
    connector = engine.workers[0].connector
    groups = engine.kv_cache_config.kv_cache_groups
    store_ids: dict[str, list[int]] = {}
    load_ids: dict[str, list[int]] = {}
    for ops, out in ((save_meta.saves, store_ids), ([op for ops in load_meta.loads.values() for op in ops], load_ids)):
        for op in ops:
            for layer in groups[op.group_id].layer_names:
                out.setdefault(layer, []).extend(b for b in op.block_ids if b > 0)
    assert not engine.read_errors
    return connector, save_meta, load_meta, store_ids, load_ids, engine.workers[0].kv_caches


def _connector_round(connector, save_meta, load_meta):
    connector.store.clear()
    connector.bind_connector_metadata(save_meta)
    connector.wait_for_save()
    connector.bind_connector_metadata(load_meta)
    connector.start_load_kv(None)
    assert not connector.get_transfer_results(set()).failed_recving
    connector.clear_connector_metadata()


BATCH = 64


def _torch_round(store_ids, load_ids, kv_caches):
    saved: dict[str, list[torch.Tensor]] = {}
    for layer, ids in store_ids.items():
        saved[layer] = [kv_caches[layer].index_select(0, torch.tensor(ids[i : i + BATCH]))
                        for i in range(0, len(ids), BATCH)]
    for layer, ids in load_ids.items():
        # The same volume the connector loads, taken from the stored batches in order.
        rows = torch.cat(saved[layer])[: len(ids)]
        for i in range(0, len(ids), BATCH):
            kv_caches[layer].index_copy_(0, torch.tensor(ids[i : i + BATCH]), rows[i : i + BATCH])


@pytest.mark.benchmark_workload
@pytest.mark.parametrize("implementation", ["torch_copy", "LMCacheLikeConnector"])
def test_store_load_32k(benchmark, captured, kvconform_record, implementation):
    connector, save_meta, load_meta, store_ids, load_ids, kv_caches = captured
    if implementation == "torch_copy":
        run = lambda: _torch_round(store_ids, load_ids, kv_caches)  # noqa: E731
    else:
        run = lambda: _connector_round(connector, save_meta, load_meta)  # noqa: E731
    timing = not getattr(benchmark, "disabled", False)
    benchmark.pedantic(run, rounds=7 if timing else 1, warmup_rounds=1 if timing else 0)
    extra = {}
    if timing and benchmark.stats:
        median = benchmark.stats.stats.median
        _MEDIANS[implementation] = median
        blocks = sum(map(len, store_ids.values())) + sum(map(len, load_ids.values()))
        metrics = {"median_s": median, "requests_per_s": 1 / median, "block_ops_per_s": blocks / median}
        if implementation != "torch_copy" and "torch_copy" in _MEDIANS:
            metrics["ratio_to_torch_copy"] = _MEDIANS["torch_copy"] / median
        extra["metrics"] = metrics
    kvconform_record(suite="benchmark", cell={"workload": WORKLOAD, "implementation": implementation}, **extra)
