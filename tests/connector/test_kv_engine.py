"""`--kv-engine`: the option's usage errors, the report section that compares the two engines, and (where vLLM is
installed) the connector suite driven by vLLM's own Scheduler: a correct connector gets the same verdicts on both
engines except where reviewed data says why not, and a buggy connector is still caught."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types

import pytest

from harness.commands.merge import merge_documents
from harness.kv_engine import KVEngineError, check_kv_engine
from harness.report.build import build_document
from harness.report.engine_section import engine_sections, without_other_engines
from harness.report.markdown import render_markdown
from harness.results_model import ResultsDocument, make_entry
from tests.connector.suite_process import REPO, results_by_test, suite_command
from tests.report.synthetic import groups_record, na_record, skip_cause_record
from tests.vllm_venvs import needs_vllm as needs_vllm_reason

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason=needs_vllm_reason())


# ---- the option ------------------------------------------------------------------------------------
def test_default_and_kvconform_are_accepted():
    assert check_kv_engine(None) == "kvconform"
    assert check_kv_engine("kvconform") == "kvconform"


def test_a_bad_engine_is_one_line_naming_option_value_and_choices():
    with pytest.raises(KVEngineError) as info:
        check_kv_engine("vLLM")
    message = str(info.value)
    assert message == "--kv-engine: 'vLLM' is not an engine; accepted: kvconform, vllm"


def test_the_engine_is_validated_once_per_session(monkeypatch):
    # The checks read the engine for every test; validating it (a find_spec for vllm) is the configure's job.
    import harness.kv_engine
    from harness.plugins.connector import kv_engine

    calls = []

    def counting(value):
        calls.append(value)
        return check_kv_engine(value)

    monkeypatch.setattr(harness.kv_engine, "check_kv_engine", counting)
    config = types.SimpleNamespace(stash=pytest.Stash(),
                                   getoption=lambda name, default=None: {"kvconform_kv_engine": "kvconform"}[name])
    assert [kv_engine(config) for _ in range(3)] == ["kvconform"] * 3
    assert calls == ["kvconform"]


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is installed here: the refusal is for a Python without it")
def test_vllm_engine_without_vllm_is_a_usage_error():
    with pytest.raises(KVEngineError, match=r"^--kv-engine: 'vllm' needs vLLM installed in this Python .*; "
                                            r"accepted here: kvconform$"):
        check_kv_engine("vllm")


def test_pytest_and_report_refuse_a_bad_engine_before_running_anything(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    pytest_run = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "suites.connector", "-p", "no:cacheprovider",
                                 "--kv-engine", "nope", "--collect-only", "-q"], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=300)
    assert pytest_run.returncode == 4, pytest_run.stdout + pytest_run.stderr
    assert "--kv-engine: 'nope' is not an engine; accepted: kvconform, vllm" in pytest_run.stderr
    report_run = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--kv-engine", "nope",
                                 "--output-dir", str(tmp_path / "out")], cwd=REPO, env=env, capture_output=True,
                                text=True, timeout=300)
    assert report_run.returncode == 2, report_run.stdout + report_run.stderr
    assert report_run.stderr.strip().splitlines()[-1] == \
        "kvconform report: --kv-engine: 'nope' is not an engine; accepted: kvconform, vllm"
    assert not (tmp_path / "out").exists()


# ---- the report section (reviewed data: hand-written entries) --------------------------------------------
def _entry(check: str, preset: str, status: str, engine: str | None = None, message: str | None = None,
           evidence: str | None = None) -> dict:
    cell = {"connector": "X", "check": check, "tier": "MUST", "preset": preset}
    if engine:
        cell["engine"] = engine
    test = {"C14 round-trip-bytes": "test_c14_round_trip_bytes", "C22 failure-by-request": "test_c22_failure_by_request",
            "C26 preemption": "test_c26_preemption"}[check]
    return make_entry(nodeid=f"suites/connector/test_x.py::{test}[X-{preset}]", suite="connector", cell=cell,
                      status=status, message=message, not_applicable=na_record(status, message),
                      skip_cause=skip_cause_record(status, message),
                      extra={"description": "d", "evidence": evidence, **groups_record(preset)})


def _runs() -> tuple[ResultsDocument, ResultsDocument]:
    ours = ResultsDocument(run_info={"kvconform_version": "1"}, results=[
        _entry("C14 round-trip-bytes", "fa+swa", "passed"),
        _entry("C22 failure-by-request", "fa+swa", "passed"),
        _entry("C26 preemption", "fa+swa", "passed"),
    ])
    theirs = ResultsDocument(run_info={"kvconform_version": "1", "kv_engine": "vllm"}, results=[
        _entry("C14 round-trip-bytes", "fa+swa", "passed", "vllm"),
        _entry("C22 failure-by-request", "fa+swa", "failed", "vllm",
               evidence="C22 [fa+swa]: vLLM's scheduler refused what the connector reported"),
        _entry("C26 preemption", "fa+swa", "skipped", "vllm",
               message="N/A: under --kv-engine vllm: vLLM's scheduler admitted none of the 2 waiting requests"),
    ])
    return ours, theirs


def test_both_engines_merge_without_colliding_and_the_run_info_names_them():
    merged = merge_documents([("ours.json", _runs()[0]), ("theirs.json", _runs()[1])])
    assert len(merged.results) == 6
    assert merged.run_info["kv_engine"] == "mixed"


def test_the_section_lists_the_disagreement_and_counts_what_vllm_cannot_express():
    merged = merge_documents([("ours.json", _runs()[0]), ("theirs.json", _runs()[1])])
    assert len(engine_sections(merged.results)) == 1
    text = render_markdown(build_document(merged))
    section = text.split("## kvconform's engine and vLLM's scheduler")[1]
    rows = [" ".join(line.split()) for line in section.splitlines() if line.startswith("| X")]
    assert rows == ["| X | C22 failure-by-request | fa+swa | pass | fail | C22 [fa+swa]: vLLM's scheduler refused "
                    "what the connector reported |"]  # C14 agrees, C26 is N/A on vLLM: neither is a disagreement
    assert "X under vLLM's scheduler: 1 pass, 1 fail, 1 n/a, 0 not run" in text
    assert ("X: 1 cells N/A under --kv-engine vllm: vLLM's scheduler admitted none of the N waiting requests"
            in text)
    assert "engine kvconform, vllm" in text  # the run line


def test_vllm_engine_cells_stay_out_of_the_connector_table():
    merged = merge_documents([("ours.json", _runs()[0]), ("theirs.json", _runs()[1])])
    assert [e["cell"].get("engine") for e in without_other_engines(merged.results)] == [None] * 3
    only_ours = render_markdown(build_document(_runs()[0]))
    assert "kvconform's engine and vLLM's scheduler" not in only_ours


# ---- the suite on vLLM's scheduler -------------------------------------------------------------------
# The template class bare, as shipped: no declaration, so no profile and no backdoors (they live on its declaration;
# C08, a SHOULD that needs one, is then N/A on either engine alike).
TEMPLATE = "reference_impl.connector.template:TemplateConnector"
# Reviewed: where the template's verdict differs between the engines, and why. kvconform's engine accepts a failed
# *synchronous* load reported in failed_recving with its finished_recving (a documented deviation in
# reference_impl/engine/scheduler.py); vLLM 0.33's scheduler asserts a finished load is for a request waiting for
# one (scheduler.py `_update_from_kv_xfer_finished`), so the template's report of an injected sync-load failure
# on a multi-group model stops vLLM's scheduler.
TEMPLATE_DISAGREEMENTS = {"test_c22_failure_by_request[TemplateConnector-fa+swa]",
                          "test_c23_failure_no_partial_poison[TemplateConnector-fa+swa]"}
SELECTION = ["fa+swa] and not fa+swa+", "test_c13", "test_c21"]
# Reviewed: the cells of SELECTION the template run bare (extra config {}) does not meet because of its own profile,
# on either engine: C40 sets the size of the blocks the connector stores through the profile's block_size_option,
# which only the template's declaration names. A reason the connector's profile, declaration or release gives comes
# before the engine's (harness.outcomes.KINDS: the check context raises those before it builds an engine), so on
# vLLM's scheduler these cells say what the connector would have to declare, not that vLLM's scheduler refused
# it; the report's engine section counts only kind `engine` as what vLLM's scheduler cannot express.
TEMPLATE_PROFILE_NOT_APPLICABLE = {"test_c40_offloaded_block_multiple[TemplateConnector-4-fa+swa]",
                                   "test_c40_offloaded_block_multiple[TemplateConnector-16-fa+swa]"}


def _suite(tmp_path, name: str, connector: str, engine: str, selection: list[str]) -> dict[str, dict]:
    results = tmp_path / f"{name}-{engine}.json"
    command = suite_command(results, [connector], extra_config="{}", selection=selection, timeout=120)
    command += ["--kv-engine", engine]
    done = subprocess.run(command, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=1200)
    found = results_by_test(results)
    assert found, done.stdout[-3000:] + done.stderr[-3000:]
    return found


def _configures_only_its_own_base() -> bool:
    """Whether the installed vLLM's VllmConfig calls class-level hooks of its KVConnectorBase_V1 on the connector
    class (0.34: `kv_cache_access`), so a class not built on vLLM's base (kvconform's) cannot be configured."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

    return hasattr(KVConnectorBase_V1, "kv_cache_access")


def _verdict(entry: dict) -> str:
    """The cell's verdict from its status and its typed not-applicable record (never its message): "n/a on vllm"
    where vLLM's scheduler cannot run it (kind engine) or the release never builds the preset's layout (kind
    release), "n/a (KIND)" where the connector itself makes it not apply (its profile, its declaration: the same on
    either engine), else the status."""
    record = entry.get("not_applicable")
    if entry["status"] == "skipped" and record:
        return "n/a on vllm" if record["kind"] in ("engine", "release") else f"n/a ({record['kind']})"
    return entry["status"]


@needs_vllm
def test_the_template_connector_gets_the_same_verdicts_on_vllms_scheduler(tmp_path):
    theirs = _suite(tmp_path, "template", TEMPLATE, "vllm", SELECTION)
    by_profile = {t for t, e in theirs.items() if _verdict(e) == "n/a (profile)"}
    assert by_profile == TEMPLATE_PROFILE_NOT_APPLICABLE, {t: theirs[t].get("message") for t in by_profile}
    if _configures_only_its_own_base():
        # Nothing runs, and the cells say why: the template is not built on vLLM's base class (it imports
        # kvconform's); where a preset is N/A on vLLM's scheduler anyway (Mamba, scratch) that reason comes first,
        # and where the connector's own profile makes the check not apply, that reason does (reviewed above).
        rest = {t: e for t, e in theirs.items() if t not in TEMPLATE_PROFILE_NOT_APPLICABLE}
        assert all(_verdict(e) == "n/a on vllm" for e in rest.values()), \
            {t: (e["status"], e.get("message")) for t, e in rest.items() if _verdict(e) != "n/a on vllm"}
        assert any("class-level hook kv_cache_access" in e["message"] for e in theirs.values())
        return
    ours = _suite(tmp_path, "template", TEMPLATE, "kvconform", SELECTION)
    # A release's run adds the layouts it builds in place of presets it would not build (NAME@blockN,
    # harness.targets.connector.vllm_layouts); the Mamba ones are N/A on vLLM's scheduler like their presets.
    built = {t for t in theirs if "@block" in t}
    assert all(_verdict(theirs[t]) == "n/a on vllm" for t in built), {t: theirs[t].get("message") for t in built}
    theirs = {t: e for t, e in theirs.items() if t not in built}
    assert set(ours) == set(theirs)
    assert all(e["cell"]["engine"] == "vllm" for e in theirs.values())
    differ = {t for t in ours if _verdict(ours[t]) != _verdict(theirs[t]) and _verdict(theirs[t]) != "n/a on vllm"}
    assert differ == TEMPLATE_DISAGREEMENTS, {t: (ours[t]["status"], theirs[t].get("message")) for t in differ}
    for test in TEMPLATE_DISAGREEMENTS:
        assert "vLLM's scheduler refused what the connector reported: `assert RequestStatus.is_finished(req.status)`" \
               in theirs[test]["extra"]["evidence"]
    ran = [t for t in theirs if theirs[t]["status"] == "passed"]
    assert len(ran) >= 20, f"too few checks ran on vLLM's scheduler to compare: {sorted(ran)}"


@needs_vllm
def test_a_buggy_connector_is_still_caught_on_vllms_scheduler(tmp_path):
    if _configures_only_its_own_base():
        pytest.skip("this vLLM configures only connectors built on its KVConnectorBase_V1 (kv_cache_access); the "
                    "buggy connectors of tests/connector/buggy.py are built on kvconform's base")
    found = _suite(tmp_path, "buggy", "tests.connector.buggy:BlockIdsZeroConnector", "vllm", ["test_c17"])
    multi = {t: e for t, e in found.items() if "fa+swa]" in t}
    assert multi and all(e["status"] == "failed" for e in multi.values()), \
        {t: (e["status"], e.get("message")) for t, e in multi.items()}


@needs_vllm
def test_vllms_own_hma_connector_runs_on_vllms_scheduler(tmp_path):
    found = _suite(tmp_path, "offload", "vllm:SimpleCPUOffloadConnector", "vllm", ["test_c14"])
    [entry] = [e for t, e in found.items() if t.startswith("test_c14_round_trip_bytes[") and t.endswith(":SimpleCPUOffloadConnector-fa+swa]")]
    assert entry["status"] == "passed", entry.get("message")
