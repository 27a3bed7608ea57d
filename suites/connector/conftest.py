"""Pytest glue of the connector suite: parametrize over the selected connectors, record each check, and
enforce the per-check time limit (the check runner beside this file, `suites.connector.runner`). A hook that
hangs in two checks is given up on for the rest of the session: later checks that call it are skipped at
once, naming the hook and the check it first hung in."""

from __future__ import annotations

import pytest

from harness.failure_causes import CHECK_REPORT_ATTR, REPORT_ATTR as CAUSE_REPORT_ATTR
from harness.key_components import leaks_record
from harness.kv_engine import DEFAULT_KV_ENGINE
from harness.plugins.connector import connector_targets, kv_engine, unusable_targets
from harness.connector_checks import CHECKS
from harness.results_model import GROUPS_KEY
from reference_impl.engine.presets import get_preset
from suites.connector.catalogue import black_box_summary, check_cell
from suites.connector.context import CheckContext
from suites.connector.runner import check_evidence, run_check


def pytest_configure(config):
    config.addinivalue_line("markers", "kv_check(check_id, scenario=None): a connector conformance check of the "
                                       "catalogue; scenario names one of a check's several test functions")


def pytest_collection_finish(session):
    """Under the header: which checks decide black-box, and what the backdoors add in this run."""
    if any(item.get_closest_marker("kv_check") for item in session.items):
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(black_box_summary(session.config.getoption("kvconform_kv_connector_backdoors") != "off"))
            for target in connector_targets(session.config):
                if target.name not in unusable_targets(session.config):
                    # The profile decides which checks apply ("N/A: reason" for the others).
                    reporter.write_line(f"kv-connector profile: {target.name}: {target.profile.describe()}")


def _with_built_layouts(metafunc) -> None:
    """On a vLLM release's run, a check's preset list gains the layout the release builds in place of each preset
    it would not build (`harness.targets.connector.vllm_layouts`): the preset's own cell is N/A with the reason
    (`CheckContext`), and the built layout runs as a cell of its own."""
    if "preset" not in metafunc.fixturenames:
        return
    from harness.targets.connector.vllm_layouts import built_presets, release_of

    engine = kv_engine(metafunc.config)
    if not any(release_of(t, engine) for t in connector_targets(metafunc.config)):
        return
    marks = metafunc.definition.own_markers
    for index, mark in enumerate(marks):
        if mark.name == "parametrize" and mark.args and mark.args[0] == "preset" and "ids" not in mark.kwargs:
            presets = list(mark.args[1])
            extended = built_presets(presets)
            if extended != presets:
                marks[index] = pytest.mark.parametrize("preset", extended, **mark.kwargs).mark


@pytest.hookimpl(tryfirst=True)  # before pytest's own parametrize marks are applied (_with_built_layouts)
def pytest_generate_tests(metafunc):
    if "connector_target" in metafunc.fixturenames:
        _with_built_layouts(metafunc)
        targets = connector_targets(metafunc.config)
        unusable = unusable_targets(metafunc.config)
        if unusable and not getattr(metafunc.config, "_kvconform_load_error_shown", False):
            # One collection error for the whole suite (pytest then runs nothing), not one failure per check.
            metafunc.config._kvconform_load_error_shown = True
            pytest.fail("the connector could not be loaded: " + "; ".join(unusable.values()), pytrace=False)
        usable = [t for t in targets if t.name not in unusable]
        metafunc.parametrize("connector_target", usable, ids=[t.name for t in usable])


@pytest.fixture(scope="session", autouse=True)
def _external_servers(request):
    """Servers the suite starts for a connector under test (LMCache's MP server for vllm:LMCacheMPConnector):
    started before the first check (its start-up is not a check's time), stopped with the session; `atexit`
    in harness.targets.connector.lmcache_server covers an interrupted one."""
    from harness.targets.connector import lmcache_server

    if any("LMCacheMPConnector" in t.spec for t in connector_targets(request.config)):
        try:
            lmcache_server.shared()
        except lmcache_server.LMCacheServerError:
            pass  # every check that needs the server reports this error, with the server's log
    yield

    lmcache_server.stop_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"_kvconform_rep_{report.when}", report)
    cause = getattr(item, "_kvconform_cause", None)
    if cause and report.failed:
        setattr(report, CAUSE_REPORT_ATTR, cause)  # the console groups the failure by it (harness.plugins.console)
    marker = item.get_closest_marker("kv_check")
    if marker is not None and not report.passed:
        params = item.callspec.params if hasattr(item, "callspec") else {}
        setattr(report, CHECK_REPORT_ATTR, (marker.args[0], str(params.get("preset", "-"))))


@pytest.fixture
def ctx(connector_target, request):
    """The check's context for the parametrized connector and preset (None when preset-independent)."""
    preset = request.node.callspec.params.get("preset") if hasattr(request.node, "callspec") else None
    backdoors = request.config.getoption("kvconform_kv_connector_backdoors") != "off"
    marker = request.node.get_closest_marker("kv_check")
    context = CheckContext(connector_target, preset, backdoors=backdoors, check_id=marker.args[0] if marker else None,
                           kv_engine=kv_engine(request.config))
    yield context
    context.close()


@pytest.fixture(autouse=True)
def _record_check(request, kvconform_record):
    marker = request.node.get_closest_marker("kv_check")
    yield
    if marker is None:
        return
    check_id = marker.args[0]
    description = CHECKS[check_id].description
    params = request.node.callspec.params if hasattr(request.node, "callspec") else {}
    target = params.get("connector_target")
    rep = getattr(request.node, "_kvconform_rep_call", None) or getattr(request.node, "_kvconform_rep_setup", None)
    cell = check_cell(check_id, getattr(target, "name", "?"), params, marker.kwargs.get("scenario"))
    engine = kv_engine(request.config)
    if engine != DEFAULT_KV_ENGINE:
        cell["engine"] = engine  # a run on vLLM's scheduler merges with a kvconform-engine run without colliding
    extra = {}
    preset = params.get("preset")
    if isinstance(preset, str):
        # The report judges multi-group behaviour by this (harness.results_model.GROUPS_KEY), not by the name.
        extra[GROUPS_KEY] = len(get_preset(preset).groups)
    context = getattr(request.node, "funcargs", {}).get("ctx")
    leaks = getattr(context, "key_leaks", None)
    if leaks and rep is not None and rep.failed:
        extra["key_leak"] = leaks_record(leaks)  # which key components differed (the findings page's classification)
    cause = getattr(request.node, "_kvconform_cause", None)
    if cause and rep is not None and rep.failed:
        extra["cause"] = cause  # the failure's structured key (harness.failure_causes): what the findings classify by
    kvconform_record(
        suite="connector",
        cell=cell,
        description=description, evidence=check_evidence(rep), **extra,
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("kv_check") is None:
        return None
    run_check(pyfuncitem)
    return True
