"""docs/vllm-connectors.md's generator (`harness.report.vllm_findings`) on hand-made results: findings grouped by
reviewed root cause with their classification and upstream issue, an unreviewed cause marked as such, the N/A
reasons, the connectors that could not run, and each connector's wall time."""

from __future__ import annotations

from harness.report.vllm_findings import findings_markdown
from harness.results_model import make_entry
from tests.report.synthetic import na_record


def entry(connector, check, status, preset="fa_only", message=None, evidence=None, duration=1.0):
    item = make_entry(nodeid=f"suites/connector/test_x.py::test_{check}[{connector}-{preset}]", suite="connector",
                      status=status, cell={"connector": f"vllm-0.33.0:{connector}", "check": check, "tier": "MUST",
                                           "preset": preset},
                      message=message, not_applicable=na_record(status, message),
                      extra={"description": "", "evidence": evidence})
    item["duration"] = duration
    return item


MISSING = ("C16 [fa_only]: ExampleConnector.start_load_kv (worker role) raised FileNotFoundError: No such file or "
           "directory: /tmp/kvconform-vllm-{}/ExampleConnector/{}/model.layers.0.full.safetensors")
ENTRIES = [
    entry("ExampleConnector", "C16 ownership-fence", "failed", message=MISSING.format("ab_1", "569cbd01")),
    entry("ExampleConnector", "C20 loaded-groups-complete", "failed",
          message=MISSING.format("ab_1", "3b66d4ca").replace("C16", "C20")),
    entry("ExampleConnector", "C30 key-isolation", "failed", preset="tp", duration=2.5,
          message="C30 [tp]: ExampleConnector.start_load_kv (worker role) raised RuntimeError: shape mismatch: value "
                  "tensor of shape [688, 2, 16] cannot be broadcast to indexing result of shape [688, 1, 16]"),
    entry("ExampleConnector", "C29 empty-steps", "failed", message="C29 [fa_only]: something new went wrong"),
    entry("ExampleConnector", "C14 round-trip-bytes", "passed"),
    entry("ExampleConnector", "C14 round-trip-bytes", "skipped", preset="fa+swa",
          message="not HMA-capable: ExampleConnector does not declare SupportsHMA, so vLLM refuses it on the "
                  "multi-group preset fa+swa"),
    entry("DecodeBenchConnector", "C14 round-trip-bytes", "skipped",
          message="N/A: C14 does not apply: it judges loaded KV bytes against what was stored, and a 'fills dummy "
                  "KV' connector loads no stored KV"),
    entry("DecodeBenchConnector", "C16 ownership-fence", "passed", duration=0.5),
    entry("NixlConnector", "C14 round-trip-bytes", "skipped", message="cannot run here: NixlConnector needs NIXL"),
]


def test_findings_page():
    page = findings_markdown(ENTRIES)
    assert "4 failing cells in 3 findings (root causes) over 2 connectors that ran; 1 connectors could not run" in page
    assert "| ExampleConnector | no | stores | 1 | 4 | 1 | 0 | 0 | 7.5 | ➖ |" in page, "wall time: every cell's duration"
    assert "| DecodeBenchConnector | yes | dummy | 1 | 0 | 1 | 0 | 0 | 1.5 | ❔ |" in page
    assert "* **lookup and load keys disagree** (connector bug): 2 cells (C16, C20), e.g. `ExampleConnector." in page
    # the same message shape as the chunked-prefill bug, told apart by its check
    assert "* **keys ignore the TP size and TP rank** (connector bug): 1 cell (C30), e.g. `ExampleConnector." in page
    assert ("* **unclassified** (no reviewed entry matches): 1 cell (C29), e.g. `something new went wrong`."
            in page), "a new finding is never passed off as a known one"
    assert "  * 1 cells (C14): N/A: does not apply: it judges loaded KV bytes" in page
    assert "* NixlConnector: cannot run here: NixlConnector needs NIXL" in page


def test_a_classification_scoped_to_a_preset_matches_only_there():
    """OffloadingConnector's 'no hit' on the three-group preset is the reviewed Mamba/sliding-window finding; the
    same words on another preset are a new, unclassified finding, never passed off as the known one."""
    from harness.report.vllm_findings import classify

    cause = "the connector reported no hit for a prompt it had just stored — while: round trip"
    known = classify("OffloadingConnector", "C14", cause, "fa+swa+mamba")
    assert known is not None and known.root == "on full attention + sliding window + Mamba no prompt ever hits"
    assert classify("OffloadingConnector", "C14", cause, "fa+swa") is None


def test_decode_bench_fill_over_the_local_hit_is_its_own_finding_not_example_connectors():
    """The same first line in DecodeBenchConnector (vLLM 0.24-0.28: the fill starts at the request's first block) and
    ExampleConnector (the load ignores num_computed_tokens) is two reviewed root causes, one per connector."""
    from harness.report.vllm_findings import classify

    cause = "the load wrote a block of the local prefix hit: ['rank 0 layer model.layers.0.full block 69']"
    bench = classify("DecodeBenchConnector", "C19", cause, "fa_only")
    example = classify("ExampleConnector", "C19", cause, "fa_only")
    assert bench is not None and bench.root.startswith("the fill starts at the request's first block")
    assert example is not None and example.root == "loads overwrite the local prefix-cache hit"
    assert classify("DecodeBenchConnector", "C16", cause, "fa_only") is None


def test_a_wrong_mamba_state_after_an_unaligned_hit_is_classified_on_the_three_group_preset_only():
    """OffloadingConnector's wrong reads on fa+swa+mamba (C10, C24) are the reviewed unaligned-hit finding; a wrong
    read on a preset without Mamba, or of another check, is not passed off as it."""
    from harness.report.vllm_findings import classify

    cause = ("the model read wrong KV — while: reloading what the re-admitted request stored: 2 reads, first: "
             "ReadError(req_id='2d8bc954a01b', layer='model.layers.4.mamba', position=-1, detail='state after 784 "
             "tokens differs (block 233)')")
    for check in ("C10", "C24"):
        known = classify("OffloadingConnector", check, cause, "fa+swa+mamba")
        assert known is not None and known.verdict == "connector bug"
        assert known.root == "a hit cut short by the sliding-window lookup is not re-aligned to a Mamba state"
    assert classify("OffloadingConnector", "C24", cause, "fa+swa") is None
    assert classify("OffloadingConnector", "C14", cause, "fa+swa+mamba") is None


def test_an_unaligned_hit_itself_is_the_same_finding_on_the_three_group_preset_only():
    """C06 sees the same root cause as the hit it judges (vLLM 0.34.0: prompt 808 hits 752, a full-attention
    chunk boundary the sliding-window lookup left unaligned to the Mamba block of 256)."""
    from harness.report.vllm_findings import classify

    cause = ("prompt 808: hit 752 is not on a Mamba state boundary (Mamba block sizes [256]): no state to restore "
             "there")
    known = classify("OffloadingConnector", "C06", cause, "fa+swa+mamba")
    assert known is not None and known.root == "a hit cut short by the sliding-window lookup is not re-aligned to a Mamba state"
    assert classify("OffloadingConnector", "C06", cause, "fa+swa") is None
    assert classify("OffloadingConnector", "C07", cause, "fa+swa+mamba") is None


def test_a_check_across_deployments_is_classified_by_the_variant_its_first_line_names():
    """C30's store shared across deployments has no preset cell ('-'): the variant in its first line ('C30 [dtype]')
    scopes the reviewed LMCache finding, and another variant's wrong read is not passed off as it."""
    wrong = ("C30 [{}]: the model read wrong KV — while: another KV dtype (float16 / bfloat16), a prompt stored by "
             "fa_only at TP=1 was run by fa_only@bf16 at TP=1 on the same store (hit 512 tokens): 4 reads")
    page = findings_markdown([entry("LMCacheMPConnector", "C30 key-isolation", "failed", preset="-",
                                    message=wrong.format("dtype")),
                              entry("LMCacheMPConnector", "C30 key-isolation", "failed", preset="-",
                                    message=wrong.format("tp"))])
    assert "* **keys ignore the KV dtype** (connector bug): 1 cell (C30)" in page
    assert "* **unclassified** (no reviewed entry matches): 1 cell (C30)" in page


def test_vllm_030s_offloading_construction_assert_is_classified_on_the_scratch_preset_only():
    """vLLM 0.30.0's OffloadingConnector asserts a non-cacheable group is full attention while building its
    scheduler role (a bare `AssertionError`, as the cells record it): that cause is the finding on scratch_group, and
    an `AssertionError` on any other preset stays unclassified."""
    from harness.report.vllm_findings import classify

    known = classify("OffloadingConnector", "C04", "AssertionError", "scratch_group")
    assert known is not None and known.verdict == "connector bug" and "offloading/config.py:36-38" in known.why
    assert classify("OffloadingConnector", "C04", "AssertionError", "fa_only") is None
    assert classify("SimpleCPUOffloadConnector", "C04", "AssertionError", "scratch_group") is None


def test_example_connectors_are_reported_in_their_own_block():
    """vLLM's example connectors (ExampleConnector, DecodeBenchConnector) and a MultiConnector with one as a child
    stand apart from the connectors people deploy: in the summary, the HMA verdicts and the findings (issue 31)."""
    page = findings_markdown(ENTRIES + [
        entry("OffloadingConnector", "C14 round-trip-bytes", "passed", preset="fa+swa"),
        entry("MultiConnector[ExampleConnector,OffloadingConnector]", "C14 round-trip-bytes", "passed")])
    summary, findings = page.split("## Findings", 1)
    deployed, examples = summary.split("### vLLM's example connectors", 1)
    assert "### Connectors people deploy" in deployed and "| OffloadingConnector | yes |" in deployed
    assert "ExampleConnector" not in deployed and "DecodeBenchConnector" not in deployed
    assert "| ExampleConnector | no |" in examples and "| DecodeBenchConnector | yes |" in examples
    assert "| MultiConnector[ExampleConnector,OffloadingConnector] |" in examples
    assert "* ✅ OffloadingConnector declares `SupportsHMA` and may" in deployed
    assert "* ➖ ExampleConnector does not declare `SupportsHMA`" in examples
    mine, theirs = findings.split("### vLLM's example connectors", 1)
    assert "#### OffloadingConnector" in mine and "#### ExampleConnector" in theirs and "#### ExampleConnector" not in mine


def test_vllm_report_section_puts_example_connectors_apart():
    """The report's per-release section: a table and verdicts for the connectors people deploy, then vLLM's
    example connectors under a heading of their own, with their own table and verdicts."""
    from harness.report.model import BulletList, Heading, Table
    from harness.report.vllm_connectors_section import vllm_connector_sections

    sections = vllm_connector_sections(ENTRIES + [entry("OffloadingConnector", "C14 round-trip-bytes", "passed",
                                                        preset="fa+swa")])
    blocks = sections[0].blocks
    apart = next(i for i, b in enumerate(blocks) if isinstance(b, Heading) and "example connectors" in b.text)
    tables = [(i, b.headers[3:]) for i, b in enumerate(blocks) if isinstance(b, Table)]
    assert [cols for i, cols in tables if i < apart] == [["OffloadingConnector"]]
    assert [cols for i, cols in tables if i > apart] == [["DecodeBenchConnector", "ExampleConnector"]]
    verdicts = [(i, b.items) for i, b in enumerate(blocks) if isinstance(b, BulletList)]
    assert all("Example" not in v and "DecodeBench" not in v for i, items in verdicts if i < apart for v in items)


def test_an_exact_multiple_prompt_stored_one_block_short_is_example_connectors_c39_finding():
    """C39 on vLLM's ExampleConnector (measured on 0.14.0): the reviewed off-by-one of its store key; the same words
    from another check or connector are not passed off as it."""
    from harness.report.vllm_findings import classify

    cause = ("a reload of a stored 512-token prompt (an exact multiple of the block size) hit 0 tokens; of a stored "
             "513-token prompt, 512: the last full block of the exact-multiple prompt was not stored")
    known = classify("ExampleConnector", "C39", cause, "fa_only")
    assert known is not None and known.root == "an exact-multiple prompt is stored one block short"
    assert classify("ExampleConnector", "C14", cause, "fa_only") is None
    assert classify("OffloadingConnector", "C39", cause, "fa_only") is None


def test_a_key_check_that_names_its_components_is_classified_by_them_not_by_its_words():
    """A cell whose check recorded the key components that differed (its `key_leak`) is classified by those: the
    reviewed LMCache LoRA finding takes a LoRA leak whatever the words, a salt leak of the same connector stays
    unclassified, and ExampleConnector's tokens-only keys take a leak of any of their components."""
    from harness.report.vllm_findings import classify

    words = "keys ignore the LoRA adapter: hit 768 tokens on objects stored under another key"
    known = classify("LMCacheMPConnector", "C30", words, "fa_only", ("lora",))
    assert known is not None and known.root == "keys ignore the LoRA adapter" and known.verdict == "connector bug"
    assert classify("LMCacheMPConnector", "C30", words, "fa_only", ("cache_salt",)) is None
    assert classify("LMCacheMPConnector", "C14", words, "fa_only", ("lora",)) is None
    example = classify("ExampleConnector", "C30", "something else entirely", "model", ("model",))
    assert example is not None and example.root == "keys ignore the cache salt, LoRA adapter, model name and KV dtype"
    tp = classify("ExampleConnector", "C34", "the model read wrong KV after a hit", "fa_only", ("tp_rank",))
    assert tp is not None and tp.root == "keys ignore the TP size and TP rank"


def test_the_findings_page_reads_a_cells_key_leak_record():
    item = entry("LMCacheMPConnector", "C30 key-isolation", "failed",
                 message="C30 [fa_only]: keys ignore the LoRA adapter: hit 768 tokens; stored under {...}")
    item["extra"]["key_leak"] = {"components": ["lora"], "cause": "keys ignore the LoRA adapter"}
    assert "* **keys ignore the LoRA adapter** (connector bug): 1 cell (C30)" in findings_markdown([item])
