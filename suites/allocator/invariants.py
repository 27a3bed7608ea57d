"""Invariants every correct KV cache allocator and its connector path satisfy, on any release, and the seeded
random workload that judges them.

An era table says what a release does; an invariant says what it should do. Each invariant has an id
(`INV-KV-NN`), one sentence, and a check run after every step of `run_workload`: seeded random traffic (prefix
sharing, several tenants, chunked prefill, decode, preemption, connector loads synchronous and asynchronous,
evictions, prefix-cache resets) over real KV cache layouts (`LAYOUTS`: full attention, + sliding window, + Mamba,
several attention groups, EAGLE, speculative decoding with EAGLE / MTP drafts). Every check reads only what any release exposes (block ids, ref counts, the
free queue, the prefix-cache map's block ids, hit lengths); none reads a hash's format. What each block holds is
tracked by a shadow map independent of the allocator (the tenant and the token prefix its KV covers, or the
Mamba state it keeps), so "a hit reads what it claims" is judged by content, whatever the release's keys look
like.

Steps follow vLLM's scheduler: attention KV a step computes is visible to other requests in the same step (the
KV of the whole batch is written before any attention reads it), a Mamba state only after the step (it is the
output of the forward pass), a block an asynchronous connector load fills only once the load has finished.
Speculative decoding follows it too (`Layout.spec_tokens`): a decode step schedules the last sampled token and
its draft tokens (`Request.spec_token_ids`) with `num_lookahead_tokens` slots for the drafter (EAGLE and MTP
reserve as many as they draft), the step's KV covers the drafts, and the verifier then accepts a seeded number of
them: the rejected ones are rolled back (`num_computed_tokens` drops by as many) and their KV is garbage the next
step overwrites.

`run_workload` returns the first violation of each invariant (`Verdict`); the tests in
`test_invariants.py` assert that none occurred, and `tests/test_allocator_invariant_mutants.py` shows
each invariant trip on a deliberately broken reference. A release that violates one is a reviewed defect
(`harness/release/vllm_allocator_defects.toml`), expected as a strict xfail on that release.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import allocate, new_step, queue_ids
from suites.benchmarks.workloads import mamba_aligned_chunk

__all__ = ["Invariant", "INVARIANTS", "Layout", "LAYOUTS", "Verdict", "run_workload"]


@dataclass(frozen=True)
class Invariant:
    """One property every correct allocator satisfies: an id, the sentence, the spec section it comes from."""

    id: str
    sentence: str
    section: str


INVARIANTS: dict[str, Invariant] = {i.id: i for i in (
    Invariant("INV-KV-01", "Block accounting is conserved: the free counter equals the free queue's length, no block "
              "is queued twice, and free blocks plus referenced blocks are every usable block.", "2.3, 2.8"),
    Invariant("INV-KV-02", "The free queue never holds a referenced block: a usable block is in the free queue exactly "
              "when its ref count is 0.", "2.8"),
    Invariant("INV-KV-03", "No block is owned twice: a block appears once in a request's tables (all groups together), "
              "one group only ever holds it, two live requests share it only at the same position of the same "
              "group as a cached block of the same tenant and tokens, and its ref count is the number of tables "
              "holding it.", "2.8"),
    Invariant("INV-KV-04", "The null block is never handed out: block 0 never leaves the pool as a new block, never "
              "enters the free queue or the prefix cache, and is never written.", "2.2, 2.8"),
    Invariant("INV-KV-05", "No hit past the prompt: a prefix hit never covers the prompt's last token (at most "
              "num_prompt_tokens - 1 tokens).", "2.8, 8"),
    Invariant("INV-KV-06", "A hit reads what it claims: every block of a prefix hit holds KV (or, for Mamba, the state) "
              "computed from exactly the hit's tokens, written before the hit is served.", "2.8, 4.5"),
    Invariant("INV-KV-07", "A reused block's key is dropped before reuse: a block the pool hands out as new is "
              "referenced once, has no key and is in no prefix-cache entry.", "2.6, 2.7"),
    Invariant("INV-KV-08", "Tenants are isolated: a request never hits a block written for another cache salt or "
              "another LoRA adapter, whatever the tokens and whatever the hash format.", "2.4"),
    Invariant("INV-KV-09", "A hybrid hit is a prefix valid for every group: each group's hit list has the hit's "
              "positions, with a block (not the null block) wherever that group reads (full attention: every "
              "position; sliding window: the window before the hit; chunked local: the current chunk; Mamba: the "
              "last position).", "5.3"),
    Invariant("INV-KV-10", "A step writes only blocks its request holds alone: every block a scheduled chunk computes "
              "into, and the block a Mamba state is written to, has ref count 1.", "2.8, 6.3"),
    Invariant("INV-KV-11", "A connector loads only into blocks its request holds alone: the blocks covering externally "
              "computed tokens are the request's only, and a block an asynchronous load still fills is neither in "
              "the prefix cache nor served as a hit.", "6.3; connector.md"),
    Invariant("INV-KV-12", "Eviction never frees a block in use: evict_blocks and reset_prefix_cache leave every live "
              "request's blocks and ref counts as they were.", "2.7"),
    Invariant("INV-KV-13", "Tables never shift: while a request lives, each group's table only grows, and an entry "
              "only ever changes to the null block.", "2.8"),
    Invariant("INV-KV-14", "Valid calls never raise: lookups, allocations, frees, evictions and resets answer every "
              "valid call; a step the pool cannot hold returns None.", "6.3"),
    Invariant("INV-KV-15", "A step reads only its request's KV: every position an attention group reads for the "
              "step's first token (full attention: all before it; sliding window: the window; chunked local: its "
              "chunk) maps to a block, not the null block, holding KV of the request's own verified tokens, also "
              "after rejected draft tokens rolled the request back.", "2.8, 5.3"),
    Invariant("INV-KV-16", "Lookahead slots are allocated: after a successful allocate_slots with "
              "num_lookahead_tokens L, every attention group holds a block (not the null block) at every position "
              "from the step's first token to num_computed + num_new_tokens + L (capped at max_model_len), where "
              "the drafter writes its KV.", "6.3"),
    Invariant("INV-KV-17", "Only verified tokens are cached: a block in the prefix cache never holds KV of a draft "
              "token the verifier rejected (blocks are keyed only once every token they cover is accepted).", "2.5, 6.3"),
)}

#: The token a draft the verifier will reject carries (no prompt or verified output token has it), and the one
#: every sampled or accepted token carries: KV computed from a rejected draft differs from the verified KV.
REJECTED_DRAFT = 99_999_999
SAMPLED = 7

# --------------------------------------------------------------------------------------------- layouts
_FULL = GroupDesc("full", 4)
_SWA8 = GroupDesc("sliding_window", 4, sliding_window=8)


@dataclass(frozen=True)
class Layout:
    """A KV cache layout the workload runs on, and what the engine does around it."""

    groups: tuple[GroupDesc, ...]
    use_eagle: bool = False
    #: The token budget of a step (`max_in_flight_tokens`), passed where the release takes one.
    token_budget: int | None = None
    #: KV cache events on (the release's event path runs on every cached block).
    kv_events: bool = False
    #: Connector loads (external computed tokens) in the traffic: not on Mamba layouts, whose external state
    #: follows connector-specific rules this workload does not model.
    external_loads: bool = True
    #: Speculative decoding: draft tokens per decode step (EAGLE and MTP, `use_eagle`: the drafter also gets as
    #: many lookahead slots, vLLM's `num_lookahead_tokens`); 0 without.
    spec_tokens: int = 0

    @property
    def lookahead_tokens(self) -> int:
        """`num_lookahead_tokens` every allocation passes: EAGLE-style drafters reserve one slot per draft."""
        return self.spec_tokens if self.use_eagle else 0


_SWA16 = GroupDesc("sliding_window", 4, sliding_window=16)

LAYOUTS: dict[str, Layout] = {
    "full": Layout((_FULL,)),
    "full-eagle": Layout((_FULL,), use_eagle=True),
    "full+swa": Layout((_FULL, _SWA8), token_budget=8, kv_events=True),
    "full+swa-eagle": Layout((_FULL, _SWA8), use_eagle=True, token_budget=8),
    # several attention groups: two windows and a chunked-local group beside full attention
    "full+swa8+swa16+local": Layout((_FULL, _SWA8, _SWA16,
                                     GroupDesc("chunked_local", 4, attention_chunk_size=8)), token_budget=8),
    "full+swa8+swa16-eagle": Layout((_FULL, _SWA8, _SWA16), use_eagle=True, token_budget=8),
    # a coarser full-attention group: its blocks span two hash blocks (keyed by the release's own coarse hashes)
    "full4+full8": Layout((_FULL, GroupDesc("full", 8))),
    "full+swa+mamba": Layout((_FULL, _SWA8, GroupDesc("mamba", 4)), token_budget=8, external_loads=False),
    "full+mamba8": Layout((_FULL, GroupDesc("mamba", 8)), external_loads=False),
    "full+mamba8-eagle": Layout((_FULL, GroupDesc("mamba", 8)), use_eagle=True, external_loads=False),
    # speculative decoding, EAGLE and MTP with 1 and 2 draft tokens, up to three attention groups (full attention
    # beside windows of 8 and 16); no chunked-local group: vLLM turns the hybrid manager off for chunked local
    # attention under an EAGLE-style drafter, so it never builds that layout
    "full-eagle1": Layout((_FULL,), use_eagle=True, spec_tokens=1),
    "full+swa-mtp2": Layout((_FULL, _SWA8), use_eagle=True, token_budget=8, spec_tokens=2),
    "full+swa8+swa16-eagle2": Layout((_FULL, _SWA8, _SWA16), use_eagle=True, token_budget=8, spec_tokens=2),
    "full+swa8+swa16-mtp1": Layout((_FULL, _SWA8, _SWA16), use_eagle=True, token_budget=8, spec_tokens=1),
}

HASH_BLOCK = 4
NUM_BLOCKS = 64
MAX_LEN = 128
#: Tenants: (LoRA adapter as (name, id, path), cache salt). A LoRA adapter and a cache salt of the same name are
#: different tenants; so are two adapters loaded under one name from different paths (a name re-pointed at another
#: adapter, as vLLM's in-place LoRA reload does).
TENANTS = ((None, None), (None, "t1"), (("t1", 1, "/adapters/t1"), None), (("t2", 2, "/adapters/t2"), None),
           (("t1", 1, "/adapters/t1"), "t2"), (None, "t2"), (("t1", 3, "/adapters/t1-v2"), None))
PREFIXES = [[p * 1000 + i for i in range(40)] for p in range(2)]


def _tenant_key(tenant) -> tuple:
    """Who a request's KV belongs to: the LoRA adapter (name and path) and the cache salt."""
    lora, salt = tenant
    return (lora[0] if lora else None, lora[2] if lora else None, salt)


# --------------------------------------------------------------------------------------------- driving
@dataclass
class Verdict:
    """What one workload run found: the first violation of each invariant (id -> message), and how much ran."""

    violations: dict[str, str] = field(default_factory=dict)
    steps: int = 0
    hits: int = 0
    external_loads: int = 0
    #: Decode steps that carried draft tokens, and the draft tokens the verifier rejected.
    draft_steps: int = 0
    rejected_drafts: int = 0

    def add(self, inv_id: str, message: str) -> None:
        self.violations.setdefault(inv_id, f"step {self.steps}: {message}")


class _Violation(Exception):
    """A step raised: the workload stops there (INV-KV-14)."""


class _Run:
    """One seeded workload over one target and layout."""

    def __init__(self, target, layout: Layout, seed: int, verdict: Verdict) -> None:
        self.target, self.layout, self.v = target, layout, verdict
        self.rng = random.Random(seed)
        groups = layout.groups
        self.sizes = [g.block_size for g in groups]
        self.kinds = [g.kind for g in groups]
        self.mamba_bs = max((g.block_size for g in groups if g.kind == "mamba"), default=0)
        attention = min(g.block_size for g in groups if g.kind != "mamba")
        if self.mamba_bs and self.mamba_bs != attention and hasattr(target, "require"):
            # Only a layout the release builds: before 0.28.0 a Mamba 'align' block is the attention block.
            target.require("mamba_align_block")
        kwargs = dict(use_eagle=layout.use_eagle, enable_kv_cache_events=layout.kv_events)
        if layout.token_budget is not None and "max_in_flight_tokens" not in getattr(target, "lacks", {}):
            kwargs["max_in_flight_tokens"] = layout.token_budget
        self.m = target.make_manager(list(groups), NUM_BLOCKS, MAX_LEN, **kwargs)
        self.pool = self.m.block_pool
        self.chunk_limit = layout.token_budget or 16
        self.content: dict[int, tuple] = {}  # block id -> (tenant, token prefix) its KV covers / its state is after
        self.live: dict[str, object] = {}  # request id -> request (running)
        self.tenant: dict[str, tuple] = {}
        # request id -> (start, end, step started, blocks it fills) of an asynchronous load; it lands at the end of
        # the next step
        self.loading: dict[str, tuple[int, int, int, set[int]]] = {}
        self.loading_blocks: set[int] = set()
        self.mamba_writes: list[tuple[object, int]] = []  # (request, end) written when the step ends
        self.tables: dict[str, list[list[int]]] = {}
        self.counter = 0
        self._watch_new_blocks()

    # ---------------------------------------------------------------------------------------- observing
    def _watch_new_blocks(self) -> None:
        """INV-KV-04 and INV-KV-07 on every block the pool hands out as new, whoever asks for it."""
        pool, original, target, v = self.pool, self.pool.get_new_blocks, self.target, self.v

        def get_new_blocks(num_blocks, *args, **kwargs):
            out = original(num_blocks, *args, **kwargs)
            keyed = {bid for bids in target.cache_entries(pool).values() for bid in bids}
            for block in out:
                if block.block_id == 0 or block is pool.null_block:
                    v.add("INV-KV-04", "get_new_blocks handed out the null block")
                    continue
                if block.ref_cnt != 1 or target.block_key(block) is not None or block.block_id in keyed:
                    v.add("INV-KV-07", f"get_new_blocks handed out block {block.block_id} with ref count "
                                       f"{block.ref_cnt}, key {target.block_key(block)!r}, in the prefix cache: "
                                       f"{block.block_id in keyed}")
            return out

        pool.get_new_blocks = get_new_blocks

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 -- any exception on a valid call is the finding
            self.v.add("INV-KV-14", f"{what} raised {type(exc).__name__}: {exc}")
            raise _Violation from exc

    def _table(self, rid: str) -> list[list[int]]:
        return [list(g) for g in self.m.get_block_ids(rid)]

    # ---------------------------------------------------------------------------------------- content
    def _write(self, req, start: int, end: int, *, loaded: bool = False) -> None:
        """The tokens [start, end) of `req` are computed (or loaded by a connector): attention blocks covering
        them get their KV now; a Mamba state block is written when the step ends (or now, for a load)."""
        inv = "INV-KV-11" if loaded else "INV-KV-10"
        tokens = tuple(req.all_token_ids) + tuple(req.spec_token_ids)  # a step's KV covers its drafts too
        tenant = self.tenant[req.request_id]
        if not loaded:
            self._check_reads(req, start)
        for g, table in enumerate(self._table(req.request_id)):
            bs = self.sizes[g]
            if self.kinds[g] == "mamba":
                if loaded:
                    self._write_state(req, g, end)
                continue
            for p in range(start // bs, -(-end // bs)):
                if p >= len(table):
                    self.v.add(inv, f"request {req.request_id} group {g} has no block at position {p} for tokens "
                                    f"[{start}, {end})")
                    continue
                bid = table[p]
                if bid == 0:
                    if loaded and self.kinds[g] != "full":
                        continue  # a loaded position outside a window group's reach: the group keeps nothing there
                    self.v.add("INV-KV-04", f"tokens [{start}, {end}) of {req.request_id} group {g} are written "
                                            f"into the null block at position {p}")
                    continue
                ref = self.pool.blocks[bid].ref_cnt
                if ref != 1:
                    self.v.add(inv, f"tokens [{start}, {end}) of {req.request_id} are written into block {bid} "
                                    f"(group {g}) held {ref} times")
                self.content[bid] = (tenant, tokens[:min((p + 1) * bs, end)])
        if not loaded and self.mamba_bs:
            self.mamba_writes.append((req, end))

    def _check_reads(self, req, start: int) -> None:
        """INV-KV-15: what the step's first token (position `start`) reads, in every attention group, is in the
        request's blocks and holds KV of the request's own tokens."""
        tokens = tuple(req.all_token_ids)
        for g, table in enumerate(self._table(req.request_id)):
            kind, bs, desc = self.kinds[g], self.sizes[g], self.layout.groups[g]
            if kind == "mamba":
                continue  # a Mamba group reads one state, judged on hits (INV-KV-06, -09)
            if kind == "sliding_window":
                first = max(0, start - desc.sliding_window + 1)
            elif kind == "chunked_local":
                first = start // desc.attention_chunk_size * desc.attention_chunk_size
            else:
                first = 0
            for p in range(first // bs, -(-start // bs)):
                lo, hi = max(first, p * bs), min((p + 1) * bs, start)
                bid = table[p] if p < len(table) else 0
                held = self.content.get(bid) if bid else None
                if not bid:
                    self.v.add("INV-KV-15", f"request {req.request_id} computing from token {start} reads tokens "
                                            f"[{lo}, {hi}) of group {g} ({kind}) from "
                                            f"{'the null block' if p < len(table) else 'no block'} at position {p}")
                elif held is None or held[1][lo:hi] != tokens[lo:hi]:
                    what = "nothing written" if held is None else (
                        "a rejected draft token's KV" if REJECTED_DRAFT in held[1][lo:hi] else "other tokens' KV")
                    self.v.add("INV-KV-15", f"request {req.request_id} computing from token {start} reads tokens "
                                            f"[{lo}, {hi}) of group {g} ({kind}) from block {bid}, which holds {what}")

    def _check_lookahead(self, req, start: int, end: int) -> None:
        """INV-KV-16: after an allocation for tokens [start, end) with the layout's lookahead, every attention
        group holds a block at every position up to end + lookahead (capped at the model length)."""
        need = min(end + self.layout.lookahead_tokens, MAX_LEN)
        for g, table in enumerate(self._table(req.request_id)):
            if self.kinds[g] == "mamba":
                continue
            bs = self.sizes[g]
            for p in range(start // bs, -(-need // bs)):
                if p >= len(table) or not table[p]:
                    self.v.add("INV-KV-16", f"request {req.request_id} allocated for tokens [{start}, {end}) with "
                                            f"{self.layout.lookahead_tokens} lookahead tokens has "
                                            f"{'no block' if p >= len(table) else 'the null block'} at position {p} "
                                            f"of group {g} ({self.kinds[g]}, block size {bs}): slots up to {need} "
                                            "are needed")
                    break

    def _write_state(self, req, g: int, end: int) -> None:
        table = self._table(req.request_id)[g]
        p = -(-end // self.sizes[g]) - 1
        bid = table[p] if 0 <= p < len(table) else 0
        if bid == 0:
            self.v.add("INV-KV-04", f"the Mamba state after {end} tokens of {req.request_id} maps to the null block")
            return
        ref = self.pool.blocks[bid].ref_cnt
        if ref != 1:
            self.v.add("INV-KV-10", f"the Mamba state after {end} tokens of {req.request_id} is written into block "
                                    f"{bid} held {ref} times")
        self.content[bid] = (self.tenant[req.request_id], tuple(req.all_token_ids)[:end])

    def _run_copies(self) -> None:
        """Queued block copies (fine-grained hits' copy-on-write): content follows, retained blocks released."""
        take = getattr(self.m, "take_kv_cache_block_copies", None)
        if take is None:
            return
        copies, retained = take()
        for c in copies:
            if c.src_block_id in self.content:
                self.content[c.dst_block_id] = self.content[c.src_block_id]
        self.pool.free_blocks(retained)

    # ---------------------------------------------------------------------------------------- hits
    def _judge_hit(self, req, blocks, hit: int) -> None:
        """A served hit (its allocation succeeded): INV-KV-06, -08, -09 and -11 on every block it lists."""
        tokens = tuple(req.prompt_token_ids)
        tenant = self.tenant[req.request_id]
        if not hit:
            return
        self.v.hits += 1
        for g, lst in enumerate(blocks.get_block_ids()):
            lst = list(lst)
            bs, kind, desc = self.sizes[g], self.kinds[g], self.layout.groups[g]
            if kind == "mamba":
                need = [len(lst) - 1] if lst else []
                if not lst:
                    self.v.add("INV-KV-09", f"a hit of {hit} tokens has no Mamba block in group {g}")
            else:
                if len(lst) != hit // bs:
                    self.v.add("INV-KV-09", f"a hit of {hit} tokens lists {len(lst)} blocks in group {g} (block "
                                            f"size {bs})")
                if kind == "sliding_window":
                    first = max(0, hit - desc.sliding_window + 1) // bs
                elif kind == "chunked_local":
                    first = hit // desc.attention_chunk_size * desc.attention_chunk_size // bs
                else:
                    first = 0
                need = range(first, len(lst))
            for p in need:
                if p < len(lst) and lst[p] == 0:
                    self.v.add("INV-KV-09", f"a hit of {hit} tokens has the null block at position {p} of group "
                                            f"{g} ({kind}), which that group reads")
            for p, bid in enumerate(lst):
                if bid == 0:
                    continue
                if bid in self.loading_blocks:
                    self.v.add("INV-KV-11", f"request {req.request_id} hits block {bid}, which a connector load "
                                            "has not filled yet")
                held = self.content.get(bid)
                want = tokens[:hit] if kind == "mamba" else tokens[:min((p + 1) * bs, hit)]
                if kind == "mamba" and p != len(lst) - 1:
                    continue
                if held is None:
                    self.v.add("INV-KV-06", f"hit block {bid} (group {g}, position {p}) of {req.request_id} was "
                                            "never written")
                    continue
                same_tokens = held[1][:len(want)] == want if kind != "mamba" else held[1] == want
                if same_tokens and held[0] != tenant:
                    self.v.add("INV-KV-08", f"request {req.request_id} of tenant {tenant} hits block {bid} (group "
                                            f"{g}) written for tenant {held[0]}")
                elif not same_tokens:
                    self.v.add("INV-KV-06", f"hit block {bid} (group {g}, position {p}) of {req.request_id} holds "
                                            f"{'the state after ' if kind == 'mamba' else ''}{len(held[1])} tokens "
                                            f"of another prefix (or not yet written) instead of the hit's")

    # ---------------------------------------------------------------------------------------- steps
    def _chunk(self, req, start: int, n: int) -> int:
        if self.mamba_bs:
            return max(1, mamba_aligned_chunk(req, start, n, self.mamba_bs, HASH_BLOCK, self.chunk_limit))
        return n

    def admit(self) -> None:
        rng = self.rng
        self.counter += 1
        rid = f"r{self.counter}"
        shared = rng.choice([0, 4, 8, 12, 16, 20, 24, 32, 40])
        tokens = PREFIXES[rng.randrange(len(PREFIXES))][:shared] + [10_000 * self.counter + i
                                                                     for i in range(rng.choice([0, 1, 3, 4, 9]))]
        if len(tokens) < 2:
            tokens += [10_000 * self.counter + 500, 10_000 * self.counter + 501]
        # Half the traffic is the base model without a salt (hits among it exercise every layout's lookups); the
        # rest spreads over the other tenants.
        tenant = TENANTS[0] if rng.random() < 0.5 else TENANTS[rng.randrange(1, len(TENANTS))]
        req = self.target.make_request(rid, tokens, HASH_BLOCK, lora=tenant[0], cache_salt=tenant[1])
        self.tenant[rid] = _tenant_key(tenant)
        blocks, hit, boundary = self._call("get_computed_blocks", self.m.get_computed_blocks, req)
        if hit > len(tokens) - 1:
            self.v.add("INV-KV-05", f"request {rid} of {len(tokens)} prompt tokens hits {hit}")
            return
        req.shared_prefix_boundary = boundary
        external = 0
        if self.layout.external_loads and rng.random() < 0.35:
            # A connector offers more of the prompt: whole blocks of every group, one token left to compute.
            align = max(self.sizes)
            room = (len(tokens) - 1 - hit) // align * align
            external = rng.choice([0, align, room]) if room > 0 else 0
        if external and rng.random() < 0.5:
            out = self._call("allocate_slots", allocate, self.target, self.m, req, 0, hit, blocks,
                             external=external, delay_cache_blocks=True)
            if out is None:
                return
            self._judge_hit(req, blocks, hit)  # the hit is served once its allocation succeeds
            self._run_copies()
            self.v.external_loads += 1
            self._check_external(req, hit, hit + external)
            filling = self._blocks_covering(req, hit, hit + external)
            self.loading[rid] = (hit, hit + external, self.v.steps, filling)
            self.loading_blocks.update(filling)
            self.live[rid] = req
            self.tables[rid] = self._table(rid)
            return
        start = hit + external
        n = self._chunk(req, start, min(self.rng.choice([4, 8, 16]), self.chunk_limit, len(tokens) - start))
        out = self._call("allocate_slots", allocate, self.target, self.m, req, n, hit, blocks, external=external,
                         lookahead=self.layout.lookahead_tokens)
        if out is None:
            return
        self._check_lookahead(req, start, start + n)
        self._judge_hit(req, blocks, hit)
        self._run_copies()
        self.live[rid] = req
        self.tables[rid] = self._table(rid)
        if external:
            self.v.external_loads += 1
            self._check_external(req, hit, start)
            self._write(req, hit, start, loaded=True)
        req.num_computed_tokens = start + n
        self._write(req, start, start + n)

    def _blocks_covering(self, req, start: int, end: int) -> set[int]:
        out = set()
        for g, table in enumerate(self._table(req.request_id)):
            bs = self.sizes[g]
            out.update(bid for bid in table[start // bs:-(-end // bs)] if bid)
        return out

    def _check_external(self, req, start: int, end: int) -> None:
        """INV-KV-11: the blocks a connector loads tokens [start, end) into are held by this request only."""
        owners: dict[int, int] = {}
        for rid in self.live:
            for table in self._table(rid):
                for bid in table:
                    if bid:
                        owners[bid] = owners.get(bid, 0) + 1
        for g, table in enumerate(self._table(req.request_id)):
            bs = self.sizes[g]
            for p in range(start // bs, -(-end // bs)):
                bid = table[p] if p < len(table) else None
                if bid is None or (bid == 0 and self.kinds[g] == "full"):
                    self.v.add("INV-KV-11", f"a connector load of tokens [{start}, {end}) of {req.request_id} has "
                                            f"no block of its own at position {p} of group {g}")
                elif bid and (self.pool.blocks[bid].ref_cnt != 1 or owners.get(bid, 0) > 1):
                    self.v.add("INV-KV-11", f"a connector load of tokens [{start}, {end}) of {req.request_id} goes "
                                            f"into block {bid} (group {g}), held {self.pool.blocks[bid].ref_cnt} times")

    def advance(self, rid: str) -> None:
        req = self.live[rid]
        start = req.num_computed_tokens
        k = self.layout.spec_tokens
        accepted = 0
        if start >= req.num_prompt_tokens:
            if req.num_tokens + k >= MAX_LEN - 2:
                return
            req.append_output_token_ids(SAMPLED)
            n = 1 + k
            if k:
                # The drafter proposed k tokens; the verifier will accept the first `accepted` of them.
                accepted = self.rng.randint(0, k)
                req.spec_token_ids = [SAMPLED] * accepted + [REJECTED_DRAFT] * (k - accepted)
        else:
            n = self._chunk(req, start, min(self.rng.choice([4, 8]), self.chunk_limit, req.num_prompt_tokens - start))
        lookahead = self.layout.lookahead_tokens
        if self._call("allocate_slots", self.m.allocate_slots, req, n, num_lookahead_tokens=lookahead) is None:
            req.spec_token_ids = []
            return
        self._check_lookahead(req, start, start + n)
        self._run_copies()
        req.num_computed_tokens = start + n
        self._write(req, start, start + n)
        if req.spec_token_ids:
            # Verification: the rejected drafts roll the request back (their KV stays in the blocks until the
            # next step overwrites it); the accepted ones become output tokens.
            self.v.draft_steps += 1
            self.v.rejected_drafts += k - accepted
            req.num_computed_tokens -= k - accepted
            req.spec_token_ids = []
            if accepted:
                req.append_output_token_ids([SAMPLED] * accepted)

    def finish_loads(self) -> None:
        """Asynchronous loads started in an earlier step finish: the KV lands, then the blocks are cached and the
        request runs on (vLLM's scheduler: `_update_waiting_for_remote_kv`)."""
        for rid, (start, end, began, filling) in list(self.loading.items()):
            if began == self.v.steps:
                continue
            req = self.live[rid]
            self.loading_blocks.difference_update(filling)
            self._write(req, start, end, loaded=True)
            self._call("cache_blocks", self.m.cache_blocks, req, end)
            req.num_computed_tokens = end
            del self.loading[rid]

    def end_step(self) -> None:
        for req, end in self.mamba_writes:
            if req.request_id in self.live:
                for g, kind in enumerate(self.kinds):
                    if kind == "mamba":
                        self._write_state(req, g, end)
        self.mamba_writes.clear()

    def free(self, rid: str) -> None:
        req = self.live.pop(rid)
        self.tables.pop(rid, None)
        self._call("free", self.m.free, req)

    def evict_or_reset(self) -> None:
        before = {rid: self._table(rid) for rid in self.live}
        refs = {b.block_id: b.ref_cnt for b in self.pool.blocks[1:]}
        if self.rng.random() < 0.8:
            ids = set(self.rng.sample(range(1, NUM_BLOCKS), 3))
            self._call("evict_blocks", self.m.evict_blocks, ids)
            what = f"evict_blocks({sorted(ids)})"
        else:
            self._call("reset_prefix_cache", self.m.reset_prefix_cache)
            what = "reset_prefix_cache()"
        after = {rid: self._table(rid) for rid in self.live}
        queued = set(queue_ids(self.pool))
        for rid, tables in before.items():
            if after[rid] != tables:
                self.v.add("INV-KV-12", f"{what} changed the tables of live request {rid}")
            for bid in {b for t in tables for b in t if b}:
                if bid in queued or self.pool.blocks[bid].ref_cnt != refs[bid]:
                    self.v.add("INV-KV-12", f"{what} freed block {bid}, held by live request {rid}")

    # ---------------------------------------------------------------------------------------- checks
    def check_state(self) -> None:
        pool, v = self.pool, self.v
        queue = queue_ids(pool)
        usable = len(pool.blocks) - 1
        if len(queue) != pool.get_num_free_blocks() or len(set(queue)) != len(queue):
            v.add("INV-KV-01", f"free counter {pool.get_num_free_blocks()}, free queue of {len(queue)} "
                               f"({len(set(queue))} distinct)")
        referenced = sum(1 for b in pool.blocks[1:] if b.ref_cnt > 0)
        if referenced + len(set(queue) - {0}) != usable:
            v.add("INV-KV-01", f"{referenced} referenced + {len(set(queue) - {0})} free blocks != {usable} usable")
        if 0 in queue:
            v.add("INV-KV-04", "the null block is in the free queue")
        qset = set(queue)
        for b in pool.blocks[1:]:
            if (b.ref_cnt == 0) != (b.block_id in qset):
                v.add("INV-KV-02", f"block {b.block_id} has ref count {b.ref_cnt} and is "
                                   f"{'' if b.block_id in qset else 'not '}in the free queue")
        keyed = {bid for bids in self.target.cache_entries(pool).values() for bid in bids}
        if 0 in keyed or self.target.block_key(pool.null_block) is not None:
            v.add("INV-KV-04", "the null block is in the prefix cache")
        for bid in sorted(keyed):
            held = self.content.get(bid)
            if held is not None and REJECTED_DRAFT in held[1]:
                v.add("INV-KV-17", f"block {bid} is in the prefix cache holding KV of a rejected draft token "
                                   f"(position {held[1].index(REJECTED_DRAFT)})")
        for bid in sorted(self.loading_blocks & keyed):
            v.add("INV-KV-11", f"block {bid}, which an asynchronous connector load still fills, is in the prefix "
                               "cache (any lookup may serve it before the load lands)")
        # ownership
        holders: dict[int, list[tuple[str, int, int]]] = {}
        for rid in self.live:
            table = self._table(rid)
            seen = set()
            for g, lst in enumerate(table):
                for p, bid in enumerate(lst):
                    if not bid:
                        continue
                    if bid in seen:
                        v.add("INV-KV-03", f"block {bid} appears twice in request {rid}'s tables")
                    seen.add(bid)
                    holders.setdefault(bid, []).append((rid, g, p))
            old = self.tables.get(rid)
            if old is not None:
                for g, (was, now) in enumerate(zip(old, table)):
                    if len(now) < len(was) or any(now[p] not in (was[p], 0) for p in range(len(was))):
                        v.add("INV-KV-13", f"request {rid} group {g}: table {was} became {now}")
                        break
            self.tables[rid] = table
        for bid, owners in holders.items():
            block = pool.blocks[bid]
            if len({g for _, g, _ in owners}) > 1:
                v.add("INV-KV-03", f"block {bid} is held by two groups: {owners}")
            if block.ref_cnt != len(owners):
                v.add("INV-KV-03", f"block {bid} has ref count {block.ref_cnt}, held by {len(owners)} tables")
            if len(owners) > 1:
                positions = {(g, p) for _, g, p in owners}
                tenants = {self.tenant[rid] for rid, _, _ in owners}
                if len(positions) > 1:
                    v.add("INV-KV-03", f"block {bid} is shared by {owners} at different positions")
                elif len(tenants) > 1:
                    v.add("INV-KV-08", f"block {bid} is shared by requests of tenants {sorted(tenants, key=str)}")

    # ---------------------------------------------------------------------------------------- the loop
    def run(self, num_steps: int) -> None:
        rng = self.rng
        try:
            for step in range(num_steps):
                self.v.steps = step
                new_step(self.target, self.m)
                for rid in sorted(self.live):
                    if rid not in self.loading and rng.random() < 0.7:
                        self.advance(rid)
                for _ in range(rng.choice([0, 1, 1, 2])):
                    self.admit()
                self.end_step()
                self.finish_loads()
                self.check_state()
                # Finished or preempted; a request whose load is in flight keeps its blocks until the load lands
                # (the scheduler's job, not the allocator's).
                done = sorted(set(self.live) - set(self.loading))
                if done and rng.random() < 0.3:
                    self.free(rng.choice(done))
                if rng.random() < 0.1:
                    self.evict_or_reset()
                self.check_state()
        except _Violation:
            pass


def run_workload(target, layout: Layout, seed: int, num_steps: int) -> Verdict:
    """Run `num_steps` scheduling steps of seeded random traffic on `target` over `layout`; the first violation
    of each invariant. Building the manager asks the target for what the layout needs (N/A where the release
    lacks it)."""
    verdict = Verdict()
    _Run(target, layout, seed, verdict).run(num_steps)
    return verdict
