"""Spec 4.2, keys: C30 key-isolation, C34 tp-rank-shards, C36 determinism across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from reference_impl.engine.presets import PRESETS
from reference_impl.kv_cache.request import LoRARequest
from reference_impl.kv_cache.specs import SlidingWindowSpec
from suites.connector.context import expect, expect_no_read_errors, prompt

MULTI_PRESETS = [p for p in PRESETS if len(PRESETS[p].groups) > 1]


@pytest.mark.kv_check("C30")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa", "fa+swa+mamba"])
def test_c30_key_isolation(ctx, preset):
    """Another cache salt or LoRA gets no hit; losing one group's object never changes another group's."""
    engine = ctx.engine()
    tokens = prompt(30, 800)
    ctx.run(engine, tokens, cache_salt="tenant-a")
    ctx.run(engine, tokens, lora_request=LoRARequest("adapter-a", 1))
    ctx.forget_local_cache(engine)
    for label, kwargs in (("cache_salt tenant-b", {"cache_salt": "tenant-b"}),
                          ("no salt", {}),
                          ("LoRA adapter-b", {"lora_request": LoRARequest("adapter-b", 2)})):
        request = engine.make_request(tokens + [1], **kwargs)
        n, _ = engine.connector.get_num_new_matched_tokens(request, 0)
        expect(not n, f"{label}: hit {n} on objects stored under another key")
        engine.add_request(request)
        engine.abort_request(request.request_id)
    same = engine.make_request(tokens + [1], cache_salt="tenant-a")
    n, _ = engine.connector.get_num_new_matched_tokens(same, 0)
    expect(n and n > 0, "the same salt must hit (the isolation test is otherwise vacuous)")
    engine.add_request(same)
    engine.abort_request(same.request_id)
    evict = getattr(engine.connector.inner, "kvconform_evict", None)
    swa = [g for g, grp in enumerate(engine.kv_cache_config.kv_cache_groups)
           if isinstance(grp.kv_cache_spec, SlidingWindowSpec)]
    if evict is not None and swa:
        probe = engine.make_request(tokens + [1], cache_salt="tenant-a")
        chunk = engine.connector.inner.kvconform_chunk_size()
        for j in range(len(tokens) // chunk):
            evict(probe, swa[0], j)
        after, _ = engine.connector.get_num_new_matched_tokens(probe, 0)
        expect(not after, f"hit {after} with every sliding-window object gone: group objects alias")
        engine.add_request(probe)
        engine.abort_request(probe.request_id)


@pytest.mark.kv_check("C34")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa"])
def test_c34_tp_rank_shards(ctx, preset):
    """With TP=2 (one KV head per rank), each rank gets back its own shard."""
    engine = ctx.engine(tp=2)
    reload = ctx.store_then_reload(engine, prompt(34, 700))
    expect(reload.num_external_computed_tokens > 0, "no hit with TP=2 after storing")
    expect_no_read_errors(engine, "TP=2 reload")


_KEYS_SCRIPT = """
import json, sys
from harness.targets.connector_target import ConnectorTarget
from suites.connector.context import CheckContext, prompt
target = ConnectorTarget(*json.loads(sys.argv[1]))
ctx = CheckContext(target, "fa+swa")
engine = ctx.engine(extra=json.loads(sys.argv[2]))
print(json.dumps(engine.connector.inner.kvconform_object_keys(engine.make_request(prompt(36, 600), cache_salt="s"))))
"""


@pytest.mark.kv_check("C36")
def test_c36_determinism_across_processes(ctx):
    """Object keys of one prompt are identical in two processes with different PYTHONHASHSEED."""
    if not ctx.is_hma:
        pytest.skip(f"not HMA-capable: {ctx.cls.__name__} does not declare SupportsHMA")
    probe = ctx.engine("fa+swa")
    ctx.backdoor(probe, "kvconform_object_keys")
    target = ctx.target
    args = json.dumps([target.name, target.spec, target.source, ctx.extra_config(), target.builtin])
    keys = []
    for seed in ("1", "4242"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", _KEYS_SCRIPT, args, json.dumps(ctx.extra_config())],
                             capture_output=True, text=True, env=env, timeout=120)
        expect(out.returncode == 0, f"key probe failed: {out.stderr.strip().splitlines()[-1:]}")
        keys.append(json.loads(out.stdout.strip().splitlines()[-1]))
    expect(keys[0] and keys[0] == keys[1], f"keys differ across processes: {keys[0][:1]} vs {keys[1][:1]}")
