"""`CheckContext`: builds mini engines around the connector under test and runs the shared scenarios.

Every connector instance is wrapped in a `ConnectorGuard`, so a raising hook fails the check with the
hook's name, and the checks can observe (`calls`) and instrument (`around`) hooks.
"""

from __future__ import annotations

import copy
import itertools
import random
import uuid

import pytest

from harness.targets.connector_target import ConnectorLoadError, ConnectorTarget, guard_class
from reference_impl.config.objects import KVTransferConfig
from reference_impl.connector.base import KVConnectorRole
from reference_impl.engine.core import EngineConfig, EngineCore, ModelConfig, ParallelConfig
from reference_impl.engine.presets import get_preset
from reference_impl.kv_cache.specs import MambaSpec

_counter = itertools.count()

# Pool sizes (blocks) per preset that hold one 700-token request but not two: running two forces a preemption.
PREEMPTING_POOL = {"fa_only": 60, "fa+swa": 80, "fa16+swa32": 80, "fa+mamba_align": 60, "fa+swa+mamba": 80,
                   "scratch_group": 120}


def prompt(seed: int, length: int, vocab: int = 32000) -> list[int]:
    """A deterministic random prompt."""
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(length)]


class CheckContext:
    """One check's view of the connector under test on one preset."""

    def __init__(self, target: ConnectorTarget, preset: str | None):
        self.target = target
        self.preset = preset
        self.load_error: str | None = None
        self.calls: list = []
        self.around: dict = {}
        self.state: dict = {"current": None}
        self.engines: list[EngineCore] = []
        try:
            self.cls = target.load()
        except ConnectorLoadError as exc:
            # Reported as the check's failure (in the call phase), not as a setup error.
            self.load_error, self.cls, self.is_hma = f"connector does not load: {exc}", None, False
            return
        self.is_hma = target.is_hma
        if preset is not None and len(get_preset(preset).groups) > 1 and not self.is_hma:
            pytest.skip(f"not HMA-capable: {self.cls.__name__} does not declare SupportsHMA, so vLLM refuses "
                        f"it on the multi-group preset {preset}")

    # ---- construction -----------------------------------------------------------------------------
    def extra_config(self, **builtin_options) -> dict:
        """The target's extra config; built-ins also get a private store and `builtin_options`."""
        extra = copy.deepcopy(self.target.extra_config)
        if self.target.builtin:
            store = f"kvconform-{uuid.uuid4().hex[:8]}-{next(_counter)}"
            extra.update(store_name=store, **builtin_options)
            for index, child in enumerate(extra.get("connectors") or ()):
                child["kv_connector_extra_config"] = dict(child.get("kv_connector_extra_config") or {},
                                                          store_name=f"{store}-child{index}", **builtin_options)
        return extra

    def engine(self, preset: str | None = None, *, num_blocks: int = 400, tp: int = 1, extra: dict | None = None,
               max_num_batched_tokens: int = 2048, kernel_block_ratio: int = 1, **builtin_options) -> EngineCore:
        """A fresh engine whose connectors are guarded instances of the target class.

        `builtin_options` go into the extra config of built-in connectors only (a vendor's keeps its own).
        """
        ktc = KVTransferConfig(kv_connector=self.cls.__name__, kv_role="kv_both",
                               kv_connector_module_path=self.cls.__module__,
                               kv_connector_extra_config=extra if extra is not None else self.extra_config(**builtin_options))
        preset = preset or self.preset
        # One model name per model (and kernel layout): a vendor's store outlives the engine, and objects of
        # one preset must not be offered to another whose groups differ.
        model = f"kvconform/{preset}" + (f"@kernel{kernel_block_ratio}" if kernel_block_ratio > 1 else "")
        config = EngineConfig(model_config=ModelConfig(model), kv_transfer_config=ktc, num_blocks=num_blocks,
                              parallel_config=ParallelConfig(tensor_parallel_size=tp),
                              max_num_batched_tokens=max_num_batched_tokens, kernel_block_ratio=kernel_block_ratio)
        engine = EngineCore(preset, config, connector_factory=self.factory)
        self.engines.append(engine)
        return engine

    def factory(self, vllm_config, role, kv_cache_config):
        """Build and guard one connector instance."""
        inner = self.cls(vllm_config, role, kv_cache_config)
        return guard_class(self.cls)(inner, role, self.calls, self.around, self.state)

    def calls_of(self, hook: str, role: KVConnectorRole | None = None) -> list:
        """(role, hook, args, result) entries of `hook`."""
        return [c for c in self.calls if c[1] == hook and (role is None or c[0] == role)]

    # ---- scenarios --------------------------------------------------------------------------------
    @staticmethod
    def run(engine: EngineCore, tokens, *, max_tokens: int = 2, **kwargs):
        """Run one request to completion (plus idle steps) and return it."""
        request = engine.add_request(engine.make_request(tokens, max_tokens=max_tokens, **kwargs))
        engine.run_until_done()
        return request

    @staticmethod
    def forget_local_cache(engine: EngineCore) -> None:
        """Empty vLLM's own prefix cache, so the next hit can only come from the connector."""
        assert engine.manager.reset_prefix_cache(), "prefix cache reset refused: a request still holds blocks"

    def wipe(self, engine: EngineCore) -> None:
        """Forget the local prefix cache and overwrite all KV memory: what comes back must be loaded."""
        self.forget_local_cache(engine)
        for worker in engine.workers:
            worker.backing.fill_(0xFF)

    def store_then_reload(self, engine: EngineCore, tokens, reload_tokens=None, wipe: bool = True, **kwargs):
        """Store `tokens`, forget the local cache, optionally wipe KV memory, run `reload_tokens`.

        Returns the reloading request (its `num_external_computed_tokens` is the connector's hit).
        """
        self.run(engine, tokens, **kwargs)
        if wipe:
            self.wipe(engine)
        else:
            self.forget_local_cache(engine)
        return self.run(engine, reload_tokens if reload_tokens is not None else tokens + [7, 8, 9], **kwargs)

    def chunk_size(self, engine: EngineCore) -> int | None:
        """The connector's chunk size through the `kvconform_chunk_size` backdoor, if it has one."""
        probe = getattr(engine.connector, "kvconform_chunk_size", None)
        if probe is None and hasattr(engine.connector.inner, "connectors"):
            probe = getattr(engine.connector.inner.connectors[0], "kvconform_chunk_size", None)
        return probe() if probe is not None else None

    def backdoor(self, engine: EngineCore, name: str):
        """The connector's backdoor method `name`, or skip the check as not applicable."""
        inner = engine.connector.inner
        method = getattr(inner, name, None)
        if method is None:
            pytest.skip(f"not applicable: {self.cls.__name__} has no {name}() backdoor")
        return method


def expect(condition: bool, evidence: str) -> None:
    """Fail the check with `evidence` (the first failing evidence goes into the report)."""
    if not condition:
        pytest.fail(evidence, pytrace=False)


def expect_full_hit(ctx: CheckContext, engine: EngineCore, request, what: str) -> None:
    """`request`'s prompt (less its last token) was stored in full: its hit is that length rounded down to
    the connector's chunk and to every Mamba state boundary (just > 0 when the chunk size is unknown)."""
    got = request.num_external_computed_tokens
    chunk = ctx.chunk_size(engine)
    if chunk is None:
        expect(got > 0, f"{what}: the stored prompt was never loaded")
        return
    want = (request.num_tokens - 1) // chunk * chunk
    for group in engine.kv_cache_config.kv_cache_groups:
        if isinstance(group.kv_cache_spec, MambaSpec):
            want = want // group.kv_cache_spec.block_size * group.kv_cache_spec.block_size
    expect(got == want, f"{what}: a {request.num_tokens}-token prompt stored in full hit {got} tokens, "
                        f"expected {want} (chunk {chunk})")


def expect_no_read_errors(engine: EngineCore, what: str) -> None:
    """The forward read only oracle-correct KV and states."""
    errors = engine.read_errors
    expect(not errors, f"{what}: the model read wrong KV ({len(errors)} reads), first: {errors[0] if errors else ''}")
