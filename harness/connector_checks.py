"""The connector conformance checks, one record each (connector spec section 4.2): the shared floor the connector
suite (which runs them), `kvconform checks` (which lists them), the report (which groups their cells) and
docs/connector-checks.md (generated from them) all read.

Adding a check is one `Check` here plus its test in `suites/connector/` marked `@pytest.mark.kv_check("Cnn")`;
tests/connector/test_check_records.py fails when either is missing. Then two writers, no other file by hand:
`kvconform checks --format md > docs/connector-checks.md` (the page) and `python -m harness.release.doc_tables`
(the README's count); a test fails while either is stale (docs/new-release.md, "A new case key, a new check").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

TIERS = ("MUST", "SHOULD")
#: How a check uses an optional backdoor: every MUST check decides from observable behaviour and a backdoor only
#: adds evidence ("sharpens"); a check whose verdict needs one is a SHOULD ("needs").
BACKDOOR_USES = ("sharpens", "needs")


@dataclass(frozen=True)
class Check:
    """One connector check: its facts, reviewed data.

    `needs`: the connector API capabilities (`harness.targets.connector.capabilities.CAPABILITIES`) without which
    its property cannot be observed; on a release lacking one the check is not applicable. `backdoor`: (how it
    uses them, one of `BACKDOOR_USES`; which backdoors). `not_for`: connector kind
    (`harness.targets.connector.profile.KINDS`) -> why the check does not apply to connectors of that kind
    (`{kind}` is filled with the kind's description). `time_factor`: its time limit is this many times
    --kv-connector-timeout. `multi_group`: it runs a multi-group model whatever its preset parameter says.
    `declaration_only`: it reads what the class declares rather than exercising behaviour (an HMA verdict needs
    multi-group checks beyond these to have run)."""

    id: str
    tier: str
    name: str
    description: str
    needs: tuple[str, ...] = ()
    backdoor: tuple[str, str] | None = None
    not_for: Mapping[str, str] = field(default_factory=dict)
    time_factor: int = 1
    multi_group: bool = False
    declaration_only: bool = False


# Why a check does not apply to a connector of a kind that stores no KV (dummy) or only moves it between
# instances (transfer): the check's oracle is what was stored, or a hit served within one engine.
_HIT_VS_STORE = "it judges hits against what was stored, and a {kind} connector claims hits for prompts it never stored"
_BYTES_VS_STORE = "it judges loaded KV bytes against what was stored, and a {kind} connector loads no stored KV"
_FAILURE_BY_HIDING = "it injects a load failure by hiding stored objects from the workers, and a {kind} connector reads none"
_NEEDS_LOCAL_HIT = "it needs a hit served within one engine, and a {kind} connector only serves hits a peer instance sends"
_NOT_STORED_HITS = MappingProxyType({"dummy": _HIT_VS_STORE, "transfer": _HIT_VS_STORE})
_NOT_STORED_BYTES = MappingProxyType({"dummy": _BYTES_VS_STORE, "transfer": _BYTES_VS_STORE})
_NOT_STORED_FAILURE = MappingProxyType({"dummy": _FAILURE_BY_HIDING, "transfer": _FAILURE_BY_HIDING})
_NOT_PEER_ONLY = MappingProxyType({"transfer": _NEEDS_LOCAL_HIT})
# C42's scenarios free blocks while a prefill step is in flight; a connector that claims a hit for every prompt
# leaves no prefill to watch (measured: vLLM 0.34.0's DecodeBenchConnector, where C42 found nothing in flight)
_NEEDS_PREFILL = MappingProxyType({"dummy": "it watches prompts prefilled step by step, and a {kind} connector claims "
                                            "a hit for every prompt"})

_RECORDS = (
    Check("C01", "MUST", "declares-hma", "SupportsHMA, request_finished_all_groups overridden, (vllm_config, role, "
          "kv_cache_config) constructor", multi_group=True, declaration_only=True),
    Check("C02", "MUST", "scheduler-role-cpu", "the scheduler-role instance runs every scheduler hook with no GPU and "
          "no worker state"),
    Check("C03", "MUST", "group-discovery", "skips non-transferable groups and rejects unsupported specs at start with "
          "a clear error"),
    Check("C04", "MUST", "lookup-idempotent", "repeated lookups agree; a never-admitted request leaks nothing",
          backdoor=("sharpens", "kvconform_open_state")),
    Check("C05", "MUST", "lookup-none-then-value", "a None lookup is followed by a value; load_async is False when "
          "n == 0", backdoor=("sharpens", "kvconform_open_state"), not_for=_NOT_STORED_HITS),
    Check("C06", "MUST", "hit-alignment", "hits stay below the prompt length and within what was stored, and land on "
          "a Mamba state boundary where the model has Mamba groups (an attention hit may end inside a block: vLLM "
          "0.33's scheduler takes it)", not_for=_NOT_STORED_HITS),
    Check("C07", "MUST", "hit-min-over-groups", "the hit is the largest length every group can serve (windowed rule)",
          backdoor=("sharpens", "kvconform_evict, kvconform_chunk_size"), not_for=_NOT_STORED_HITS),
    Check("C08", "SHOULD", "swa-needs-only-window", "losing sliding-window chunks older than the window does not "
          "reduce the hit", backdoor=("needs", "kvconform_evict, kvconform_chunk_size"), not_for=_NOT_STORED_HITS),
    Check("C09", "MUST", "mamba-boundary-only", "hits only at stored Mamba boundaries, with the state of that "
          "boundary", not_for=_NOT_STORED_HITS),
    Check("C10", "MUST", "alloc-input-dedupe", "update_state_after_alloc with the full table (twice) leaves no "
          "duplicate blocks", backdoor=("sharpens", "kvconform_tracked_block_ids"), not_for=_NOT_STORED_BYTES),
    Check("C11", "MUST", "table-tracking", "per-group tables follow new (full), running (append) and resumed "
          "(replace) requests", backdoor=("sharpens", "kvconform_tracked_block_ids"), not_for=_NOT_STORED_BYTES),
    Check("C12", "MUST", "meta-pure", "build_connector_meta does not mutate the SchedulerOutput and its result "
          "pickles"),
    Check("C13", "MUST", "finish-hook-shapes", "request_finished_all_groups takes real HMA shapes, returns (bool, "
          "JSON dict|None), once per request"),
    Check("C14", "MUST", "round-trip-bytes", "store, wipe, reload: every needed block equals the content oracle",
          not_for=_NOT_STORED_BYTES),
    Check("C15", "MUST", "null-block-untouched", "block 0 is never written by loads nor persisted by stores",
          not_for=_NOT_PEER_ONLY),
    Check("C16", "MUST", "ownership-fence", "loads write only blocks the request owns; other blocks keep their "
          "canaries", not_for=_NOT_PEER_ONLY),
    Check("C17", "MUST", "layer-group-routing", "each layer's KV moves through block_ids[group(layer)]",
          not_for=_NOT_STORED_BYTES),
    Check("C18", "MUST", "per-group-block-size", "correct slicing when groups have different block sizes",
          not_for=_NOT_STORED_BYTES),
    Check("C19", "MUST", "skip-local-prefix", "a load never writes the blocks of the local prefix-cache hit",
          not_for=_NOT_PEER_ONLY),
    Check("C20", "MUST", "loaded-groups-complete", "every non-null block of each loaded group is written before the "
          "load is reported", not_for=_NOT_STORED_BYTES),
    Check("C21", "MUST", "async-completion-liveness", "every load and delayed free is reported by every worker; the "
          "engine drains", not_for=_NOT_PEER_ONLY),
    # C22 reads per-request failure reports (failed_recving).
    Check("C22", "MUST", "failure-by-request", "a failed load on a multi-group model is reported per request, never "
          "per block", needs=("failed_recving",), not_for=_NOT_STORED_FAILURE),
    Check("C23", "MUST", "failure-no-partial-poison", "after a failed load nothing invalid is offered again",
          not_for=_NOT_STORED_FAILURE),
    Check("C24", "MUST", "swa-reuse-race", "a store never persists bytes of a sliding-window block after its reuse",
          not_for=_NOT_STORED_BYTES),
    Check("C25", "MUST", "finish-reuse-race", "a store never persists bytes of a finished request's block after its "
          "reuse", not_for=_NOT_STORED_BYTES),
    Check("C26", "MUST", "preemption", "preemption mid-prefill: no stale stores, replaced tables, no duplicate store "
          "keys", not_for=_NOT_STORED_BYTES),
    Check("C27", "MUST", "abort-midflight", "abort during a load or a prefill: finish hook called, no later writes "
          "to freed blocks", not_for=_NOT_PEER_ONLY),
    Check("C28", "MUST", "layer-hooks-attention-only", "with layer hooks for attention layers only, no hang and "
          "Mamba state restored", not_for=_NOT_STORED_BYTES),
    Check("C29", "MUST", "empty-steps", "idle steps run the whole connector cycle safely and keep making progress"),
    Check("C30", "MUST", "key-isolation", "cache salt, LoRA and group give no cross hit; group objects do not alias",
          backdoor=("sharpens", "kvconform_evict"), not_for=_NOT_STORED_HITS),
    Check("C31", "MUST", "state-hygiene", "after many requests (finish, abort, preempt) no per-request state or pin "
          "remains", backdoor=("sharpens", "kvconform_open_state")),
    # C32 reads the events the connector hands the scheduler (take_events).
    Check("C32", "SHOULD", "events-group-aware", "KV events, if any, carry group information",
          needs=("take_events",)),
    Check("C33", "MUST", "multiconnector", "inside MultiConnector with another HMA child, both get "
          "request_finished_all_groups", multi_group=True),
    Check("C34", "MUST", "tp-rank-shards", "with TP=2 each rank stores and loads only its own shard",
          not_for=_NOT_STORED_BYTES),
    Check("C35", "SHOULD", "capacity-pressure", "a full backend degrades without wrong hits",
          not_for=_NOT_STORED_HITS),
    # C36 starts fresh interpreters, each of which imports the connector's package (vLLM's import alone takes
    # tens of seconds on a loaded machine): a hanging hook is still caught, later.
    Check("C36", "MUST", "determinism-across-processes", "store keys are identical across processes with different "
          "PYTHONHASHSEED", backdoor=("sharpens", "kvconform_object_keys (only when the store does not outlive its "
                                      "process)"), not_for=_NOT_STORED_HITS, time_factor=10),
    # Issue 31 item 3: the inputs real connector bugs live in (suites/connector/test_inputs.py).
    Check("C37", "MUST", "multiconnector-stores-every-child", "a cold request through MultiConnector reaches every "
          "child's store: each child, looked up on its own, hits what it hits alone", not_for=_NOT_STORED_HITS),
    Check("C38", "MUST", "lookup-at-local-hits", "asked at a local hit (0, a chunk boundary, inside a chunk), the "
          "connector offers the rest of what it stored, and the load reads right", not_for=_NOT_STORED_HITS),
    Check("C39", "MUST", "exact-multiple-reload", "a prompt whose length is an exact multiple of the block size stores "
          "as much as one token longer: a reload hits all of it", not_for=_NOT_STORED_HITS),
    Check("C40", "MUST", "offloaded-block-multiple", "with its stored block 4x and 16x the GPU block, a reload hits "
          "every whole stored block and never the partial one, and reads right", not_for=_NOT_STORED_HITS),
    Check("C41", "MUST", "eagle-drops-last-block", "under EAGLE / MTP speculative decoding a hit leaves its last block "
          "to recompute, and the load writes nothing past the hit", not_for=_NOT_STORED_HITS),
    # Issue 31 item 3: async scheduling, two steps in flight (suites/connector/test_async_scheduling.py,
    # docs/async-scheduling.md). C42 runs four scenarios, each on an engine of its own with a pool measured for it
    # (the first cell of a vLLM run also pays for importing vLLM's scheduler).
    Check("C42", "MUST", "in-flight-blocks-kept", "under async scheduling a block a step still in flight reads or "
          "writes is never allocated to a request before that step's output is applied (finish, abort, preemption)",
          time_factor=2, not_for=_NEEDS_PREFILL),
    Check("C43", "MUST", "loading-blocks-kept", "under async scheduling with asynchronous loads a block a load is "
          "writing is never zeroed nor allocated anew before the load is reported finished", not_for=_NOT_PEER_ONLY),
)

#: Every check by id, in id order.
CHECKS: Mapping[str, Check] = MappingProxyType({check.id: check for check in sorted(_RECORDS, key=lambda c: c.id)})
if len(CHECKS) != len(_RECORDS):
    raise ValueError("connector checks: two records share an id")
