"""docs/vllm-connectors.md's generator (`harness.report.vllm_findings`) on hand-made results: findings grouped by
reviewed root cause, classified by the structured keys of a failed cell (check id, preset or deployment variant,
release, the cause key its check recorded: `harness.failure_causes`), never by a message's words; an unreviewed
cause marked as such, the N/A reasons, the connectors that could not run, and each connector's wall time."""

from __future__ import annotations

from harness.failure_causes import cause_record
from harness.report.vllm_findings import classify, findings_markdown
from harness.results_model import make_entry
from tests.report.synthetic import groups_record, na_record, skip_cause_record


def entry(connector, check, status, preset="fa_only", message=None, evidence=None, duration=1.0, cause=None,
          release="0.33.0", **cell):
    item = make_entry(nodeid=f"suites/connector/test_x.py::test_{check}[{connector}-{preset}]", suite="connector",
                      status=status, cell={"connector": f"vllm-{release}:{connector}", "check": check, "tier": "MUST",
                                           "preset": preset, **cell},
                      message=message, not_applicable=na_record(status, message),
                      skip_cause=skip_cause_record(status, message),
                      extra={"description": "", "evidence": evidence, **groups_record(preset),
                             **({"cause": cause} if cause else {})})
    item["duration"] = duration
    return item


def raised(hook, exception, role="worker"):
    return cause_record("hook-raised", hook=hook, role=role, exception=exception)


MISSING = ("C16 [fa_only]: ExampleConnector.start_load_kv (worker role) raised FileNotFoundError: No such file or "
           "directory: /tmp/kvconform-vllm-{}/ExampleConnector/{}/model.layers.0.full.safetensors")
ENTRIES = [
    entry("ExampleConnector", "C16 ownership-fence", "failed", message=MISSING.format("ab_1", "569cbd01"),
          cause=raised("start_load_kv", "FileNotFoundError")),
    entry("ExampleConnector", "C20 loaded-groups-complete", "failed",
          message=MISSING.format("ab_1", "3b66d4ca").replace("C16", "C20"),
          cause=raised("start_load_kv", "FileNotFoundError")),
    entry("ExampleConnector", "C30 key-isolation", "failed", preset="-", variant="tp", duration=2.5,
          message="C30 [tp]: ExampleConnector.start_load_kv (worker role) raised RuntimeError: shape mismatch: value "
                  "tensor of shape [688, 2, 16] cannot be broadcast to indexing result of shape [688, 1, 16]",
          cause=cause_record("key-leak", components=["tp_size", "tp_rank"])),
    entry("ExampleConnector", "C29 empty-steps", "failed", message="C29 [fa_only]: something new went wrong",
          cause=cause_record("expectation", site="test_lifecycle.test_c29")),
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
    assert "* **keys ignore the TP size and TP rank** (connector bug): 1 cell (C30), e.g. `ExampleConnector." in page
    assert ("* **unclassified** (no reviewed entry matches its cause key `site=test_lifecycle.test_c29, "
            "tag=expectation`): 1 cell (C29), e.g. `something new went wrong`." in page), \
        "a new finding is never passed off as a known one"
    assert "  * 1 cells (C14): N/A: does not apply: it judges loaded KV bytes" in page
    assert "* NixlConnector: cannot run here: NixlConnector needs NIXL" in page


def test_the_words_of_a_message_classify_nothing():
    """A cell recorded without a cause key stays unclassified whatever its message says (results written before
    checks kept cause keys, or a failure the suite raised no key for)."""
    words = MISSING.format("ab_1", "569cbd01")
    page = findings_markdown([entry("ExampleConnector", "C16 ownership-fence", "failed", message=words)])
    assert "* **unclassified** (no reviewed entry matches its cause key `no cause key recorded`): 1 cell (C16)" in page
    assert classify("ExampleConnector", "C16", {}, "fa_only") is None


def test_a_raising_hook_is_classified_by_the_hook_and_the_exception_class():
    """ExampleConnector's start_load_kv raising FileNotFoundError is the lookup/load key mismatch; a RuntimeError
    of the same hook is the chunked-prefill truncation only on the checks that meet it, and another hook's
    FileNotFoundError is not passed off as either."""
    known = classify("ExampleConnector", "C16", raised("start_load_kv", "FileNotFoundError"), "fa_only")
    assert known is not None and known.root == "lookup and load keys disagree"
    chunked = classify("ExampleConnector", "C26", raised("start_load_kv", "RuntimeError"), "fa_only")
    assert chunked is not None and chunked.root == "chunked prefill stores a truncated file"
    assert classify("ExampleConnector", "C14", raised("start_load_kv", "RuntimeError"), "fa_only") is None
    assert classify("ExampleConnector", "C16", raised("save_kv_layer", "FileNotFoundError"), "fa_only") is None


def test_a_multiconnector_cell_takes_its_childs_reviewed_findings_only():
    """A MultiConnector cell is classified by a child's entry only when that child is one of its children."""
    cause = raised("start_load_kv", "FileNotFoundError")
    known = classify("MultiConnector[ExampleConnector,OffloadingConnector]", "C16", cause, "fa_only")
    assert known is not None and known.connector == "ExampleConnector"
    assert classify("MultiConnector[SimpleCPUOffloadConnector,OffloadingConnector]", "C16", cause, "fa_only") is None
    assert classify("ExampleConnectorV2", "C16", cause, "fa_only") is None, "a name is matched whole, not as a substring"


def test_decode_bench_fill_over_the_local_hit_is_its_own_finding_not_example_connectors():
    """The same cause key in DecodeBenchConnector (vLLM 0.24-0.28: the fill starts at the request's first block) and
    ExampleConnector (the load ignores num_computed_tokens) is two reviewed root causes, one per connector."""
    cause = cause_record("local-hit-overwritten")
    bench = classify("DecodeBenchConnector", "C19", cause, "fa_only")
    example = classify("ExampleConnector", "C19", cause, "fa_only")
    assert bench is not None and bench.root.startswith("the fill starts at the request's first block")
    assert example is not None and example.root == "loads overwrite the local prefix-cache hit"
    assert classify("DecodeBenchConnector", "C16", cause, "fa_only") is None


def test_a_release_scoped_finding_matches_that_release_only():
    """lmcache 0.5.6 reading the field vLLM 0.34.0 removed is a finding on 0.34.0; the same hook raising the same
    class on 0.33.0 is something else, unclassified."""
    cause = raised("build_connector_meta", "AttributeError", role="scheduler")
    known = classify("LMCacheMPConnector", "C14", cause, "fa_only", "0.34.0")
    assert known is not None and known.root == "lmcache 0.5.6 reads a field vLLM 0.34.0 removed"
    assert classify("LMCacheMPConnector", "C14", cause, "fa_only", "0.33.0") is None


def test_vllm_030s_offloading_construction_assert_is_classified_on_the_scratch_preset_only():
    """vLLM 0.30.0's OffloadingConnector asserts a non-cacheable group is full attention while building its
    scheduler role: that cause is the finding on scratch_group, and an AssertionError on any other preset, or
    another exception on scratch_group, stays unclassified."""
    cause = cause_record("raised", exception="AssertionError", module="vllm.distributed.kv_transfer")
    known = classify("OffloadingConnector", "C04", cause, "scratch_group")
    assert known is not None and known.verdict == "connector bug" and "offloading/config.py:36-38" in known.why
    assert classify("OffloadingConnector", "C04", cause, "fa_only") is None
    assert classify("SimpleCPUOffloadConnector", "C04", cause, "scratch_group") is None
    assert classify("OffloadingConnector", "C04", dict(cause, exception="KeyError"), "scratch_group") is None


def test_an_exact_multiple_prompt_stored_one_block_short_is_example_connectors_c39_finding():
    """C39 on vLLM's ExampleConnector (measured on 0.14.0): the reviewed off-by-one of its store key; the same cause
    key from another check or connector is not passed off as it."""
    cause = cause_record("exact-multiple-short")
    known = classify("ExampleConnector", "C39", cause, "fa_only")
    assert known is not None and known.root == "an exact-multiple prompt is stored one block short"
    assert classify("ExampleConnector", "C14", cause, "fa_only") is None
    assert classify("OffloadingConnector", "C39", cause, "fa_only") is None


def test_a_key_leak_is_classified_by_its_components():
    """A key leak is classified by the components it names: the reviewed LMCache LoRA finding takes a LoRA leak, a
    salt leak of the same connector stays unclassified, and ExampleConnector's tokens-only keys take a leak of any
    of their components."""
    lora = cause_record("key-leak", components=["lora"])
    known = classify("LMCacheMPConnector", "C30", lora, "fa_only")
    assert known is not None and known.root == "keys ignore the LoRA adapter" and known.verdict == "connector bug"
    assert classify("LMCacheMPConnector", "C30", cause_record("key-leak", components=["cache_salt"]), "fa_only") is None
    assert classify("LMCacheMPConnector", "C14", lora, "fa_only") is None
    example = classify("ExampleConnector", "C30", cause_record("key-leak", components=["model"]), "model")
    assert example is not None and example.root == "keys ignore the cache salt, LoRA adapter, model name and KV dtype"
    tp = classify("ExampleConnector", "C34", cause_record("key-leak", components=["tp_rank"]), "fa_only")
    assert tp is not None and tp.root == "keys ignore the TP size and TP rank"


def test_a_cell_recorded_with_only_a_key_leak_record_is_that_key_leak():
    """Results written before checks kept cause keys still name their leaked components (`key_leak`)."""
    item = entry("LMCacheMPConnector", "C30 key-isolation", "failed",
                 message="C30 [fa_only]: keys ignore the LoRA adapter: hit 768 tokens; stored under {...}")
    item["extra"]["key_leak"] = {"components": ["lora"], "cause": "keys ignore the LoRA adapter"}
    assert "* **keys ignore the LoRA adapter** (connector bug): 1 cell (C30)" in findings_markdown([item])


def test_every_cause_a_check_names_is_in_the_vocabulary():
    """Every `cause=` tag written in the connector suite's source is a name of `harness.failure_causes.CAUSES`
    (a typo would raise only when the check fails), and every reviewed finding names causes of it."""
    import ast
    from pathlib import Path

    from harness.failure_causes import CAUSES
    from harness.report.vllm_findings import CLASSIFIED

    named = set()
    for path in (Path(__file__).resolve().parents[2] / "suites" / "connector").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "cause":
                named |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    assert named and named <= set(CAUSES), sorted(named - set(CAUSES))
    assert {c for e in CLASSIFIED for c in e.causes} <= set(CAUSES)


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
