"""The results file: round trip, validation of every malformed input, atomic writes."""

from __future__ import annotations

import json
import os

import pytest

from harness.atomic_write import write_files_atomic, write_text_atomic
from harness.outcomes import message_of
from harness.results_model import (ResultsDocument, ResultsFileError, cell_key, index_by_cell, load_results,
                                   make_entry, outcome_of, status_of)
from tests.report.synthetic import config_entry, outcome, run_info


def _write(tmp_path, data, name="r.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _valid() -> dict:
    return ResultsDocument(run_info=run_info(), results=[config_entry()]).to_json()


def test_round_trip_keeps_everything(tmp_path):
    document = ResultsDocument(run_info=run_info(), results=[config_entry(), config_entry(flag=True)])
    path = _write(tmp_path, document.dumps())
    loaded = load_results(path)
    assert loaded.to_json() == json.loads(document.dumps()) == document.to_json()


def test_gzip_by_name_on_write_and_by_content_on_read(tmp_path):
    """A results file is gzip-compressed where its name ends in .gz (`kvconform report` writes results.json.gz),
    with no timestamp in it (the same run, the same bytes); every reader takes either, whatever the name."""
    import gzip

    document = ResultsDocument(run_info=run_info(), results=[config_entry(), config_entry(flag=True)])
    packed = document.encode_for(tmp_path / "results.json.gz")
    assert packed[:2] == b"\x1f\x8b" and packed == document.encode_for("elsewhere/r.json.gz")
    assert gzip.decompress(packed).decode() == document.dumps() == document.encode_for("results.json")
    for name, content in [("results.json.gz", packed), ("results.json", document.dumps().encode()),
                          ("misnamed.json", packed)]:
        (tmp_path / name).write_bytes(content)
        assert load_results(tmp_path / name).to_json() == document.to_json(), name
    (tmp_path / "cut.json.gz").write_bytes(packed[: len(packed) // 2])
    with pytest.raises(ResultsFileError, match="is not a complete gzip file"):
        load_results(tmp_path / "cut.json.gz")


def test_an_empty_document_round_trips(tmp_path):
    document = ResultsDocument(run_info=run_info(), results=[])
    assert load_results(_write(tmp_path, document.dumps())).results == []


@pytest.mark.parametrize(("data", "message"), [
    ("{not json", "is not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"
     "; accepted: the results.json.gz of `kvconform report`, or the results file of `kvconform merge -o` or `pytest --kvconform-results FILE` (JSON, gzip-compressed or not)"),
    ("[]", "expected a JSON object with format 'kvconform-results', got list"
            "; accepted: the results.json.gz of `kvconform report`, or the results file of `kvconform merge -o` or `pytest --kvconform-results FILE` (JSON, gzip-compressed or not)"),
    ({"format": "pytest-json-report", "results": []},
     "not a kvconform results file (format is 'pytest-json-report', expected 'kvconform-results')"
     "; accepted: the results.json.gz of `kvconform report`, or the results file of `kvconform merge -o` or `pytest --kvconform-results FILE` (JSON, gzip-compressed or not)"),
    ({"format": "kvconform-results", "schema_version": 99, "run_info": {}, "results": []},
     "schema_version is 99 (a number); accepted: 1, 2, 3, 4 or 5 (the schemas this kvconform reads)"),
    ({"format": "kvconform-results", "run_info": {}, "results": []},
     "schema_version is missing; accepted: 1, 2, 3, 4 or 5 (the schemas this kvconform reads)"),
    ({"format": "kvconform-results", "schema_version": "1", "run_info": {}, "results": []},
     "schema_version is \"1\" (a string); accepted: 1, 2, 3, 4 or 5 (the schemas this kvconform reads)"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": [], "results": []},
     "run_info is [] (an array); accepted: an object describing the run"),
    ({"format": "kvconform-results", "schema_version": 1, "results": []},
     "run_info is missing; accepted: an object describing the run"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {}, "results": {}},
     "results is {} (an object); accepted: an array of test entries"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {}},
     "results is missing; accepted: an array of test entries"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {}, "runs": [], "results": []},
     "runs is [] (an array); accepted: a non-empty array of objects"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {}, "results": [7]},
     "results[0] is 7 (a number); accepted: an object"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {}, "results": [{"suite": "x", "status": "passed"}]},
     "results[0].id is missing; accepted: a string"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {}, "results": [{"id": 3, "suite": "x"}]},
     "results[0].id is 3 (a number); accepted: a string"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {},
      "results": [{"id": "t", "suite": "x", "status": "green"}]},
     "results[0].status is \"green\" (a string); accepted: passed, failed, skipped, error"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {},
      "results": [{"id": "t", "suite": "x", "status": "passed", "cell": "seed"}]},
     "results[0].cell is \"seed\" (a string); accepted: an object or null"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {},
      "results": [{"id": "t", "suite": "x", "status": "passed", "run": 3}]},
     "results[0].run is 3 (a number); accepted: an index into runs, 0 to 0"),
    ({"format": "kvconform-results", "schema_version": 1, "run_info": {},
      "results": [{"id": "t", "suite": "x", "status": "passed", "cell": ["v" * 60]}]},
     "results[0].cell is [\"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv... (an array); accepted: an object or null"),
])
def test_malformed_files_are_one_clear_error(tmp_path, data, message):
    path = _write(tmp_path, data)
    with pytest.raises(ResultsFileError) as caught:
        load_results(path)
    assert str(caught.value) == f"results file {path}: {message}"


def test_missing_directory_and_binary_files(tmp_path):
    with pytest.raises(ResultsFileError, match="no such file$"):
        load_results(tmp_path / "absent.json")
    with pytest.raises(ResultsFileError, match="is a directory, expected a JSON file$"):
        load_results(tmp_path)
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ResultsFileError, match="is not UTF-8 text$"):
        load_results(binary)


def test_missing_optional_keys_get_defaults(tmp_path):
    data = _valid()
    data["results"] = [{"id": "t", "suite": "allocator", "status": "passed"}]
    del data["runs"]
    loaded = load_results(_write(tmp_path, data))
    assert loaded.runs == [loaded.run_info]
    assert loaded.results[0] == {"id": "t", "suite": "allocator", "status": "passed", "run": 0, "cell": None,
                                 "params": {}, "expected": None, "actual": None, "message": None,
                                 "not_applicable": None, "skip_cause": None, "duration": 0.0, "extra": {}}


def test_make_entry_rejects_unknown_status():
    with pytest.raises(ValueError, match="status 'green' is not one of passed, failed, skipped, error"):
        make_entry(nodeid="t", suite="x", status="green")


def test_cell_identity_and_outcome():
    a = config_entry(flag=False, actual=outcome(resolved=True))
    b = config_entry(flag=False, actual=dict(outcome(resolved=True), id="other id"))
    assert cell_key(a) == cell_key(b)
    assert outcome_of(a) == outcome_of(b), "the case id inside an outcome is not part of the outcome"
    assert cell_key(a) != cell_key(config_entry(flag=True))
    plain = make_entry(nodeid="tests/test_x.py::test_y", suite="tests", status="passed")
    assert cell_key(plain) == "tests:tests/test_x.py::test_y"


def test_index_prefers_an_entry_that_ran_over_a_skipped_one():
    skipped = config_entry(status="skipped", message="needs CUDA")
    ran = config_entry(status="passed")
    assert index_by_cell([skipped, ran])[cell_key(ran)] is ran
    assert index_by_cell([ran, skipped])[cell_key(ran)] is ran


def test_index_prefers_a_failing_entry_over_a_passing_twin():
    # Two tests recording one cell (a results file of a kvconform before the connector suite's scenario cells):
    # the passing one sorted first and `kvconform diff` read "No cell changed" over the other's regression.
    passed = config_entry(status="passed")
    failed = config_entry(status="failed", message="C24 [fa+swa]: the model read wrong KV")
    error = config_entry(status="error", message="error in setup")
    assert index_by_cell([passed, failed])[cell_key(passed)] is failed
    assert index_by_cell([failed, passed])[cell_key(passed)] is failed
    assert index_by_cell([failed, error, passed])[cell_key(passed)] is error


def test_atomic_write_replaces_in_one_step_and_leaves_no_temp(tmp_path):
    target = tmp_path / "report.md"
    target.write_text("old")
    write_text_atomic(target, "new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_umask()), "reports get the usual permissions"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_failed_multi_file_write_changes_nothing(tmp_path):
    first, second = tmp_path / "a.md", tmp_path / "missing-folder" / "b.html"
    first.write_text("old a")
    with pytest.raises(FileNotFoundError):
        write_files_atomic({first: "new a", second: "new b"})
    assert first.read_text() == "old a", "no file is replaced unless every file was written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md"], "temporary files are removed"


def _skip(message: str, suite: str = "connector", **extra) -> dict:
    return {"id": f"t{abs(hash(message))}", "suite": suite, "status": "skipped", "message": message, **extra}


def test_a_schema_1_file_gets_the_typed_records_its_skip_messages_imply(tmp_path):
    """Results written before skips carried their record (schema 1) render as ever: each N/A wording of then is
    read back once, on load, as its typed record."""
    data = {**_valid(), "schema_version": 1, "results": [
        _skip("N/A: C14 does not apply: it judges loaded KV bytes"),
        _skip("N/A: declares SupportsHMA, refuses multi-group models on this configuration: one group only"),
        _skip("N/A: under --kv-engine vllm: vLLM's scheduler gives a scratch group no blocks"),
        _skip("N/A on 0.13.0: KVConnectorOutput has no failed_recving", suite="allocator"),
        _skip("not HMA-capable: X does not declare SupportsHMA"),
        _skip("not applicable: backdoors are off"),
        _skip("not applicable: vLLM is not importable in this environment", suite="benchmark"),
        _skip("inconclusive: the preemption scenario did not occur"),
        {"id": "p", "suite": "connector", "status": "passed"},
        _skip("not HMA-capable: X does not declare SupportsHMA, so vLLM refuses it on the multi-group preset fa+swa"),
        _skip("cannot run here: X needs CUDA (its worker); no CUDA device is visible"),
    ]}
    loaded = load_results(_write(tmp_path, data)).results
    na = dict(release=None, refuses=None, check=None, preset=None)
    assert [e["not_applicable"] for e in loaded] == [
        {**na, "kind": "profile", "reason": "does not apply: it judges loaded KV bytes", "check": "C14"},
        {**na, "kind": "profile", "reason": "one group only", "refuses": "multi_group"},
        {**na, "kind": "engine", "reason": "vLLM's scheduler gives a scratch group no blocks"},
        {**na, "kind": "release", "reason": "KVConnectorOutput has no failed_recving", "release": "0.13.0"},
        {**na, "kind": "declaration", "reason": "X does not declare SupportsHMA"},
        {**na, "kind": "feature", "reason": "backdoors are off"},
        None, None, None,
        {**na, "kind": "declaration", "reason": "X does not declare SupportsHMA, so vLLM refuses it", "preset": "fa+swa"},
        None,
    ]
    # The skips of no N/A kind get the typed cause their wording implies (schemas 1 and 2).
    assert [e["skip_cause"] for e in loaded] == [None] * 6 + [
        {"kind": "cannot-run-here", "reason": "vLLM is not importable in this environment", "needs": "package",
         "packages": ["vllm"]},
        {"kind": "inconclusive", "reason": "the preemption scenario did not occur", "needs": None, "packages": []},
        None, None,
        {"kind": "cannot-run-here", "reason": "X needs CUDA (its worker); no CUDA device is visible", "needs": "cuda",
         "packages": []},
    ]
    # Each record gives back the message it was read from.
    assert all(message_of(**e["not_applicable"]) == e["message"] for e in loaded if e["not_applicable"])


def test_a_schema_2_file_is_read_by_its_records_not_its_messages(tmp_path):
    data = {**_valid(), "schema_version": 2, "results": [
        _skip("N/A: worded like an N/A, recorded as a plain skip"),
        _skip("a new wording", not_applicable={"kind": "engine", "reason": "C37 r", "release": None, "refuses": None}),
        _skip("inconclusive: no hit", not_applicable=None)]}
    loaded = load_results(_write(tmp_path, data)).results
    assert [status_of(e) for e in loaded] == ["skipped", "not applicable", "skipped"]
    assert loaded[1]["not_applicable"] == {"kind": "engine", "reason": "r", "release": None, "refuses": None,
                                           "check": "C37", "preset": None}, "the check id kept apart, as now"
    assert [(e["skip_cause"] or {}).get("kind") for e in loaded] == [None, None, "inconclusive"]
    data["results"][1]["not_applicable"]["kind"] = "mood"
    with pytest.raises(ResultsFileError, match=r"results\[1\]\.not_applicable is .*; accepted: null or an object whose kind"):
        load_results(_write(tmp_path, data))


def test_a_schema_3_file_is_read_by_its_records_not_its_messages(tmp_path):
    data = {**_valid(), "schema_version": 3, "results": [
        _skip("inconclusive: worded like a cause, recorded as a plain skip", not_applicable=None, skip_cause=None),
        _skip("a new wording", not_applicable=None,
              skip_cause={"kind": "inconclusive", "reason": "r", "needs": None, "packages": []})]}
    assert data["schema_version"] == 3
    loaded = load_results(_write(tmp_path, data)).results
    assert [e["skip_cause"] for e in loaded] == [None, data["results"][1]["skip_cause"]]
    data["results"][1]["skip_cause"]["kind"] = "mood"
    with pytest.raises(ResultsFileError, match=r"results\[1\]\.skip_cause is .*; accepted: null or an object whose kind "
                                               r"is one of cannot-run-here, inconclusive"):
        load_results(_write(tmp_path, data))


_W_B1 = ("Turning off hybrid kv cache manager because `--kv-transfer-config` is set. This will reduce the performance "
         "... and use --no-disable-hybrid-kv-cache-manager to start vLLM.")
_E_F = "Connector ExampleConnector does not support HMA but HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`."
# One config entry's outcomes as each schema wrote them: 1 (texts, no ids), 2 and 3 (ids beside the texts), 4 (typed).
_OLDER_OUTCOMES = {
    1: {"id": "c", "resolved_disable_hma": None, "warnings": [_W_B1], "rules": ["r"], "unknown": None,
        "error": {"type": "ValueError", "message": _E_F, "stage": "create_connector"}},
    2: {"id": "c", "resolved_disable_hma": None, "warnings": [_W_B1], "warning_ids": ["W-B1"], "rules": ["r"],
        "unknown": None, "error": {"type": "ValueError", "message": _E_F, "stage": "create_connector", "id": "E-F"}},
}
_OLDER_OUTCOMES[3] = _OLDER_OUTCOMES[2]
_TYPED = {"id": "c", "resolved_disable_hma": None, "warnings": [{"id": "W-B1", "text": _W_B1}],
          "error": {"id": "E-F", "type": "ValueError", "stage": "create_connector", "text": _E_F}, "rules": ["r"],
          "unknown": None}


@pytest.mark.parametrize("schema", sorted(_OLDER_OUTCOMES))
def test_an_older_schemas_config_outcomes_load_typed_and_compare_equal(tmp_path, schema):
    """A results file written before outcomes were typed loads with its config outcomes (`actual`, and `expected` or
    the part of it a compacted entry keeps) in the typed form, so it diffs against a newer file with no change."""
    older = config_entry(stage="create_connector", actual=json.loads(json.dumps(_OLDER_OUTCOMES[schema])),
                         expected={"rules": ["oracle"], "warnings": [_W_B1]})
    data = {**ResultsDocument(run_info=run_info(), results=[older]).to_json(), "schema_version": schema}
    entry = load_results(_write(tmp_path, data)).results[0]
    assert entry["actual"] == _TYPED
    assert entry["expected"] == {"rules": ["oracle"], "warnings": [{"id": "W-B1", "text": _W_B1}]}
    newer = config_entry(stage="create_connector", actual=_TYPED)
    assert outcome_of(entry) == outcome_of(newer)


@pytest.mark.parametrize("schema", [4, 5])
def test_a_schema_4_file_is_read_as_written(tmp_path, schema):
    """The typed form is not read again: an entry of schema 4 or later keeps what its target recorded."""
    recorded = {**_TYPED, "warnings": [{"id": None, "text": _W_B1}]}  # a target that gave the warning no id
    data = {**ResultsDocument(run_info=run_info(), results=[config_entry(actual=recorded)]).to_json(),
            "schema_version": schema}
    assert load_results(_write(tmp_path, data)).results[0]["actual"] == recorded


def test_outcomes_compare_warnings_and_errors_by_their_message_ids():
    """A reworded vLLM message with the same id is the same outcome (`kvconform diff` sees no change, `merge` no
    conflict); another id is another outcome; a message without an id is compared by its words."""
    from harness.commands.diff import compute_changes

    def entry(warnings, error=None):
        actual = {"id": "x", "resolved_disable_hma": True, "warnings": warnings, "error": error, "rules": [],
                  "unknown": None}
        return config_entry(flag=None, actual=actual)

    said = entry([{"id": "W-A1", "text": "Turning off hybrid kv cache manager because `--kv-transfer-config` is set."}])
    reworded = entry([{"id": "W-A1", "text": "HMA off because `--kv-transfer-config` is set."}])
    other = entry([{"id": "W-C1", "text": "Turning off hybrid kv cache manager because `--kv-transfer-config` is set."}])
    assert outcome_of(said) == outcome_of(reworded)
    assert compute_changes([said], [reworded]) == []
    assert outcome_of(said) != outcome_of(other)
    assert [kind for kind, *_ in compute_changes([said], [other])] == ["changed"]
    assert outcome_of(entry([{"id": None, "text": "a"}])) != outcome_of(entry([{"id": None, "text": "b"}]))
    error = {"id": "E-C", "type": "ValueError", "stage": "config", "text": "explicitly enabled but is not supported"}
    assert outcome_of(entry([], error)) == outcome_of(entry([], dict(error, text="now said otherwise")))
    assert outcome_of(entry([], error)) != outcome_of(entry([], dict(error, stage="create_connector")))


def _ordering_entry(run: int, test_id: str, cell: dict | None) -> dict:
    return {"run": run, "id": test_id, "suite": "config" if cell else "allocator", "cell": cell}


def test_entries_sort_by_run_then_test_id_then_cell(monkeypatch):
    import harness.results_model as results_model

    given = [_ordering_entry(1, "a", None), _ordering_entry(0, "b", {"x": 2}), _ordering_entry(0, "b", {"x": 1}),
             _ordering_entry(0, "c", None), _ordering_entry(0, "a", {"x": 3})]
    keyed = []
    monkeypatch.setattr(results_model, "cell_key", lambda entry: keyed.append(entry["id"]) or cell_key(entry))
    ordered = results_model.sort_entries(given)
    assert [(e["run"], e["id"], (e["cell"] or {}).get("x")) for e in ordered] == [
        (0, "a", 3), (0, "b", 1), (0, "b", 2), (0, "c", None), (1, "a", None)]
    assert sorted(keyed) == ["b", "b"], "the cell decides only between entries of one run and test id"
