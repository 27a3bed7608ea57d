"""`CheckContext`: builds mini engines around the connector under test and runs the shared scenarios.

Every connector instance is wrapped in a `ConnectorGuard` (`suites.connector.runner`), so a raising hook fails
the check with the hook's name, and the checks can observe (`calls`) and instrument (`around`) hooks.
"""

from __future__ import annotations

import copy
import math
import itertools
import random
import time
import uuid

import pytest

from harness import outcomes
from harness.failure_causes import cause_record
from harness.key_components import COMPONENTS, KeyComponents, KeyLeak, leaks_message
from harness.kv_engine import DEFAULT_KV_ENGINE, VLLM_ENGINE
from harness.targets.connector.profile import STORE_SCOPES, not_applicable
from harness.targets.connector.target import ConnectorLoadError, ConnectorTarget
from harness.targets.connector.vllm_layouts import only_built_layouts, release_of
from reference_impl.config.objects import KVTransferConfig
from reference_impl.connector.base import KVConnectorRole
from reference_impl.connector.store import drop_shared_store
from reference_impl.engine.core import MAX_STEPS, EngineConfig, EngineCore, ModelConfig, ParallelConfig
from reference_impl.engine.presets import get_preset
from reference_impl.connector.backdoors import BACKDOOR_METHODS
from reference_impl.kv_cache.kv_cache_interface import MambaSpec
from suites.connector.catalogue import needs_of, not_applicable_reason
from suites.connector.oracles import Exposure, fill_canaries
from suites.connector.runner import CheckFailed, expectation_site, guard_class
from suites.connector.watchdog import (NO_PROGRESS_STEPS, WAIT_SECONDS, NoProgress, ProgressWatchdog, verdict,
                                      waited_out)

_counter = itertools.count()
#: How a failure's evidence names the check's own store (its name is drawn per run: `CheckContext.store_name`).
STORE_SHOWN = "<store>"

# Pool sizes (blocks) per preset that hold one 700-token request but not two: running two forces a preemption.
PREEMPTING_POOL = {"fa_only": 60, "fa+swa": 80, "fa16+swa32": 80, "fa+mamba_align": 60, "fa+swa+mamba": 80,
                   "scratch_group": 120,
                   # The layouts a vLLM release builds in place of the Mamba presets (every block 256 tokens:
                   # harness.targets.connector.vllm_layouts), measured on kvconform's engine with no connector.
                   "fa+mamba_align@block256": 8, "fa+swa+mamba@block256": 10}


# A liveness bound counts steps and wall time: kvconform's steps take a millisecond where a real engine's take
# tens, and a connector whose transfers finish on a server's clock (LMCache's) must get a real engine's time.
LIVENESS_SECONDS = WAIT_SECONDS

def prompt(seed: int, length: int, vocab: int = 32000) -> list[int]:
    """A deterministic random prompt."""
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(length)]


class CheckContext:
    """One check's view of the connector under test on one preset.

    Every engine of one check shares one store (built-ins get a private one per check, so one check's
    leftovers never decide another's verdict); `exposure` records which KV the engines ever showed the
    connectors (the hit oracle's upper bound). `backdoors=False` hides the optional `kvconform_*` methods,
    so a run shows what the suite decides from observable behaviour alone.
    """

    def __init__(self, target: ConnectorTarget, preset: str | None, backdoors: bool = True,
                 check_id: str | None = None, kv_engine: str = DEFAULT_KV_ENGINE):
        self.target = target
        self.check_id = check_id
        # VLLM_ENGINE: vLLM's own Scheduler is the engine (suites.connector.vllm_engine)
        self.kv_engine = kv_engine
        self.preset = preset
        self.backdoors = backdoors
        self.load_error: str | None = None
        self.key_leaks: list[KeyLeak] = []  # what the check's failure says leaked across keys (its record keeps it)
        self.calls: list = []
        self.around: dict = {}
        self.state: dict = {"current": None}
        self.engines: list[EngineCore] = []
        self._races: dict[int, tuple] = {}  # id(engine) -> the hooks reuse_freed_blocks added to it
        self._pools: dict[tuple, int] = {}  # pool_for_one's measurements
        self.exposure = Exposure()
        self.store_name = f"kvconform-{uuid.uuid4().hex[:8]}-{next(_counter)}"
        #: Model names drawn per run (beside the store's name) -> how a failure's evidence names them.
        self.model_names_shown: dict[str, str] = {}
        try:
            self.cls = target.load()
        except ConnectorLoadError as exc:
            # Reported as the check's failure (in the call phase), not as a setup error.
            self.load_error, self.cls, self.is_hma = f"connector does not load: {exc}", None, False
            return
        self.is_hma = target.is_hma
        self.profile = target.profile
        self.release = target.release_table
        if preset is not None:
            # Only layouts the target builds: a vLLM release's own block-size decisions come first.
            only_built_layouts(preset, release_of(target, kv_engine))
        multi_group = preset is not None and len(get_preset(preset).groups) > 1
        groups = get_preset(preset).groups if preset is not None else ()
        scratch = any(group[0] == "scratch" for group in groups)
        # A Mamba group whose block is not the first (full-attention) group's: the presets' 'align' Mamba state
        # every 256 tokens beside attention blocks of 16.
        mamba_own_block = any(kind == "mamba" and size != groups[0][1] for kind, size, _ in groups)
        needs = needs_of(check_id, multi_group, scratch, mamba_own_block) if check_id else ()
        if "hma" in needs:
            self.require("hma")  # a release without SupportsHMA runs no connector on several groups
        if multi_group and not self.is_hma:
            outcomes.not_applicable("declaration", f"{self.cls.__name__} does not declare SupportsHMA, so vLLM "
                                                   "refuses it", preset=preset, connector_class=self.cls.__name__)
        refusal = not_applicable_reason(check_id, self.profile, multi_group) if check_id else None
        if refusal is not None:
            raise refusal
        for capability in needs:
            self.require(capability)  # "N/A on X.Y.Z: ..." where the release lacks the API the check needs

    def require(self, capability: str) -> None:
        """End the check as "N/A on X.Y.Z: what the release lacks" unless the connector API the target is driven
        through has `capability` (a row of `harness.targets.connector.capabilities.CAPABILITIES`; kvconform's
        protocol, which reference and vendor connectors implement, has every one)."""
        self.release.require(capability)

    @property
    def judges_content(self) -> bool:
        """Whether loaded KV is compared with the content oracle: only for connectors that store KV (a
        dummy-KV or transfer-only connector's loads are not what any engine computed, by design)."""
        return self.profile.stores_kv

    # ---- construction -----------------------------------------------------------------------------
    def extra_config(self, **builtin_options) -> dict:
        """The target's extra config; built-ins also get a private store and `builtin_options`."""
        extra = copy.deepcopy(self.target.extra_config)
        if builtin_options.get("load_async") and not self.target.builtin:
            # A vendor connector loads asynchronously where its declared profile says how.
            extra.update(copy.deepcopy(self.profile.async_load_config))
        if self.target.builtin:
            store = self.store_name
            extra.update(store_name=store, **builtin_options)
            for index, child in enumerate(extra.get("connectors") or ()):
                child["kv_connector_extra_config"] = dict(child.get("kv_connector_extra_config") or {},
                                                          store_name=f"{store}-child{index}", **builtin_options)
        return extra

    ENGINE_OWNED_STORE = ("the connector's store is owned by its engine (profile store_scope 'engine': "
                          "{store}), so ")

    def not_applicable_on_engine_owned_store(self, why: str) -> None:
        """End the check as N/A when the store is the engine's own and the check needs a second engine (or
        process) on the same store: `why` says what that second reader is for."""
        if self.profile.engine_owned_store:
            not_applicable(self.ENGINE_OWNED_STORE.format(store=STORE_SCOPES["engine"]) + why)

    def engine(self, preset: str | None = None, *, num_blocks: int = 400, tp: int = 1, extra: dict | None = None,
               max_num_batched_tokens: int = 2048, kernel_block_ratio: int = 1, worker_model: str | None = None,
               model: str | None = None, speculative_config=None, async_scheduling: bool = False,
               **builtin_options) -> EngineCore:
        """A fresh engine (on the check's store) whose connectors are guarded instances of the target class.

        `builtin_options` go into the extra config of built-in connectors only (a vendor's keeps its own);
        `worker_model` gives the workers another model name (fault injection: their loads miss); `model`
        replaces the check's model name (several presets, or several models, on one store);
        `speculative_config` (`reference_impl.engine.core.SpeculativeConfig`) runs EAGLE / MTP;
        `async_scheduling` schedules each step before the previous one's output is applied (two in flight).
        """
        ktc = KVTransferConfig(kv_connector=self.cls.__name__, kv_role="kv_both",
                               kv_connector_module_path=self.cls.__module__,
                               kv_connector_extra_config=extra if extra is not None else self.extra_config(**builtin_options))
        preset = preset or self.preset
        # One model name per check and model (and kernel layout): a vendor's store outlives the check, and
        # objects of one check or preset must not be offered to another.
        model = model or f"kvconform/{preset}/{self.store_name}" + (
            f"@kernel{kernel_block_ratio}" if kernel_block_ratio > 1 else "")
        config = EngineConfig(model_config=ModelConfig(model), kv_transfer_config=ktc, num_blocks=num_blocks,
                              parallel_config=ParallelConfig(tensor_parallel_size=tp),
                              max_num_batched_tokens=max_num_batched_tokens, kernel_block_ratio=kernel_block_ratio,
                              worker_model=f"{model}@{worker_model}" if worker_model else None,
                              speculative_config=speculative_config, async_scheduling=async_scheduling)
        engine = self.engine_class(preset, config, connector_factory=self.factory)
        engine.content_judged = self.judges_content  # read by expect_no_read_errors
        engine.observers.append(self.exposure.observer(engine))
        # A livelock fails the check in seconds, naming the hook waited on (suites.connector.watchdog).
        engine.after_step.append(ProgressWatchdog(engine, connector=self.cls.__name__, target=self.target.name,
                                                  check=self.check_id, calls=self.calls, state=self.state))
        self.engines.append(engine)
        return engine

    @property
    def engine_class(self) -> type:
        """The engine the checks drive: kvconform's `EngineCore`, or with `--kv-engine vllm` vLLM's Scheduler
        behind the same surface (`suites.connector.vllm_engine.VllmSchedulerEngine`)."""
        if self.kv_engine == VLLM_ENGINE:
            from suites.connector.vllm_engine import VllmSchedulerEngine

            return VllmSchedulerEngine
        return EngineCore

    def factory(self, vllm_config, role, kv_cache_config):
        """Build and guard one connector instance."""
        # A constructor that blocks (a backend that never answers) is named when the check runs out of time.
        self.state["current"] = f"{self.cls.__name__}.__init__ ({role.name.lower()})"
        try:
            inner = self.cls(vllm_config, role, kv_cache_config)
        finally:
            self.state["current"] = None
        return guard_class(self.cls)(inner, role, self.calls, self.around, self.state, backdoors=self.backdoors)

    def close(self) -> None:
        """Abandon the check's engines: abort what is still in flight (so the connectors release what those
        requests hold in a store that outlives the check), shut the connectors down, and forget a built-in's
        private store. After a check that ran out of time its thread may still be inside a hook of those engines
        (a hook that blocks for ever): they are left alone, as a call from here could block the session too."""
        for engine in self.engines if self.state.get("abandoned") is None else ():
            for req_id in [r.request_id for r in engine.scheduler.requests.values() if not r.is_finished]:
                try:
                    engine.abort_request(req_id)
                except Exception:  # a verdict was already given; cleanup must not add another
                    pass
            for connector in [engine.connector] + [w.connector for w in engine.workers]:
                shutdown = getattr(getattr(connector, "inner", None), "shutdown", None)
                if shutdown is not None:
                    try:
                        shutdown()
                    except Exception:  # a verdict was already given; cleanup must not add another
                        pass
        self.engines.clear()
        if self.target.builtin:
            drop_shared_store(self.store_name)
            for index in range(len(self.target.extra_config.get("connectors") or ())):
                drop_shared_store(f"{self.store_name}-child{index}")

    def key_components(self, engine: EngineCore, request=None, *, rank: int | None = None, group: int | None = None,
                       cache_salt: str | None = None, lora_request=None) -> KeyComponents:
        """What an object `engine` stores (or a lookup it asks) is keyed by: the engine's model name, KV dtype and
        TP size, `rank` and `group` (None: every one), and the cache salt and LoRA adapter of `request`, or the
        ones given (what a check stored a prompt with). The model name shows this check's store as `STORE_SHOWN`:
        the store's name is drawn afresh for every run (`store_name`), and a failure's evidence must read the same
        on the same input; two model names still differ where the engines' do (what follows the store's name). A
        model name the check drew for this run shows as the name it registered in `model_names_shown`."""
        if request is not None:
            cache_salt, lora_request = request.cache_salt, request.lora_request
        dtypes = sorted({str(g.kv_cache_spec.dtype) for g in engine.kv_cache_config.kv_cache_groups
                         if hasattr(g.kv_cache_spec, "dtype")})
        model = engine.config.model_config.model
        model = self.model_names_shown.get(model, model).replace(self.store_name, STORE_SHOWN)
        return KeyComponents(model=model, dtype="/".join(dtypes),
                             tp_size=engine.config.parallel_config.tensor_parallel_size, tp_rank=rank,
                             cache_salt=cache_salt, lora=getattr(lora_request, "lora_name", None), group=group)

    def fail_key_leaks(self, leaks: list[KeyLeak]) -> None:
        """Fail the check with the message of `leaks` (the root cause, what was stored and what was asked,
        `harness.key_components.leaks_message`); the check's record keeps them (`harness.report.vllm_findings`
        classifies by their components)."""
        self.key_leaks = list(leaks)
        components = [c for c in COMPONENTS if any(c in leak.components for leak in leaks)]
        raise CheckFailed(leaks_message(leaks), cause_record("key-leak", components=components))

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
        if not engine.manager.reset_prefix_cache():
            left = leftovers(engine)  # vLLM's scheduler does not wait for delayed frees: name them here
            expect(False, "prefix cache reset refused: a request still holds blocks"
                   + (f" ({'; '.join(left)})" if left else ""))

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

    def optional_backdoor(self, instance, name: str):
        """The backdoor `name` for `instance` (a guarded connector), or None when absent or hidden: the target's
        declaration implements it, or the connector itself does (`harness.ConnectorUnderTest.backdoor`). `name` is
        one the backdoor Protocol declares (`reference_impl.connector.backdoors`)."""
        if name not in BACKDOOR_METHODS:
            raise ValueError(f"{name} is not a backdoor of reference_impl.connector.backdoors.KVConformBackdoors")
        if not self.backdoors:
            return None
        inner = getattr(instance, "inner", instance)
        method = self.target.backdoor(name, inner)  # the declaration's, else the connector's own kvconform_* method
        if method is None and name == "kvconform_chunk_size" and hasattr(inner, "connectors"):
            method = getattr(inner.connectors[0], name, None)  # children share one chunking
        return method

    def backdoor(self, engine: EngineCore, name: str):
        """The connector's backdoor method `name`, or skip the (SHOULD) check as not applicable."""
        method = self.optional_backdoor(engine.connector, name)
        if method is None:
            why = "backdoors are off" if not self.backdoors else f"{self.cls.__name__} has no {name}() backdoor"
            outcomes.not_applicable("feature", why)
        return method

    def lookup(self, engine: EngineCore, tokens, **kwargs) -> int:
        """The connector's hit for a new request of `tokens` (nothing local counted); the request is then
        added and aborted, so the connector sees the finish of every request it was asked about."""
        request = engine.make_request(list(tokens), **kwargs)
        # vLLM's order: the request is added (on_new_request) before any lookup, which runs in schedule().
        engine.add_request(request)
        n, _ = self.ask(engine, request)
        engine.abort_request(request.request_id)
        return int(n or 0)

    ASK_TIMEOUT_S = 10.0
    ASK_INTERVAL_S = 0.01

    def ask(self, engine: EngineCore, request) -> tuple:
        """The connector's (hit, load_async) for an added, waiting request, asked as vLLM's scheduler asks: an
        answer of None ("not known yet", e.g. LMCache's lookup in its server) is asked again, as the scheduler
        asks again next step, until a number comes. Still None after NO_PROGRESS_STEPS asks and ASK_TIMEOUT_S, the
        lookup never answers (vLLM would ask for ever): the check fails naming the hook (`NoProgress`; judged
        without the wait once two checks of this connector waited it out, `suites.connector.watchdog`)."""
        n, load_async = engine.connector.get_num_new_matched_tokens(request, 0)
        asks, started = 1, time.monotonic()
        while n is None:
            if asks >= NO_PROGRESS_STEPS:
                patience = max(self.ASK_TIMEOUT_S, 2 * self.state.get("wait_s", WAIT_SECONDS))
                note = waited_out(self.target.name, "lookup-none", "get_num_new_matched_tokens", self.check_id or "?",
                                  time.monotonic() - started, patience)
                if note is not None:
                    raise NoProgress(verdict(
                        asks, time.monotonic() - started,
                        f"request {request.request_id} is never admitted: {self.cls.__name__}.get_num_new_matched_tokens "
                        f"answered None (not ready yet) {asks} times in a row\nasked by the check itself, as vLLM's "
                        "scheduler asks once a step", note), "get_num_new_matched_tokens", "lookup-none")
            time.sleep(self.ASK_INTERVAL_S)
            n, load_async = engine.connector.get_num_new_matched_tokens(request, 0)
            asks += 1
        return n, load_async

    def chunk_size(self, engine: EngineCore, tokens=None) -> int | None:
        """The connector's hit granularity: the `kvconform_chunk_size` backdoor, else probed black-box as the
        smallest hit among growing prefixes of the stored `tokens` (None when nothing hits)."""
        probe = self.optional_backdoor(engine.connector, "kvconform_chunk_size")
        if probe is not None:
            return probe()
        if tokens is None:
            return None
        hits = {self.lookup(engine, tokens[:n]) for n in range(17, len(tokens) + 1, 16)}
        hits.discard(0)
        return min(hits) if hits else None


    def drain(self, engine: EngineCore, what: str, max_steps: int = 400, idle_steps: int = 4) -> None:
        """Run the engine until it is empty; fail naming what is left (a delayed free never reported as
        finished_sending keeps blocks of every group allocated) and check every group's blocks came back."""
        try:
            engine.run_until_done(max_steps=max_steps, idle_steps=idle_steps, min_seconds=LIVENESS_SECONDS)
        except RuntimeError:
            pass
        left = leftovers(engine)
        expect(not left, f"the engine does not drain after {max_steps} steps and {LIVENESS_SECONDS:g} s{scenario(what)}: "
                         f"{'; '.join(left)}")
        expect_each_completion_once(engine)
        expect(engine.manager.reset_prefix_cache(),
               f"blocks are still allocated after every request finished (never released){scenario(what)}")

    def pool_for_one(self, preset: str, length: int, max_num_batched_tokens: int = 2048,
                     async_scheduling: bool = False) -> int:
        """num_blocks (null block included) that hold one `length`-token request and nothing more, measured
        on a connector-less engine of the check's kind (with `async_scheduling`, two steps in flight: a sliding
        window is pruned a step later): a second request then gets exactly the blocks the first one freed. Measured
        once per check and arguments."""
        key = (preset, length, max_num_batched_tokens, async_scheduling)
        if key not in self._pools:
            self._pools[key] = self._measure_pool_for_one(*key)
        return self._pools[key]

    def _measure_pool_for_one(self, preset: str, length: int, max_num_batched_tokens: int,
                              async_scheduling: bool) -> int:
        probe = self.engine_class(preset, EngineConfig(num_blocks=4000, max_num_batched_tokens=max_num_batched_tokens,
                                                       async_scheduling=async_scheduling))
        peak = [0]

        def observe(so):
            for req_id in so.num_scheduled_tokens:
                ids = probe.manager.get_block_ids(req_id)
                peak[0] = max(peak[0], len({b for group in ids for b in group if b}))

        probe.observers.append(observe)
        self.run(probe, prompt(987654, length), max_tokens=1)
        return peak[0] + 1

    def forced_finish_reuse(self, length: int = 512, preset: str | None = None) -> tuple[EngineCore, list]:
        """Request A finishes; in the very next step B (waiting for lack of blocks) gets every block A freed
        and its forward writes them; only then does anything A's connector left pending run. Returns the
        engine and A's prompt (stored or not, never with B's bytes). The default length ends on a
        256-token (and Mamba) boundary: the last chunk completes in A's final step, window tail still allocated.
        Reload with `reload_prompt`: on an engine-owned store the reader is this engine, whose pool holds
        `length` computed tokens and not one more."""
        preset = preset or self.preset
        engine = self.engine(preset, num_blocks=self.pool_for_one(preset, length))
        first = prompt(9100 + length, length)
        a = engine.add_request(engine.make_request(first, max_tokens=1))
        for _ in range(MAX_STEPS):
            if a.is_finished:
                break
            engine.step()
        expect(a.is_finished, f"scenario: the first request did not finish within {MAX_STEPS} steps")
        # The pool holds one request: B's allocation takes the blocks A just freed (or waits for a
        # delayed free), and B's forward writes them before this step's wait_for_save.
        engine.add_request(engine.make_request(prompt(9200 + length, length), max_tokens=1))
        return engine, first

    def reload_prompt(self, first: list) -> list:
        """The prompt that reloads `forced_finish_reuse`'s A: A itself on a fresh reader (a store shared by
        engines); on an engine-owned store, whose reader is A's own engine with a pool that holds A's tokens and
        not one more, A less its last two tokens (with the token `expect_reload_correct` appends and the first
        generated one, as many tokens as A computed): the hit then ends one hit unit earlier."""
        return list(first[:-2]) if self.profile.engine_owned_store else list(first)

    def reuse_freed_blocks(self, engine: EngineCore) -> None:
        """Force reuse races on `engine`: every block that left a place in a request's table (out of the sliding
        window, a finished request's, a preempted one's) and that a schedule re-allocates is overwritten, whole,
        as soon as vLLM may overwrite it: on each rank after the connector's `handle_preemptions` and
        `bind_connector_metadata` and before the step's loads and forward (vLLM's base connector: stores in
        flight are handled there "BEFORE they are overwritten"). A block that is freed and not re-allocated
        keeps its bytes, as in vLLM (nothing writes a free block), and so does one that comes back as a prefix
        hit (its hash unchanged). Whatever a connector copies from a re-allocated block after that point is
        not the old KV."""
        before: dict[int, set] = {}  # block -> its places (request, group, index) when the workers last ran
        hashes: dict[int, object] = {}  # block -> its hash then, for every block ever placed in a table
        targets: set[int] = set()

        def places() -> dict[int, set]:
            held: dict[int, set] = {}
            for req_id in engine.scheduler.requests:
                if engine.manager.coordinator.has_request(req_id):
                    for group, ids in enumerate(engine.manager.get_block_ids(req_id)):
                        for index, block in enumerate(ids):
                            if block:
                                held.setdefault(block, set()).add((req_id, group, index))
            return held

        def record(so) -> None:
            before.clear()
            before.update(places())
            blocks = engine.manager.block_pool.blocks
            hashes.update((b, blocks[b].block_hash) for b in before)

        def find(so) -> None:
            # Re-allocated: placed somewhere new since the workers last ran, once held by a request, and not a
            # prefix-cache hit on its old content (a re-allocation drops the old hash).
            blocks = engine.manager.block_pool.blocks
            targets.clear()
            targets.update(b for b, now in places().items() if now - before.get(b, set()) and b in hashes
                           and (hashes[b] is None or blocks[b].block_hash != hashes[b]))

        def scribble(worker, so) -> None:
            if targets:
                fill_canaries(engine, targets, worker)

        engine.observers.append(record)
        engine.pre_execute.append(find)
        engine.before_forward.append(scribble)
        self._races[id(engine)] = (record, find, scribble)

    def stop_reuse_races(self, engine: EngineCore) -> None:
        """Stop `reuse_freed_blocks` on `engine`: what follows judges what was stored, as a fresh engine would."""
        hooks = self._races.pop(id(engine), None)
        if hooks is not None:
            record, find, scribble = hooks
            engine.observers.remove(record)
            engine.pre_execute.remove(find)
            engine.before_forward.remove(scribble)

    def reader(self, stored_on: EngineCore | None = None, preset: str | None = None) -> EngineCore:
        """An engine that reads back what the check stored, its local prefix cache forgotten: a fresh engine (of
        `preset`) on a store shared by engines; on a store owned by the engine (profile `store_scope` "engine",
        where a fresh engine starts empty by design) the engine that stored, `stored_on` or else the check's
        latest engine of that preset, whose requests must have finished."""
        if not self.profile.engine_owned_store:
            return self.engine(preset)
        engine = stored_on
        if engine is None:
            want = preset or self.preset
            engine = next((e for e in reversed(self.engines) if e.preset.name == want), None)
            if engine is None:
                raise ValueError(f"CheckContext.reader: no engine of preset {want!r} stored anything in this check")
        engine.run_until_done()  # delayed frees reported, so the prefix cache can be emptied
        self.stop_reuse_races(engine)  # the race was the store's scenario; the reload reads as a fresh engine
        self.forget_local_cache(engine)
        return engine

    def expect_reload_correct(self, tokens_list, what: str, preset: str | None = None,
                              stored_on: EngineCore | None = None) -> EngineCore:
        """On a reader of the check's store (`reader`: a fresh engine, or the storing engine where the store is
        the engine's own), memory wiped before each prompt, every prompt of `tokens_list` reads oracle KV."""
        reader = self.reader(stored_on, preset)
        if not self.judges_content:
            return reader
        since = read_marks(reader)  # a re-used engine: only the reloads' reads are judged here
        for tokens in tokens_list:
            self.wipe(reader)
            self.run(reader, list(tokens) + [11])
        expect_no_read_errors(reader, what, since=since)
        return reader


# Capacity probes: prompts of this length are stored until the store must evict (built-ins get a small
# store for it; a vendor's store decides only if it fills within the probe, see docs/vendor.md).
CAPACITY_PROMPTS, CAPACITY_PROMPT_LENGTH = 10, 1100
SMALL_STORE_BYTES = 400_000


def expect_store_makes_room(ctx: CheckContext, engine: EngineCore, what: str, seed: int) -> int:
    """Store prompt after prompt, each looked up twice by requests that are then aborted (never admitted):
    every prompt just stored must hit. A connector whose pins or per-request state leak ends up with a full
    store it can no longer evict from. Returns the number of prompts stored (0: not judged, the connector
    stores no KV)."""
    if not ctx.judges_content:
        return 0
    for i in range(CAPACITY_PROMPTS):
        tokens = prompt(seed + i, CAPACITY_PROMPT_LENGTH)
        ctx.run(engine, tokens)
        for extra in (1, 2):
            ctx.lookup(engine, tokens + [extra])
        expect(ctx.lookup(engine, tokens + [3]) > 0,
               f"a prompt no longer hits right after it was stored: the full store cannot make room (objects of "
               f"finished or aborted lookups stay pinned, or per-request state leaks){scenario(what)}: prompt "
               f"{i + 1} of {CAPACITY_PROMPTS} ({CAPACITY_PROMPT_LENGTH} tokens each)", cause="evicted-at-once")
    return CAPACITY_PROMPTS


def leftovers(engine: EngineCore) -> list[str]:
    """What keeps the engine from being empty: requests, unreported delayed frees, half-reported ids."""
    s = engine.scheduler
    left = []
    if s.waiting or s.running:
        left.append(f"{len(s.waiting)} waiting / {len(s.running)} running requests")
    if s.delayed_free:
        left.append(f"delayed frees never reported finished (finished_sending, or finished_recving of a load in "
                    f"flight when its request was aborted): {sorted(s.delayed_free)}")
    if engine.aggregator.pending:
        left.append(f"ids reported by only some workers: {engine.aggregator.pending}")
    return left


def expect_each_completion_once(engine: EngineCore) -> None:
    """Every asynchronous load and every delayed free the engine started was reported finished exactly once (a
    second report is already an engine error, `ConnectorReportError`; this catches the ones never reported)."""
    counts = engine.scheduler.transfers
    for req_id in sorted({req_id for _kind, req_id in counts}):
        for what, noun in (("recv", "asynchronous load"), ("send", "delayed free")):
            started, finished = counts[(f"{what}_started", req_id)], counts[(f"{what}_finished", req_id)]
            expect(started == finished, f"{req_id}: {started} {noun}(s) started, {finished} reported finished")


SCENARIO_MARK = " — while: "  # harness.failure_groups leaves the scenario out of the root-cause key


def scenario(what: str) -> str:
    """The scenario part of a shared oracle's evidence: '<symptom> — while: <scenario>: <details>', so that one
    cause found by several checks (each in its own scenario) groups as one root cause."""
    return f"{SCENARIO_MARK}{what}" if what else ""


def local_chunk_of(preset: str) -> int:
    """The attention chunk of `preset`'s chunked-local group (1 without one). An external hit that starts inside an
    attention chunk has suffix-relative chunk boundaries that are not the absolute ones, and a connector may decline
    it (offer 0) rather than load it: vLLM 0.34.0's SimpleCPUOffloadConnector does, by design
    (`v1/simple_kv_offload/manager.py` l. 405-412: 'Suffix-relative chunk boundaries must match absolute token
    positions'); the engine then recomputes from its local hit. A non-zero offer must still be the whole rest."""
    chunks = [window for kind, _, window in get_preset(preset).groups if kind == "chunked"]
    return math.lcm(*chunks) if chunks else 1


def expect(condition: bool, evidence: str, cause: str | None = None) -> None:
    """Fail the check with `evidence` (the first failing evidence goes into the report); its record's key is the
    tag `cause` (`harness.failure_causes.CAUSES`), or, when none is named, the function that called `expect`."""
    if not condition:
        key = cause_record(cause) if cause else cause_record("expectation", site=expectation_site())
        raise CheckFailed(evidence, key)


def expect_full_hit(ctx: CheckContext, engine: EngineCore, request, what: str) -> None:
    """`request`'s prompt (less its last token) was stored in full: its hit is that length rounded down to
    the connector's chunk and to every Mamba state boundary (just > 0 when the chunk size is unknown)."""
    got = request.num_external_computed_tokens
    expect(got > 0, f"the stored prompt was never loaded{scenario(what)}", cause="never-loaded")
    if not ctx.judges_content:
        return  # a connector that stores no KV claims hits regardless of what was stored
    chunk = ctx.chunk_size(engine, request.prompt_token_ids)
    if chunk is None:
        return
    # The prompt, not the tokens the request generated since (num_tokens): the lookup happened at admission.
    want = (len(request.prompt_token_ids) - 1) // chunk * chunk
    for group in engine.kv_cache_config.kv_cache_groups:
        if isinstance(group.kv_cache_spec, MambaSpec):
            want = want // group.kv_cache_spec.block_size * group.kv_cache_spec.block_size
    expect(got == want, f"a prompt stored in full hit less or more than its chunk-aligned length{scenario(what)}: a "
                        f"{len(request.prompt_token_ids)}-token prompt hit {got} tokens, expected {want} (chunk {chunk})")


def read_marks(engine: EngineCore) -> tuple[int, ...]:
    """How many wrong reads each worker of `engine` has recorded so far (for `expect_no_read_errors(since=)`)."""
    return tuple(len(w.read_errors) for w in engine.workers)


def expect_no_read_errors(engine: EngineCore, what: str, since: tuple[int, ...] | None = None) -> None:
    """The forward read only oracle-correct KV and states (only the reads after `since`, from `read_marks`)."""
    if not getattr(engine, "content_judged", True):
        return  # a connector that stores no KV: what it loads is not what the model computed, by design
    if since is None:
        errors = engine.read_errors
    else:
        errors = [e for w, mark in zip(engine.workers, since) for e in w.read_errors[mark:]]
    expect(not errors, f"the model read wrong KV{scenario(what)}: {len(errors)} reads, first: {errors[0] if errors else ''}",
           cause="wrong-kv")
