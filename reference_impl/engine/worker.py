"""A worker: one TP rank's KV memory, the deterministic "forward", and the worker-side connector hooks.

The forward reads what a real model would read (full attention: every earlier position; sliding window:
the last `window - 1` positions; chunked local attention: the earlier positions of the token's attention
chunk; Mamba: the state after the computed prefix) and records every value that differs from the content
oracle in `read_errors`: garbled output made visible. It then writes this step's
KV and states. Hooks run in vLLM 0.33's order: handle_preemptions, bind, start_load_kv (before the forward
for sync loads, after it otherwise), per attention layer wait_for_layer_load / save_kv_layer (never for
Mamba layers), wait_for_save, get_transfer_results, get_block_ids_with_load_errors, stats, events,
worker metadata, clear.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field

import torch

from reference_impl.connector.base import KVConnectorOutput, KVConnectorTransferResults
from reference_impl.engine import content
from reference_impl.engine.outputs import ModelRunnerOutput, SchedulerOutput
from reference_impl.kv_cache.kv_cache_interface import (AttentionSpec, ChunkedLocalAttentionSpec, KVCacheConfig,
                                                       MambaSpec, SlidingWindowSpec, cdiv)
from reference_impl.kv_cache.tensors import KVCacheTensors


@dataclass(frozen=True)
class ReadError:
    """One wrong value the forward read: request, layer, token position (-1: Mamba state) and why; `block`, the
    block it was read from (0: the null block), for checks that ask whose KV it is (left out of the text). The
    request's id is left out of the text too: drawn at random per request, it made one failure's evidence read
    differently on every run of the same input."""

    req_id: str = field(repr=False)
    layer: str
    position: int
    detail: str
    block: int = field(default=0, repr=False)


@dataclass
class _ReqState:
    token_ids: list[int]
    block_ids: tuple[list[int], ...]
    # The content oracle's per-token residues of token_ids[0:n] and, per layer, its KV rows of them (buffers with
    # room to grow; entries past n unset): the forward reads back a request's whole window or prefix every step, so
    # they are computed once per request, not once per step. token_ids only grow (a resumed request gets a new
    # state), so they never go stale.
    residues: tuple[torch.Tensor | None, int] = (None, 0)
    expected: dict[str, tuple[torch.Tensor, int]] = field(default_factory=dict)


def _grown(buffer: torch.Tensor | None, filled: int, more: torch.Tensor) -> torch.Tensor:
    """`buffer` (its first `filled` rows kept) with `more` appended at `filled`, reallocated at twice the size when
    it has no room."""
    end = filled + more.shape[0]
    if buffer is None or buffer.shape[0] < end:
        grown = more.new_empty((max(end, 2 * filled, 64), *more.shape[1:]))
        if filled:
            grown[:filled] = buffer[:filled]
        buffer = grown
    buffer[filled:end] = more
    return buffer


class Worker:
    """One TP rank. `connector` is this rank's worker-role connector or None; `before_forward` a list of
    `hook(worker, scheduler_output)` run each step between the connector's pre-forward hooks and the forward."""

    def __init__(self, kv_cache_config: KVCacheConfig, *, rank: int = 0, tp_size: int = 1, vocab_size: int = 32000,
                 connector=None, kernel_block_ratio: int = 1, content_salt: int = 0, before_forward=None):
        self.kv_cache_config = kv_cache_config
        self.content_salt = content_salt  # the model's: two models compute different KV for the same tokens
        self.rank = rank
        self.tp_size = tp_size
        self.vocab_size = vocab_size
        self.connector = connector
        # before_forward(worker, so): test instrumentation that runs after the connector's pre-forward hooks
        # (handle_preemptions, bind) and before this step's loads and forward (the engine's shared list).
        self.before_forward = before_forward if before_forward is not None else []
        # CPU memory: the content oracle and the forward's checks are CPU tensors.
        self.memory = KVCacheTensors(kv_cache_config, device="cpu")
        self.backing = self.memory.backing
        self.kv_caches = self.memory.kv_caches()
        self.layer_group: dict[str, int] = {}
        self.layer_index: dict[str, int] = {}
        for gid, group in enumerate(kv_cache_config.kv_cache_groups):
            for name in group.layer_names:
                self.layer_group[name] = gid
        # Model order: layer number in the name (model.layers.<n>.<kind>).
        self.layer_order = sorted(self.layer_group, key=lambda n: int(n.split(".")[2]))
        self.layer_index = {name: i for i, name in enumerate(self.layer_order)}
        self.requests: dict[str, _ReqState] = {}
        self.read_errors: list[ReadError] = []
        self.hook_log: list[str] = []
        if connector is not None:
            # The connector sees kernel blocks (B = num_blocks x ratio) when the backend splits blocks.
            connector.register_kv_caches(self.memory.kv_caches(kernel_block_ratio))

    # ---- oracle helpers -------------------------------------------------------------------------
    def heads(self, spec: AttentionSpec) -> range:
        """Global head indices held by this rank."""
        return range(self.rank * spec.num_kv_heads, (self.rank + 1) * spec.num_kv_heads)

    def expected_kv(self, layer: str, tokens, positions) -> torch.Tensor:
        """Oracle KV rows of `layer` for (token, position) pairs: [n, heads, 2*head_size]."""
        spec = self.kv_cache_config.layer_specs[layer]
        return content.attention_kv(tokens, positions, self.layer_index[layer], self.heads(spec),
                                    2 * spec.head_size, spec.dtype, self.content_salt)

    def _expected_rows(self, state: _ReqState, layer: str, end: int) -> torch.Tensor:
        """The oracle's KV rows of `layer` for the request's tokens 0..end-1 at their positions (`expected_kv`),
        kept with the request and extended as it grows."""
        rows, filled = state.expected.get(layer, (None, 0))
        if filled < end:
            residues, known = state.residues
            if known < end:
                more = content.token_residues(state.token_ids[known:end], range(known, end), self.content_salt)
                residues, known = _grown(residues, known, more), end
                state.residues = (residues, known)
            spec = self.kv_cache_config.layer_specs[layer]
            more = content.attention_rows(residues[filled:end], self.layer_index[layer], self.heads(spec),
                                          2 * spec.head_size, spec.dtype)
            state.expected[layer] = (_grown(rows, filled, more), end)
            rows = state.expected[layer][0]
        return rows[:end]

    def expected_state(self, layer: str, tokens) -> list[torch.Tensor]:
        """Oracle Mamba state of `layer` after `tokens`."""
        spec = self.kv_cache_config.layer_specs[layer]
        return content.mamba_state(tokens, self.layer_index[layer], spec.shapes, spec.dtypes, self.rank,
                                   self.content_salt)

    # ---- one step -------------------------------------------------------------------------------
    def _call(self, name: str, *args):
        self.hook_log.append(name)
        return getattr(self.connector, name)(*args)

    def execute_model(self, scheduler_output: SchedulerOutput) -> ModelRunnerOutput:
        """Run one step; returns sampled tokens and this rank's connector output."""
        self._update_states(scheduler_output)
        c = self.connector
        if c is not None:
            # The metadata crosses a process boundary in vLLM: every worker gets its own deserialised copy.
            meta = scheduler_output.kv_connector_metadata
            meta = pickle.loads(pickle.dumps(meta)) if meta is not None else None
            if hasattr(c, "handle_preemptions"):
                self._call("handle_preemptions", meta)
            self._call("bind_connector_metadata", meta)
        # vLLM may overwrite a re-allocated block from here on: `handle_preemptions` is where a connector
        # with stores in flight must finish with such blocks ("BEFORE they are overwritten", vLLM's base
        # connector), and the step's loads and forward write them next.
        for hook in self.before_forward:
            hook(self, scheduler_output)
        if c is not None and scheduler_output.has_sync_kv_loads:
            self._call("start_load_kv", None)
        sampled = self._forward(scheduler_output)
        if c is not None:
            if not scheduler_output.has_sync_kv_loads:
                self._call("start_load_kv", None)
            self._call("wait_for_save")
            output = self._connector_output(scheduler_output.finished_req_ids)
            self._call("clear_connector_metadata")
        else:
            output = None
        return ModelRunnerOutput(sampled_token_ids=sampled, kv_connector_output=output)

    def _connector_output(self, finished_req_ids: set[str]) -> KVConnectorOutput:
        c = self.connector
        if hasattr(c, "get_transfer_results"):
            results = self._call("get_transfer_results", set(finished_req_ids))
        else:
            sending, recving = self._call("get_finished", set(finished_req_ids))
            results = KVConnectorTransferResults(set(sending or ()), set(recving or ()))
        invalid = set(self._call("get_block_ids_with_load_errors") or ()) \
            if hasattr(c, "get_block_ids_with_load_errors") else set()
        stats = c.get_kv_connector_stats() if hasattr(c, "get_kv_connector_stats") else None
        events = c.get_kv_connector_kv_cache_events() if hasattr(c, "get_kv_connector_kv_cache_events") else None
        worker_meta = c.build_connector_worker_meta() if hasattr(c, "build_connector_worker_meta") else None
        return KVConnectorOutput(
            finished_sending=set(results.finished_sending or ()),
            finished_recving=set(results.finished_recving or ()),
            failed_recving=set(getattr(results, "failed_recving", None) or ()),
            invalid_block_ids=invalid, kv_connector_stats=stats, kv_cache_events=events,
            kv_connector_worker_meta=worker_meta,
        )

    def _update_states(self, so: SchedulerOutput) -> None:
        for req_id in so.finished_req_ids | so.preempted_req_ids:
            self.requests.pop(req_id, None)
        for new in so.scheduled_new_reqs:
            self.requests[new.req_id] = _ReqState(list(new.prompt_token_ids), tuple(list(g) for g in new.block_ids))
        cached = so.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            new_ids = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids:
                self.requests[req_id] = _ReqState(list(cached.all_token_ids[req_id]), tuple(list(g) for g in new_ids))
                continue
            state = self.requests[req_id]
            if new_ids is not None:
                for table, ids in zip(state.block_ids, new_ids):
                    table.extend(ids)

    def append_token(self, req_id: str, token: int) -> None:
        """Record a sampled token (the engine tells every worker, as vLLM's input batch does)."""
        state = self.requests.get(req_id)
        if state is not None:
            state.token_ids.append(token)

    def _forward(self, so: SchedulerOutput) -> dict[str, int]:
        if not so.num_scheduled_tokens:
            return {}
        starts = {new.req_id: new.num_computed_tokens for new in so.scheduled_new_reqs}
        cached = so.scheduled_cached_reqs
        starts.update(zip(cached.req_ids, cached.num_computed_tokens))
        specs = self.kv_cache_config.layer_specs
        for layer in self.layer_order:
            spec = specs[layer]
            attention = isinstance(spec, AttentionSpec)
            if attention and self.connector is not None:
                self._call("wait_for_layer_load", layer)
            for req_id, num in so.num_scheduled_tokens.items():
                state = self.requests[req_id]
                start = starts[req_id]
                table = state.block_ids[self.layer_group[layer]]
                if attention:
                    self._attention(req_id, layer, spec, table, state, start, num)
                else:
                    self._mamba(req_id, layer, spec, table, state.token_ids, start, num)
            if attention and self.connector is not None:
                self._call("save_kv_layer", layer, self.kv_caches[layer], None)
        sampled = {}
        for req_id, num in so.num_scheduled_tokens.items():
            state = self.requests[req_id]
            end = starts[req_id] + num
            if end >= len(state.token_ids):
                sampled[req_id] = content.next_token(state.token_ids[:end], self.vocab_size)
        return sampled

    def _attention(self, req_id, layer, spec, table, state: _ReqState, start, num) -> None:
        bs = spec.block_size
        view = self.kv_caches[layer]
        first = 0
        if isinstance(spec, SlidingWindowSpec):
            first = max(0, start - spec.sliding_window + 1)
        elif isinstance(spec, ChunkedLocalAttentionSpec):
            first = start // spec.attention_chunk_size * spec.attention_chunk_size  # the first token's own chunk
        elif not getattr(spec, "prefix_cacheable", True):
            first = start  # scratch: written, never read back
        expected = self._expected_rows(state, layer, start + num)
        if start > first:
            self._verify_range(req_id, layer, view, table, expected, first, start, bs)
        blocks = range(start // bs, cdiv(start + num, bs))
        for block_index in blocks:
            if table[block_index] == 0:
                raise RuntimeError(f"engine bug: {req_id} writes position block {block_index} of {layer} into the null block")
        lo, hi = start, start + num
        if len(blocks) > 2:  # the whole blocks between the first and last in one indexed copy
            middle = torch.tensor(table[blocks[1] : blocks[-1]])
            view.index_copy_(0, middle, expected[blocks[1] * bs : blocks[-1] * bs].reshape(len(middle), bs,
                                                                                            *expected.shape[1:]))
            blocks = (blocks[0], blocks[-1])
        for block_index in blocks:
            a = max(lo, block_index * bs)
            b = min(hi, (block_index + 1) * bs)
            view[table[block_index], a - block_index * bs : b - block_index * bs] = expected[a:b]

    def _verify_range(self, req_id, layer, view, table, expected, first, end, bs) -> None:
        """Compare the KV the forward reads for positions first..end-1 with the oracle's rows (`expected`, indexed by
        position); the first wrong block, or a null block, is a read error."""
        lo_block, hi_block = first // bs, cdiv(end, bs)
        ids = table[lo_block:hi_block]
        if len(ids) == hi_block - lo_block and 0 not in ids:  # every block there: one gather, one comparison
            got = view.index_select(0, torch.tensor(ids)).reshape(-1, *view.shape[2:])[first - lo_block * bs :
                                                                                          end - lo_block * bs]
            if torch.equal(got, expected[first:end]):
                return
        for block_index in range(lo_block, hi_block):  # which block is wrong, as the forward would meet it
            lo = max(first, block_index * bs)
            hi = min(end, (block_index + 1) * bs)
            block = table[block_index] if block_index < len(table) else 0
            if block == 0:
                self.read_errors.append(ReadError(req_id, layer, lo, "needed block is the null block"))
                return
            got = view[block, lo - block_index * bs : hi - block_index * bs]
            want = expected[lo:hi]
            if not torch.equal(got, want):
                bad = int((got != want).reshape(hi - lo, -1).any(dim=1).nonzero()[0])
                self.read_errors.append(ReadError(req_id, layer, lo + bad, f"KV differs from the oracle (block {block})",
                                                  block))
                return

    def _mamba(self, req_id, layer, spec: MambaSpec, table, tokens, start, num) -> None:
        views = self.kv_caches[layer]
        bs = spec.block_size
        if start > 0:
            block = table[cdiv(start, bs) - 1] if cdiv(start, bs) - 1 < len(table) else 0
            want = self.expected_state(layer, tokens[:start])
            if block == 0:
                self.read_errors.append(ReadError(req_id, layer, -1, f"state after {start} tokens is in the null block"))
            elif not all(torch.equal(v[block], w) for v, w in zip(views, want)):
                self.read_errors.append(ReadError(req_id, layer, -1, f"state after {start} tokens differs (block {block})",
                                                  block))
        end = start + num
        block = table[cdiv(end, bs) - 1]
        if block == 0:
            raise RuntimeError(f"engine bug: {req_id} writes the Mamba state of {layer} into the null block")
        for v, w in zip(views, self.expected_state(layer, tokens[:end])):
            v[block] = w
