"""Whether a cell failing in two runs failed the same way (`harness.failure_groups.same_failure`, what `kvconform
diff` calls unchanged) is decided by the failure's typed facts where the entries carry them, never by their words
(issue 33): a connector check's recorded cause (`harness.failure_causes`), a config cell's expected and actual
outcomes by their message ids. A reworded message with the same facts is the same failure; another id, with the
very same words, is another. Only where an entry carries no typed fact (an allocator assertion, a results file
written before checks kept causes) does the message's first line decide. Inputs and expected verdicts are
hand-written."""

from __future__ import annotations

import json

from harness.cli import main
from harness.failure_groups import failure_signature, same_failure
from harness.results_model import ResultsDocument, make_entry
from tests.report.synthetic import config_entry, outcome, run_info

HOOK_RAISED = {"tag": "hook-raised", "hook": "start_load_kv", "role": "worker", "exception": "RuntimeError"}


def _connector(message: str, cause: dict | None, status: str = "failed") -> dict:
    """A failing connector cell as suites/connector/conftest.py records it (`cause` None: recorded without one)."""
    extra = {"description": "what it checks", "evidence": message}
    if cause is not None:
        extra["cause"] = cause
    return make_entry(nodeid="suites/connector/test_x.py::test_c42[vllm-0.33.0:ExampleConnector-fa_only]",
                      suite="connector", status=status, message=message, extra=extra,
                      cell={"connector": "vllm-0.33.0:ExampleConnector", "check": "C42 in-flight-blocks-kept",
                            "tier": "MUST", "preset": "fa_only"})


def _diff(tmp_path, capsys, base: list[dict], head: list[dict]) -> dict:
    files = []
    for name, entries in (("base", base), ("head", head)):
        path = tmp_path / f"{name}.json"
        path.write_text(ResultsDocument(run_info=run_info(), results=entries).dumps())
        files.append(str(path))
    status = main(["diff", *files, "--format", "json"])
    assert status == 0, "a cell failing in both runs is never a regression"
    return json.loads(capsys.readouterr().out)["counts"]


def test_a_connector_failure_reworded_with_the_same_cause_is_the_same_failure(tmp_path, capsys):
    before = _connector("C42 [fa_only]: ExampleConnector.start_load_kv (worker role) raised RuntimeError: shape "
                        "mismatch", HOOK_RAISED)
    reworded = _connector("C42 [fa_only]: the worker's start_load_kv hook of ExampleConnector failed (RuntimeError)",
                          dict(HOOK_RAISED))
    assert same_failure(before, reworded) and failure_signature(before) == failure_signature(reworded)
    counts = _diff(tmp_path, capsys, [before], [reworded])
    assert counts["changed"] == 0 and counts["failing_in_both"] == 1, counts


def test_a_connector_failure_with_another_cause_in_the_same_words_is_another_failure(tmp_path, capsys):
    words = "C42 [fa_only]: ExampleConnector.start_load_kv (worker role) raised RuntimeError: shape mismatch"
    before = _connector(words, HOOK_RAISED)
    other_hook = _connector(words, {**HOOK_RAISED, "hook": "wait_for_save"})
    other_tag = _connector(words, {"tag": "expectation", "site": "test_async_scheduling.test_c42_in_flight_blocks_kept"})
    for after in (other_hook, other_tag):
        assert not same_failure(before, after)
        assert _diff(tmp_path, capsys, [before], [after])["changed"] == 1


def _torch_refusal(value_dtype, rows: int) -> BaseException:
    """What torch raises when a load copies `rows` rows of `value_dtype` into a 2-row bfloat16 slot of the cache."""
    import torch

    cache = torch.zeros(8, 2, dtype=torch.bfloat16)
    try:
        cache[torch.tensor([1, 2])] = torch.zeros(rows, 2, dtype=value_dtype)
    except RuntimeError as exc:
        return exc
    raise AssertionError("torch copied it")


def test_a_wrong_dtype_and_a_wrong_shape_in_one_hook_are_two_failures(tmp_path, capsys):
    """C14 on 0.34.0: ExampleConnector's load of another dtype's file and of a shorter file both raise RuntimeError
    in start_load_kv; the guard's record tells them apart (`hook_raised`), so the diff sees one turn into the other."""
    import torch

    from harness.failure_causes import hook_raised
    from harness.failure_groups import group_entries

    dtype, shape = _torch_refusal(torch.float16, 2), _torch_refusal(torch.bfloat16, 3)
    assert hook_raised("start_load_kv", "worker", dtype)["tensor"] == "dtype-mismatch"
    assert hook_raised("start_load_kv", "worker", shape)["tensor"] == "shape-mismatch"
    assert "tensor" not in hook_raised("start_load_kv", "worker", FileNotFoundError("model.layers.0.full"))
    before = _connector(f"C42 [fa_only]: raised RuntimeError: {dtype}", hook_raised("start_load_kv", "worker", dtype))
    after = _connector(f"C42 [fa_only]: raised RuntimeError: {shape}", hook_raised("start_load_kv", "worker", shape))
    assert not same_failure(before, after)
    assert _diff(tmp_path, capsys, [before], [after])["changed"] == 1
    assert len(group_entries([before, dict(after, id=after["id"] + "#1")])) == 2
    # a run recorded before the guard typed torch's refusals (no "tensor") is the same failure as either
    old = _connector(f"C42 [fa_only]: raised RuntimeError: {dtype}", dict(HOOK_RAISED))
    assert same_failure(old, before) and same_failure(after, old)
    assert _diff(tmp_path, capsys, [old], [before])["changed"] == 0


def test_without_a_recorded_cause_the_first_line_decides():
    """An entry from before checks kept causes: its words, ids and numbers taken out, as before."""
    old = _connector("C05 [fa_only]: a 703-token prompt hit 256 tokens, expected 512 (req 4f3a9c21d0e8)", None)
    same = _connector("C05 [fa_only]: a 903-token prompt hit 512 tokens, expected 768 (req 9b2e7d41aa03)", HOOK_RAISED)
    other = _connector("C05 [fa_only]: the model read wrong KV at block 7", HOOK_RAISED)
    assert same_failure(old, same) and not same_failure(old, other), "one side untyped: both by their first line"


def _config(expected: dict, actual: dict, message: str) -> dict:
    return config_entry(status="failed", expected=expected, actual=actual, message=message)


def _refusal(flag: str) -> dict:
    """vLLM's refusal of an explicit HMA enable, as the release spelling `flag` words it (E-B, E-C)."""
    return {"type": "ValueError", "stage": "config",
            "text": f"Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. "
                    f"Drop {flag}."}


def test_a_config_failure_is_keyed_on_its_outcomes_message_ids_not_its_explanation(tmp_path, capsys):
    expected = outcome(resolved=False, error=_refusal("--no-disable-hybrid-kv-cache-manager"))
    actual = outcome(resolved=False)
    assert expected["error"]["id"] == "E-B"
    before = _config(expected, actual, "expected an error, got none (rule R2)")
    reworded = _config(expected, actual, "the target raised no error where the spec raises one (rule R2)")
    assert same_failure(before, reworded)
    counts = _diff(tmp_path, capsys, [before], [reworded])
    assert counts["changed"] == 0 and counts["failing_in_both"] == 1, counts
    # the oracle now expects another error (E-C, the 0.33 spelling) and the explanation reads the very same
    other = outcome(resolved=False, error=_refusal("--enable-hybrid-kv-cache-manager"))
    assert other["error"]["id"] == "E-C"
    after = _config(other, actual, "expected an error, got none (rule R2)")
    assert not same_failure(before, after)
    assert _diff(tmp_path, capsys, [before], [after])["changed"] == 1


def test_a_config_message_without_an_id_is_keyed_on_its_text():
    expected = outcome(resolved=False)
    actual = outcome(resolved=False, warnings=["a warning no declared message matches"])
    assert actual["warnings"][0]["id"] is None
    moved = outcome(resolved=False, warnings=["another undeclared warning"])
    assert not same_failure(_config(expected, actual, "x"), _config(expected, moved, "x"))


def test_identical_runs_of_every_kind_are_the_same_failure(tmp_path, capsys):
    entries = [_connector("C42 [fa_only]: raised", HOOK_RAISED),
               _config(outcome(resolved=True), outcome(resolved=False), "expected HMA on, got off"),
               make_entry(nodeid="suites/allocator/test_x.py::test_y", suite="allocator", status="failed",
                          cell={"target": "reference", "scenario": "test_y", "section": "3"},
                          message="AssertionError: assert 3 == 4")]
    assert all(same_failure(entry, entry) for entry in entries)
    counts = _diff(tmp_path, capsys, entries, entries)
    assert counts["changed"] == 0 and counts["failing_in_both"] == 3, counts
