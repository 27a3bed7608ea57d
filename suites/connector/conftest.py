"""Pytest glue of the connector suite: parametrize over the selected connectors, record each check, and
enforce the per-check time limit. A hook that hangs in two checks is given up on for the rest of the
session: later checks that call it are skipped at once, naming the hook and the check it first hung in."""

from __future__ import annotations

import pytest

from harness.kv_engine import DEFAULT_KV_ENGINE
from harness.plugins.connector import connector_targets, kv_engine, unusable_targets
from harness.targets.connector_target import HANG_LOG, HookHung, run_with_timeout
from suites.connector.catalogue import CHECKS, TIME_LIMIT_FACTOR, black_box_summary, check_cell
from suites.connector.context import CheckContext


def pytest_configure(config):
    config.addinivalue_line("markers", "kv_check(check_id): a connector conformance check of the catalogue")


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


def pytest_generate_tests(metafunc):
    if "connector_target" in metafunc.fixturenames:
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
    in harness.targets.lmcache_server covers an interrupted one."""
    from harness.targets import lmcache_server

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
    description = CHECKS[check_id][2]
    params = request.node.callspec.params if hasattr(request.node, "callspec") else {}
    target = params.get("connector_target")
    rep = getattr(request.node, "_kvconform_rep_call", None) or getattr(request.node, "_kvconform_rep_setup", None)
    evidence = None
    if rep is not None and rep.failed:
        evidence = str(getattr(rep.longrepr, "reprcrash", None) and rep.longrepr.reprcrash.message or rep.longrepr)
        evidence = evidence.splitlines()[0][:500] if evidence else "failed"
        evidence = evidence.removeprefix("Failed: ")
    cell = check_cell(check_id, getattr(target, "name", "?"), params)
    engine = kv_engine(request.config)
    if engine != DEFAULT_KV_ENGINE:
        cell["engine"] = engine  # a run on vLLM's scheduler merges with a kvconform-engine run without colliding
    kvconform_record(
        suite="connector",
        cell=cell,
        description=description, evidence=evidence,
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("kv_check") is None:
        return None
    funcargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    timeout = pyfuncitem.config.getoption("kvconform_kv_connector_timeout")
    timeout *= TIME_LIMIT_FACTOR.get(pyfuncitem.get_closest_marker("kv_check").args[0], 1)
    context = funcargs.get("ctx")
    if context is not None and context.load_error:
        pytest.fail(context.load_error, pytrace=False)
    state = context.state if context is not None else {}
    target = context.target.name if context is not None else None
    check_id = pyfuncitem.get_closest_marker("kv_check").args[0]
    if target is not None:
        state["hung"] = HANG_LOG.hung(target)  # hooks that hung twice stop this check at once (HookHung)
    failure = skipped = None
    try:
        run_with_timeout(lambda: pyfuncitem.obj(**funcargs), timeout, state)
    except HookHung as exc:
        skipped = str(exc)
    except (AssertionError, pytest.fail.Exception) as exc:
        failure = summarised(pyfuncitem, exc)
        if target is not None and state.get("timed_out_in"):
            HANG_LOG.record(target, state["timed_out_in"], check_id)
    if skipped is not None:
        pytest.skip(skipped)
    if failure is not None:  # raised outside the except block: no chained traceback in the report
        pytest.fail(failure, pytrace=False)
    return True


def summarised(item, exc: BaseException) -> str:
    """"C07 [fa+swa]: <first line of evidence>", then the full evidence (one line per failing check). The label
    in brackets is the cell's id less the connector's (its preset, and any other parameter, e.g. "tp")."""
    check_id = item.get_closest_marker("kv_check").args[0]
    preset = "-"
    if hasattr(item, "callspec"):
        name = getattr(item.callspec.params.get("connector_target"), "name", "")
        cell = item.callspec.id
        preset = cell[len(name) + 1:] if name and cell.startswith(name + "-") else item.callspec.params.get("preset", "-")
    message = str(getattr(exc, "msg", None) or exc) or type(exc).__name__
    first, _, rest = message.strip().partition("\n")
    return f"{check_id} [{preset}]: {first}" + (f"\n{rest}" if rest else "")
