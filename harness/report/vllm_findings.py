"""`docs/vllm-connectors.md`: what the connector suite finds in the connectors a vLLM release ships, regenerated
from a results file of the CI vLLM job's connector step (`--kv-connector vllm:Name` for every registered name).

    python -m harness.report.vllm_findings results-connectors-vllm-0.33.0.json [--before OLD.json] > docs/vllm-connectors.md

Every finding (a connector's failing cells with one root cause, `harness.failure_groups`) is classified by
reviewed data below (`CLASSIFIED`): a bug of the connector, with the upstream issue where one exists, or not
applicable. A finding no entry matches is printed as "unclassified", so a new finding is never passed off as
a known one. The checks that do not apply to a connector (N/A), and the connectors this machine cannot run,
are listed with their reasons; each connector's wall time is the sum of its checks' durations.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass

from harness.failure_causes import cause_of
from harness.outcomes import message_for_any_cell
from harness.failure_groups import split_check
from harness.key_components import key_cause, record_components
from harness.report.connector_section import _is_not_applicable, declares_hma, hma_verdict
from harness.results_model import load_results
from harness.report.vllm_connectors_section import vllm_connector_of, whole_connector_reason
from harness.targets.connector.vllm_facts import is_example


@dataclass(frozen=True)
class Classified:
    """Reviewed: a failing cell of `connector` (its name, or a child of a MultiConnector cell) whose structured cause
    key (`harness.failure_causes`: the tag the check emitted) is among `causes`, and, where given, whose check is
    among `checks`, its preset (or C30's deployment variant) among `presets`, its vLLM release among `releases`,
    the hook and the exception class of a raising hook `hook` and `exception`, and the key components a key leak
    named within `components`, is the root cause `root`, a `verdict` ("connector bug" or "not applicable") because
    `why`; `upstream`: the upstream issue, where one exists. Nothing is matched on a failure message's words."""

    connector: str
    causes: tuple[str, ...]
    root: str
    verdict: str
    why: str
    upstream: str = ""
    checks: tuple[str, ...] = ()
    presets: tuple[str, ...] = ()
    components: tuple[str, ...] = ()
    hook: str = ""
    exception: str = ""
    releases: tuple[str, ...] = ()


def _keys_ignore(connector: str, components: tuple[str, ...], why: str, upstream: str = "",
                 causes: tuple[str, ...] = ("key-leak",), **scope) -> Classified:
    """A reviewed key bug: `connector`'s keys ignore `components` (the root is the checks' own words for it); a
    key leak whose components are among them, or another of `causes` within the scope given."""
    return Classified(connector, causes, key_cause(components), "connector bug", why, upstream,
                      components=components if causes == ("key-leak",) else (), **scope)


_KEYS_TOKENS_ONLY = ("folder names hash the prompt's tokens only: another cache salt, LoRA adapter, model name or KV "
                     "dtype sharing the storage path finds another deployment's files (another tenant's KV, or a "
                     "dtype the load cannot copy)")
_NO_TP_IN_KEY = ("folder names carry neither the TP rank nor the TP size: the ranks of TP=2 write (and read) one "
                 "file, so rank 0 loads rank 1's heads; a TP=1 deployment finds a TP=2 rank's file")
# Key components (`harness.key_components`) ExampleConnector's folder names leave out.
_TOKENS_ONLY = ("cache_salt", "lora", "model", "dtype")
_TP = ("tp_size", "tp_rank")
# Read against vLLM 0.33.0's vllm/distributed/kv_transfer/kv_connector/v1/example_connector.py.
CLASSIFIED = (
    Classified("ExampleConnector", ("hook-raised",), "lookup and load keys disagree", "connector bug",
               "`get_num_new_matched_tokens` looks for the folder of the first `align(len(prompt) - 1)` tokens, "
               "while the store and the load use the first `align(len(prompt))` tokens (`align(n) = (n - 1) // "
               "block * block`): a prompt that extends a stored one by one token finds the stored folder, then "
               "loads from a folder that does not exist", hook="start_load_kv", exception="FileNotFoundError"),
    # Measured on vLLM 0.14.0 (2026-12-06, C39 on fa_only): a stored 512-token prompt is hit by a 515-token reload
    # with 0 tokens, a stored 513-token one with 512; read against 0.14.0's example_connector.py (`make_meta`,
    # `_found_match_for_prompt`, `align_to_block_size`).
    Classified("ExampleConnector", ("exact-multiple-short",), "an "
               "exact-multiple prompt is stored one block short", "connector bug",
               "the store keeps the first `align(len(prompt))` tokens (`ReqMeta.make_meta`, with `align(n) = (n - 1) "
               "// block * block`), so a prompt whose length is an exact multiple of the block is stored without its "
               "last full block, under the key of that shorter prefix; a longer prompt looks up the folder of its "
               "first `align(len - 1)` tokens, the whole stored prompt, and never finds it (a 512-token prompt: "
               "stored as 496 tokens, a 515-token reload hits 0; a 513-token prompt: stored as 512, hit 512)",
               checks=("C39",)),
    _keys_ignore("ExampleConnector", _TP, _NO_TP_IN_KEY),
    # C42's preemption scenario (chunked prefill, two long requests preempting each other) meets the same file:
    # the preempted request is looked up again and its truncated store is loaded (measured on 0.34.0).
    Classified("ExampleConnector", ("hook-raised",), "chunked prefill stores a truncated file", "connector bug",
               "under chunked prefill the store is built once, from the new request's first chunk of blocks, and "
               "written under the whole prompt's key; a later hit claims the whole prompt and the load fails on "
               "the shape of the shorter file",
               "vllm-project/vllm#16928 (closed as stale); a fix is proposed in vllm-project/vllm#53314 (open)",
               hook="start_load_kv", exception="RuntimeError", checks=("C11", "C26", "C27", "C42")),
    Classified("ExampleConnector", ("local-hit-overwritten",), "loads overwrite the local "
               "prefix-cache hit", "connector bug",
               "the load writes every block of the stored prefix, including the blocks vLLM's prefix cache "
               "already supplied (shared with other running requests): it ignores `num_computed_tokens`"),
    _keys_ignore("ExampleConnector", _TOKENS_ONLY, _KEYS_TOKENS_ONLY),
    _keys_ignore("ExampleConnector", _TP, _NO_TP_IN_KEY, causes=("wrong-kv",), checks=("C21",)),
    # C14 on fa_only@bf16 reloads its 900-token prompt from the run's one ExampleConnector folder, where C14 on
    # fa_only stored the same tokens in float16 (the folder name hashes the tokens only): the load copies float16
    # into the bfloat16 cache and raises ("Index put requires the source and destination dtypes match").
    _keys_ignore("ExampleConnector", _TOKENS_ONLY, _KEYS_TOKENS_ONLY, causes=("hook-raised",), checks=("C14",),
                 presets=("fa_only@bf16",), hook="start_load_kv", exception="RuntimeError"),
    # C37's cold prompt is the same tokens in its 'first' and 'second' cells, each under a model name of its own;
    # the second cell's ExampleConnector finds the first cell's folder (tokens only) and loads KV computed for the
    # other model name, which the content oracle reads as wrong.
    _keys_ignore("ExampleConnector", _TOKENS_ONLY, _KEYS_TOKENS_ONLY, causes=("wrong-kv",), checks=("C37",)),
    # Removed 2026-12-06 (issue 31 item 4): two OffloadingConnector findings on the preset fa+swa+mamba (full
    # attention and a sliding window in blocks of 16 beside a Mamba 'align' block of 256; 15 cells on 0.32.0-0.34.0)
    # rested on a layout no release builds (harness/targets/connector/vllm_layouts.py); on the layout the releases build
    # (fa+swa+mamba@block256) the same checks pass on 0.32.0, 0.33.0 and 0.34.0 (docs/vllm-connectors.md).
    # Read against vLLM 0.30.0's distributed/kv_transfer/kv_connector/v1/offloading/config.py and scheduler.py,
    # traced on scratch_group (full attention beside a CircularBufferSpec group, vLLM's prefix_cacheable=False
    # spec, `v1/kv_cache_interface.py:895-897`): the connector's scheduler role fails at construction. Not seen on
    # 0.31.0+, whose `get_offloading_group_ids` returns `kv_cache_config.prefix_cacheable_group_ids` (config.py:38).
    # vLLM 0.29.0 reaches the same assert (traced on its scratch_group cells, 2026-12-05): `build_offloading_config`
    # makes an offloading group of every KV cache group (`offloading/config.py:41-53`, no prefix_cacheable filter in
    # offloading/ or offloading_connector.py), `from_spec` asks for each (scheduler.py:195), assert at line 125;
    # CircularBufferSpec.prefix_cacheable is False (kv_cache_interface.py:780-781).
    Classified("OffloadingConnector", ("raised", "hook-raised"), "a KV cache group outside prefix caching fails the "
               "scheduler's construction", "connector bug",
               "`get_offloading_group_ids` offloads every KV cache group unless HiSparse is on (`return "
               "tuple(range(len(kv_cache_config.kv_cache_groups)))`, `offloading/config.py:36-38`), prefix-cacheable "
               "or not, though the connector itself knows such groups (`offloading_connector.py:60-65`); "
               "`SchedulerOffloadConfig.from_spec` then asks `get_sliding_window_size_in_chunks` for each group "
               "(`offloading/scheduler.py:195`), which takes any spec that is neither sliding window, chunked local "
               "nor Mamba for full attention and asserts it (`assert isinstance(kv_cache_spec, "
               "FullAttentionSpec)`, line 140): a model with a CircularBufferSpec group cannot build the connector",
               "none found; also in vLLM 0.29.0 (every group an offloading group, `offloading/config.py:41-53`; "
               "the assert at scheduler.py:125); gone by vLLM 0.31.0 (`prefix_cacheable_group_ids`)",
               presets=("scratch_group",), exception="AssertionError"),
    # Read against vLLM 0.13.0's kv_connector/v1/decode_bench_connector.py (`_fill_blocks`) and
    # v1/attention/backends/flash_attn.py (`get_kv_cache_shape`: (2, num_blocks, block_size, heads, head_size)).
    # Not seen on 0.33.0 or 0.34.0 (the same checks pass there).
    Classified("DecodeBenchConnector", ("null-block-written",), "the fill indexes FlashAttention's K/V "
               "axis as blocks", "connector bug",
               "`_fill_blocks` writes `kv_cache[block_ids]` after keeping the ids below `kv_cache.shape[0]`, taking "
               "dim 0 as the block axis; FlashAttention's cache is `(2, num_blocks, ...)`, so only block id 1 passes "
               "the filter (0 is the null block) and selects the whole V plane: the V of every block of every "
               "request, the null block included, is overwritten with dummy values, and the request's own blocks "
               "above 1 are not filled",
               "none found; gone by vLLM 0.33.0", checks=("C15",)),
    # Read against vLLM 0.27.0's kv_connector/v1/decode_bench_connector.py (`update_state_after_alloc`, lines
    # 232-265; 0.13.0's is the same, lines 218-250) and v1/core/sched/scheduler.py:1001-1003; fixed in 0.30.0
    # (`external_block_start = num_local_computed_tokens // group_block_size`, line 286). Seen from 0.24.0, whose
    # blocks-outermost FlashAttention layout lets the fill reach the blocks it names (before, the K/V-axis bug
    # above hid it).
    Classified("DecodeBenchConnector", ("local-hit-overwritten",), "the fill starts at the "
               "request's first block, over its local prefix-cache hit", "connector bug",
               "the scheduler hands `update_state_after_alloc` the request's whole block table "
               "(`kv_cache_manager.get_blocks(request_id)`), and the connector fills its first "
               "`cdiv(num_external_tokens, block_size)` blocks (`group_blocks[:num_blocks_to_fill]`): with a local "
               "prefix-cache hit those are the hit's blocks, cached and shared with other requests, which it "
               "overwrites with dummy values, while the last blocks it claimed stay unfilled",
               "none found; fixed by vLLM 0.30.0 (the fill starts at `num_local_computed_tokens // block_size`)",
               checks=("C19",)),
    # Read against lmcache 0.5.6 (the newest on PyPI, 2026-12-04), lmcache/integration/vllm/lmcache_mp_connector.py
    # (`_process_cached_requests`: `request_id not in cached_reqs.resumed_req_ids`), and vLLM 0.34.0's
    # v1/core/sched/output.py (`CachedRequestData` has no `resumed_req_ids`: 0.34 sends a resumed request as a
    # new one). vLLM 0.34.0's `LMCacheMPConnector` loads this class whenever lmcache is installed.
    Classified("LMCacheMPConnector", ("hook-raised",), "lmcache 0.5.6 reads a field vLLM 0.34.0 "
               "removed", "connector bug",
               "`build_connector_meta` reads `scheduler_output.scheduled_cached_reqs.resumed_req_ids` without a guard; "
               "vLLM 0.34.0's `CachedRequestData` has no such field, so the first scheduler step with a running "
               "request raises AttributeError (in vLLM's engine core: a fatal error). vLLM 0.34.0's own "
               "`LMCacheMPConnector` resolves to this class whenever lmcache is importable",
               "none found for the MP connector; LMCache/LMCache#2069 guarded the same field in vllm_v1_adapter.py "
               "only", hook="build_connector_meta", exception="AttributeError", releases=("0.34.0",)),
    # Read against lmcache 0.5.6 (`_create_key` of vllm_multi_process_adapter.py builds `IPCCacheServerKey` from num_kv_readers,
    # model name, world size, worker id, token ids, start/end, request id, cache salt and request configs), and
    # measured on vLLM 0.33.0: a prompt stored by a float16 engine hit 512 tokens on a bfloat16 engine of the same
    # model name on the same server, and the model read the float16 bytes as bfloat16.
    _keys_ignore("LMCacheMPConnector", ("dtype",),
                 "the MP connector's chunk keys carry the model name, world size, worker, token ids and cache salt, "
                 "not the KV cache dtype: on one server, an engine of another KV dtype (float16 and bfloat16) of the "
                 "same model finds the other's chunks and loads their bytes as its own dtype",
                 "LMCache/LMCache#1856 (closed) reported the same of `CacheEngineKey`; lmcache 0.5.6's MP key "
                 "`IPCCacheServerKey` still carries no dtype",
                 checks=("C30",)),
    # Read against lmcache 0.5.6 (lmcache/integration/vllm/lmcache_mp_connector.py, vllm_multi_process_adapter.py,
    # lmcache/v1/multiprocess/token_hasher.py): a chunk's key is the model name, world size, worker, the chunk
    # hashes of the tokens and the cache salt; the request's LoRA adapter enters nowhere.
    _keys_ignore("LMCacheMPConnector", ("lora",),
                 "the MP connector's chunk keys carry the model name, world size, worker, token-chunk hashes and cache "
                 "salt, but not the request's LoRA adapter: a prompt stored by a LoRA request is served to a request "
                 "of the base model (or of another adapter), whose KV differs", checks=("C30",)),
)


def _is_or_holds(connector: str, name: str) -> bool:
    """`connector` is `name`, or a MultiConnector cell with `name` among its children (either under vLLM's
    scheduler too)."""
    connector = connector.removesuffix(ENGINE_SUFFIX)
    if connector == name:
        return True
    children = connector.partition("[")[2].rstrip("]")
    return connector.startswith("MultiConnector[") and name in children.split(",")


def classify(connector: str, check: str, cause: dict, preset: str = "", release: str = "") -> Classified | None:
    """The reviewed entry for one failing cell by its structured keys: the connector, the check id, the preset (or
    deployment variant), the release and the cause key its check recorded (`harness.failure_causes`); None when
    none matches (a cell recorded without a cause key matches none)."""
    tag = cause.get("tag")
    for entry in CLASSIFIED:
        if (not _is_or_holds(connector, entry.connector) or tag not in entry.causes
                or (entry.checks and check not in entry.checks) or (entry.presets and preset not in entry.presets)
                or (entry.releases and release not in entry.releases)
                or (entry.hook and cause.get("hook") != entry.hook)
                or (entry.exception and cause.get("exception") != entry.exception)):
            continue
        if entry.components and not set(cause.get("components") or ()) <= set(entry.components):
            continue
        return entry
    return None


def cell_cause(entry: dict) -> dict:
    """A results entry's structured cause key; a key leak recorded before checks kept cause keys (`key_leak`
    only) is that key leak."""
    cause = cause_of(entry)
    if not cause:
        components = record_components((entry.get("extra") or {}).get("key_leak"))
        if components:
            cause = {"tag": "key-leak", "components": list(components)}
    return cause


def cell_keys(entry: dict) -> tuple[str, str, str, dict]:
    """(check id, preset or deployment variant, vLLM release, cause key) of a connector-suite entry."""
    cell = entry.get("cell") or {}
    check = str(cell.get("check", "?")).split(" ")[0]
    preset = str(cell.get("preset") or "-")
    if preset == "-":
        preset = str(cell.get("variant") or "-")
    found = vllm_connector_of(entry)
    return check, preset, found[0] if found else "", cell_cause(entry)


ENGINE_SUFFIX = " (vLLM's scheduler)"


def by_vllm_connector(entries: list[dict]) -> tuple[dict[str, list[dict]], set[str]]:
    """The entries of vLLM's connectors by connector (a run under `--kv-engine vllm` under the name with
    ENGINE_SUFFIX, apart from kvconform's engine's cells), and the releases they are of."""
    by_connector: dict[str, list[dict]] = defaultdict(list)
    versions = set()
    for entry in entries:
        found = vllm_connector_of(entry)
        if found is not None:
            versions.add(found[0])
            engine = (entry.get("cell") or {}).get("engine")
            by_connector[found[1] + (ENGINE_SUFFIX if engine else "")].append(entry)
    return by_connector, versions


def connector_status(entry: dict) -> str:
    """passed, failed, error, n/a, inconclusive or not run (by the entry's status and its typed records)."""
    if entry["status"] != "skipped":
        return entry["status"]
    if _is_not_applicable(entry):
        return "n/a"
    if (entry.get("skip_cause") or {}).get("kind") == "inconclusive":
        return "inconclusive"
    return "not run"


def findings_markdown(entries: list[dict], before: list[dict] | None = None, release: str | None = None,
                      commit: str | None = None) -> str:
    """The page (Markdown) for the vLLM connector entries among `entries` (`commit`: the suite's that ran)."""
    by_connector, versions = by_vllm_connector(entries)
    version = release or ", ".join(sorted(versions)) or "?"
    lines = [f"# What the suite finds in vLLM's connectors and in LMCache (vLLM {version})", "",
             "Generated by `python -m harness.report.vllm_findings RESULTS.json` from the results of the CI vLLM "
             "job's connector step (`.ci/vllm-job.sh`: `pytest suites/connector -n 2 -W ignore::DeprecationWarning` "
             "with one `--kv-connector=vllm:Name` per connector the release registers, as `python -m "
             "harness.targets.connector.vllm_target` lists them)" + (f", suite at commit {commit[:12]}" if commit else "")
             + ". Each finding is one root cause of a connector's failing cells (`docs/connector-profiles.md`), "
             "classified by reviewed data in `harness/report/vllm_findings.py`; LMCache's connectors appear as "
             "the run found them (installed or not). Wall time: the sum of the connector's check durations "
             "(two xdist workers share the machine).", ""]
    ran, unavailable = split_ran(by_connector)
    findings = {c: findings_of(c, items) for c, items in ran.items()}
    total_cells = sum(f.count for fs in findings.values() for f in fs)
    total_groups = sum(len(fs) for fs in findings.values())
    lines += ["## Summary", "",
              f"{total_cells} failing cells in {total_groups} findings (root causes) over {len(ran)} connectors "
              f"that ran; {len(unavailable)} connectors could not run here."]
    if before is not None:
        old = [e for e in before if vllm_connector_of(e) is not None and e["status"] in ("failed", "error")]
        lines.append(f"Before (the same step with the suite before issue 19): {len(old)} failing cells in "
                     f"{len({_what(e) for e in old})} groups of identical first lines (the previous grouping).")
    for title, blurb, connectors in _blocks(ran):
        lines += ["", f"### {title}", "", blurb, "",
                  "| connector | `SupportsHMA` | profile | passed | failed | N/A | inconclusive | not run | wall time (s) | HMA verdict |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for connector in connectors:
            items = ran[connector]
            counts = Counter(connector_status(e) for e in items)
            wall = sum(float(e.get("duration") or 0) for e in items)
            verdict = hma_verdict(connector, items).split(" ", 1)[0]
            lines.append(f"| {connector} | {'yes' if declares_hma(items) else 'no'} | {_profile(items)} | "
                         f"{counts['passed']} | {counts['failed'] + counts['error']} | {counts['n/a']} | "
                         f"{counts['inconclusive']} | {counts['not run']} | {wall:.1f} | {verdict} |")
        lines += ["", "HMA verdicts (multi-group behaviour only):", ""]
        lines += [f"* {hma_verdict(c, ran[c])}" for c in connectors]
    lines += ["", "## Findings", ""]
    for title, _, connectors in _blocks(ran):
        lines += [f"### {title}", ""]
        for connector in connectors:
            lines += [f"#### {connector}", ""] + _finding_lines(connector, findings[connector])
    lines += ["## Checks that do not apply (N/A)", ""]
    for connector, items in ran.items():
        reasons: dict[str, set[str]] = defaultdict(set)
        counts: Counter = Counter()
        for e in items:
            if connector_status(e) == "n/a":
                check = str((e.get("cell") or {}).get("check", "?")).split(" ")[0]
                reason = message_for_any_cell(e["not_applicable"])
                reasons[reason].add(check)
                counts[reason] += 1
        if reasons:
            lines.append(f"* {connector}:")
            lines += [f"  * {counts[r]} cells ({', '.join(sorted(reasons[r]))}): {r}" for r, _ in counts.most_common()]
    lines += ["", "## Connectors the suite could not run here", ""]
    lines += [f"* {c}: {e['message']}" for c, e in unavailable.items()]
    return "\n".join(lines) + "\n"


def split_ran(by_connector: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """(connector -> entries of the connectors that ran, connector -> the entry whose skip says why one that could
    not run here did not: its `message` the one reason shown, its `not_applicable` record what kind), by name."""
    ran, unavailable = {}, {}
    for connector, items in sorted(by_connector.items(), key=lambda kv: kv[0].lower()):
        whole = [e for e in items if whole_connector_reason(e) is not None]
        if all(e["status"] == "skipped" for e in items) and whole:
            unavailable[connector] = min(whole, key=whole_connector_reason)
        else:
            ran[connector] = items
    return ran, unavailable


DEPLOYED_BLOCK = ("Connectors people deploy", "vLLM's storing, offloading and transfer connectors, and LMCache's.")
EXAMPLE_BLOCK = ("vLLM's example connectors", "Reference code and a benchmark stub vLLM ships to show the connector "
                 "API (`harness.targets.connector.vllm_facts.EXAMPLE_CONNECTORS`), and a MultiConnector with one as a "
                 "child (kvconform's default pairing): not connectors people deploy, so their findings stand apart.")


def _blocks(ran: dict[str, list[dict]]) -> list[tuple[str, str, list[str]]]:
    """(title, blurb, connectors) of the connectors people deploy, then of vLLM's example connectors; a block
    with no connector is left out."""
    deployed = [c for c in ran if not is_example(c.removesuffix(ENGINE_SUFFIX))]
    examples = [c for c in ran if is_example(c.removesuffix(ENGINE_SUFFIX))]
    return [(*block, names) for block, names in ((DEPLOYED_BLOCK, deployed), (EXAMPLE_BLOCK, examples)) if names]


def _finding_lines(connector: str, found: list["Finding"]) -> list[str]:
    """The Markdown lines of one connector's findings."""
    if not found:
        return ["No failing check.", ""]
    lines = []
    for finding in found:
        known = finding.known
        head = (f"**{known.root}** ({known.verdict})" if known
                else f"**unclassified** (no reviewed entry matches its cause key `{finding.key}`)")
        if known and connector.startswith("MultiConnector[") and known.connector != "MultiConnector":
            head += f", in its {known.connector} child"
        lines.append(f"* {head}: {finding.count} cell{'s' if finding.count != 1 else ''} "
                     f"({', '.join(finding.checks)}), e.g. `{_short(finding.example)}`.")
        if known:
            upstream = known.upstream or ("no issue found" if known.verdict == "connector bug" else "")
            lines.append(f"  {known.why[0].upper() + known.why[1:]}." + (f" Upstream: {upstream}." if upstream else ""))
    return lines + [""]


@dataclass
class Finding:
    """A connector's failing cells with one root cause: a reviewed one (`known`), else one `cause_key`."""

    known: Classified | None
    example: str
    checks: list[str]
    count: int = 0
    key: str = ""


def findings_of(connector: str, items: list[dict]) -> list[Finding]:
    """The failing cells of one connector grouped by reviewed root cause (unreviewed ones by their cause key),
    the largest first."""
    found: dict[str, Finding] = {}
    for entry in items:
        if entry["status"] not in ("failed", "error"):
            continue
        _, _, cause = split_check(_what(entry))
        check, preset, release, key_record = cell_keys(entry)
        known = classify(connector, check, key_record, preset, release)
        unclassified = "" if known else _unclassified_key(key_record)
        key = f"root:{known.root}" if known else f"cause:{unclassified}"
        finding = found.setdefault(key, Finding(known, cause, [], key=unclassified))
        finding.count += 1
        if check not in finding.checks:
            finding.checks.append(check)
    for finding in found.values():
        finding.checks.sort()
    return sorted(found.values(), key=lambda f: (-f.count, f.example))


def _unclassified_key(cause: dict) -> str:
    """How unclassified cells group: by their cause key ('no cause key recorded' when they have none)."""
    if not cause:
        return "no cause key recorded"
    return ", ".join(f"{k}={v}" for k, v in sorted(cause.items()))


def _what(entry: dict) -> str:
    from harness.failure_groups import entry_what

    return entry_what(entry)


def _cell(entry: dict) -> str:
    from harness.failure_groups import cell_name

    return cell_name(entry["id"])


def _profile(items: list[dict]) -> str:
    from harness.targets.connector.vllm_facts import KINDS

    name = vllm_connector_of(items[0])[1]
    children = name.partition("[")[2].rstrip("]").split(",") if "[" in name else [name]
    kinds = {KINDS.get(c, "stores") for c in children if c}
    return "stores" if "stores" in kinds else ", ".join(sorted(kinds))


def _short(text: str, limit: int = 220) -> str:
    text = text.replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def main(argv: list[str] | None = None) -> int:
    """Print the page for the results files given."""
    parser = argparse.ArgumentParser(prog="python -m harness.report.vllm_findings", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results files of the connector step")
    parser.add_argument("--before", default=None, help="the same step's results with the previous suite")
    args = parser.parse_args(argv)
    documents = [load_results(path) for path in args.results]
    entries = [e for document in documents for e in document.results]
    before = load_results(args.before).results if args.before else None
    sys.stdout.write(findings_markdown(entries, before, commit=documents[0].run_info.get("git_commit")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
