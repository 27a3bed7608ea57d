"""Per-test result records and their collection into one results file (`--kvconform-results PATH`).

A suite test calls ``kvconform_record(suite=..., cell={...}, expected=..., actual=..., **extra)``; the record
travels with the test's report (``user_properties``) and the collector below turns every test into one entry
of the results file (see `harness.results_model`).

Under pytest-xdist every worker keeps its own entries and hands them to the controller through
``config.workeroutput`` when its session finishes; the controller gathers them in ``pytest_testnodedown``.
No temporary files are shared between processes. Without xdist the entries are collected directly.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from _pytest import junitxml  # xml_key: where pytest keeps the JUnit writer of a session

from harness.plugins.activation import SUITES_DIR, SUITES_PACKAGE, TARGET_ENV
from harness.atomic_write import ensure_writable_dir, write_text_atomic
from harness.portable_paths import portable_path, portable_text
from harness.outcomes import (CONNECTOR_CLASS_ATTR, REPORT_ATTR as NA_REPORT_ATTR, SKIP_CAUSE_ATTR, connector_class_of,
                              record_of, skip_cause_of)
from harness.results_model import ResultsDocument, make_entry, sort_entries
from harness.run_info import collect_run_info, utc_now_iso

RECORD_KEY = "kvconform"
COLLECTOR_NAME = "kvconform-results-collector"
WORKEROUTPUT_KEY = "kvconform_results"
OUTER_KEY = "kvconform_outer_items"  # a worker's items whose verdict is their inner tests' (`record_inner_report`)
_RUN_INFO_KEY = pytest.StashKey[dict]()
_MESSAGE_LIMIT = 2000


def record_on(item: pytest.Item, *, suite: str, cell: dict, expected=None, actual=None, **extra) -> None:
    """Attach one structured record (JSON-serialisable) to `item`'s report (an item of its own that uses no
    fixtures, like a config matrix cell, records with this; a test function with the fixture below)."""
    payload = {"suite": suite, "cell": dict(cell), "expected": expected, "actual": actual}
    payload.update(extra)
    item.user_properties.append((RECORD_KEY, payload))


@pytest.fixture
def kvconform_record(request):
    """Attach one structured record (JSON-serialisable) to the running test's report."""
    return functools.partial(record_on, request.node)


def record_inner_report(item: pytest.Item, report: pytest.TestReport, params: dict | None) -> None:
    """Hand the results file a test that ran inside `item` (a config matrix cell judged by its era's item) as the
    entry its own item would have had: `report` is the test's call-phase report, made by pytest's
    `pytest_runtest_makereport` hook for an item of its own that never ran pytest's setup or teardown, and `params`
    its parameters. `item`'s own entry is then left out: its verdict is its inner tests'. Without a results file,
    nothing."""
    collector = item.config.pluginmanager.get_plugin(COLLECTOR_NAME)
    if collector is not None:
        collector.add_inner(item.nodeid, report, params)


def results_file_written(config: pytest.Config) -> bool:
    """True when this session writes a results file (`--kvconform-results`): the only reader of the parts of a
    record that are evidence for the report rather than for the test's verdict (JUnit XML and the console leave
    them out; an xdist worker drops a passing test's records when no results file is written)."""
    return bool(config.getoption("kvconform_results", None))


def add_run_info(config: pytest.Config, **fields: Any) -> None:
    """Let another kvconform plugin add fields to the results file's run_info (e.g. the resolved target)."""
    config.stash.setdefault(_RUN_INFO_KEY, {}).update(fields)


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption(
        "--kvconform-results",
        dest="kvconform_results",
        default=None,
        metavar="PATH",
        help="write one JSON results file (all xdist workers together) to PATH, e.g. reports/results.json "
             "(gzip-compressed where PATH ends in .gz).",
    )


def _without_records(report):
    """`report` as JUnit XML should see it: without kvconform's records (a copy; the results file still reads
    them from the report itself)."""
    if not any(key == RECORD_KEY for key, _ in report.user_properties):
        return report
    shown = copy.copy(report)
    shown.user_properties = [(key, value) for key, value in report.user_properties if key != RECORD_KEY]
    return shown


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    # JUnit XML gets one <testcase> per test with its outcome and message, never the record: the full run's file
    # was 44.8 MB when every passing cell carried its record as a JSON property. The record's home is the
    # results file. pytest's junitxml writes a test's user properties in LogXML.finalize.
    xml = config.stash.get(junitxml.xml_key, None) if hasattr(junitxml, "xml_key") else None
    if xml is not None and not hasattr(config, "workerinput"):
        finalize = xml.finalize
        xml.finalize = lambda report: finalize(_without_records(report))
    path = config.getoption("kvconform_results", None)
    if not path:
        return
    if not hasattr(config, "workerinput"):
        try:
            ensure_writable_dir(Path(path).parent)
        except OSError as exc:
            raise pytest.UsageError(f"--kvconform-results {path}: cannot write there ({exc.strerror or exc})") from None
    config.pluginmanager.register(ResultsCollector(config), COLLECTOR_NAME)


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(config, report):
    """An xdist worker sends a passing report without its kvconform records when nothing on the controller
    reads them (no `--kvconform-results`; JUnit XML leaves them out): serialising the records of the config
    matrix's 17,000 passing cells was about a third of a worker's time. Failing and skipped reports keep theirs
    (the console groups failures by suite)."""
    data = yield
    if (isinstance(data, dict) and report.passed and hasattr(config, "workerinput")
            and not config.getoption("kvconform_results", None)):
        data["user_properties"] = [p for p in data.get("user_properties") or () if p[0] != RECORD_KEY]
    return data


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A kvconform suite's skip names its file by a portable path: pytest keeps the absolute path, which a plain
    `pytest --junitxml` writes into every skip's text (the CI vLLM job's JUnit files). A typed N/A
    (`harness.outcomes.not_applicable`, with the connector class it names), and a skip's typed cause
    (`harness.outcomes.skip_because`), travel on its report as their records (from an xdist worker too)."""
    report = yield
    raised = call.excinfo.value if getattr(call, "excinfo", None) is not None and report.skipped else None
    if raised is not None:
        for attr, record in ((NA_REPORT_ATTR, record_of(raised)), (SKIP_CAUSE_ATTR, skip_cause_of(raised)),
                             (CONNECTOR_CLASS_ATTR, connector_class_of(raised))):
            if record is not None:
                setattr(report, attr, record)
    if (report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3
            and suite_of_path(item.path) is not None):
        where, line, reason = report.longrepr
        report.longrepr = (portable_path(str(where)), line, reason)
    return report


#: The attribute in which an item that is not a parametrized test function (a config matrix cell) names its
#: parameters, as `parametrize` would have: the results file's `params` of its entry.
PARAMS_ATTR = "kvconform_params"


def item_params(item: pytest.Item) -> dict | None:
    """The parameters of a test: a parametrized function's, or those an item of its own names in `PARAMS_ATTR`."""
    callspec = getattr(item, "callspec", None)
    return callspec.params if callspec is not None else getattr(item, PARAMS_ATTR, None)


def _json_safe(value: Any) -> Any:
    """`value` if JSON can carry it unchanged, else its repr (parametrize values may be any object)."""
    if value is None or isinstance(value, (str, int, float)):  # what json.dumps takes as it is, without asking it
        return value
    if not isinstance(value, (dict, list, tuple)):  # what it refuses (no `default`), without raising to say so:
        return repr(value)  # each config matrix cell's parameter, its Cell
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


# Suite folders whose records use another suite name (suites/benchmarks records suite="benchmark").
_SUITE_OF_FOLDER = {"benchmarks": "benchmark"}


def suite_of_nodeid(nodeid: str) -> str:
    """'suites/config/test_x.py::t' -> 'config'; 'tests/test_y.py::t' -> 'tests'."""
    parts = nodeid.split("::", 1)[0].split("/")
    if "suites" in parts and parts.index("suites") + 1 < len(parts) - 1:
        folder = parts[parts.index("suites") + 1]
        return _SUITE_OF_FOLDER.get(folder, folder)
    return parts[0] if len(parts) > 1 else "tests"


@functools.lru_cache(maxsize=1024)
def suite_of_path(path: str | os.PathLike) -> str | None:
    """The kvconform suite of a test file by where it lies (`suites/<folder>/` of the installed package), None for
    a file elsewhere. Unlike a node id, right whatever pytest's rootdir: from a vendor's own folder,
    `pytest --pyargs suites.connector` names its tests `test_lookup.py::...`."""
    try:
        relative = Path(path).resolve().relative_to(SUITES_DIR)
    except ValueError:
        return None
    return suite_of_nodeid(f"{SUITES_PACKAGE}/{relative.as_posix()}") if len(relative.parts) > 1 else None


def failure_message(report: pytest.TestReport) -> str | None:
    """The skip reason or failure message of a report, one line per line of the original (whitespace in
    each collapsed, blank lines dropped, no absolute paths of this machine): its first line says what went
    wrong (`harness.failure_groups`)."""
    longrepr = report.longrepr
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, lineno, reason)
        text = str(longrepr[2])
        text = text.removeprefix("Skipped: ")
    else:
        crash = getattr(longrepr, "reprcrash", None)
        if crash is not None:
            text = crash.message
        else:
            lines = str(longrepr).strip().splitlines()
            text = lines[-1] if lines else ""
    if getattr(report, "wasxfail", None) is not None and report.skipped:
        text = f"xfail: {report.wasxfail or text}"
    lines = (" ".join(line.split()) for line in portable_text(str(text)).splitlines())
    return "\n".join(line for line in lines if line)[:_MESSAGE_LIMIT]


class _TestProgress:
    """The phases (setup/call/teardown) seen so far for one test."""

    __slots__ = ("status", "message", "not_applicable", "skip_cause", "duration", "properties", "params", "reports")

    def __init__(self) -> None:
        self.reports = 0
        self.status = "passed"
        self.message: str | None = None
        self.not_applicable: dict | None = None
        self.skip_cause: dict | None = None
        self.duration = 0.0
        self.properties: list = []
        self.params: dict = {}

    def add(self, report: pytest.TestReport) -> None:
        self.duration += report.duration
        self.properties = list(report.user_properties)
        self.reports += 1
        if report.failed:
            # A failing call is a failure; a failing setup or teardown is an error (as pytest counts it).
            # xdist reports a test whose worker crashed with when="???": that is a failure too.
            if report.when not in ("setup", "teardown"):
                self.status, self.message = "failed", failure_message(report)
            elif self.status != "failed":
                self.status, self.message = "error", failure_message(report)
        elif report.skipped and self.status == "passed":
            self.status, self.message = "skipped", failure_message(report)
            self.not_applicable = getattr(report, NA_REPORT_ATTR, None)
            self.skip_cause = getattr(report, SKIP_CAUSE_ATTR, None)

    def entries(self, nodeid: str) -> list[dict[str, Any]]:
        records = [payload for key, payload in self.properties if key == RECORD_KEY]
        if not records:
            return [make_entry(nodeid=nodeid, suite=suite_of_nodeid(nodeid), status=self.status,
                               params=self.params, message=self.message, not_applicable=self.not_applicable,
                               skip_cause=self.skip_cause, duration=self.duration)]
        entries = []
        for index, record in enumerate(records):
            record = dict(record)
            suite, cell = record.pop("suite"), record.pop("cell")
            expected, actual = record.pop("expected", None), record.pop("actual", None)
            entries.append(make_entry(
                nodeid=nodeid if index == 0 else f"{nodeid}#{index}",
                suite=str(suite), status=self.status, cell={str(k): _json_safe(v) for k, v in cell.items()},
                params=self.params,
                expected=_json_safe(expected), actual=_json_safe(actual), message=self.message,
                not_applicable=self.not_applicable, skip_cause=self.skip_cause, duration=self.duration, extra={k: _json_safe(v) for k, v in record.items()},
            ))
        return entries


class ResultsCollector:
    """Collects one entry per test; the controller (or a non-xdist run) writes the results file."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.path = config.getoption("kvconform_results")
        self.is_worker = hasattr(config, "workerinput")
        self.in_progress: dict[str, _TestProgress] = {}
        self.entries: list[dict[str, Any]] = []
        # Controller under xdist: entries from workers, plus reports the controller saw itself, which only
        # matter for tests whose worker crashed before it could hand over its entries.
        self.worker_entries: list[dict[str, Any]] = []
        self.workers_seen = 0
        # items whose verdict is that of the tests they ran inside them (`record_inner_report`): no entry of their own
        self.outer: set[str] = set()
        self.started_at = utc_now_iso()
        self.started = time.perf_counter()

    def _distributed_controller(self) -> bool:
        return not self.is_worker and self.config.pluginmanager.hasplugin("dsession")

    def pytest_collection_modifyitems(self, items):
        for item in items:
            params = item_params(item)
            if params:
                self.in_progress.setdefault(item.nodeid, _TestProgress()).params = {
                    k: _json_safe(v) for k, v in params.items()
                }

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        progress = self.in_progress.setdefault(report.nodeid, _TestProgress())
        progress.add(report)
        if report.when == "teardown":
            if report.nodeid not in self.outer:
                self.entries.extend(progress.entries(report.nodeid))
            del self.in_progress[report.nodeid]

    def add_inner(self, outer: str, report: pytest.TestReport, params: dict | None) -> None:
        """One test run inside the item `outer` (`record_inner_report`), as its own item's phases would add it."""
        self.outer.add(outer)
        progress = _TestProgress()
        progress.params = {k: _json_safe(v) for k, v in (params or {}).items()}
        progress.add(report)
        self.entries.extend(progress.entries(report.nodeid))

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        self.workers_seen += 1
        output = getattr(node, "workeroutput", {})
        payload = output.get(WORKEROUTPUT_KEY)
        if payload:
            self.worker_entries.extend(json.loads(payload))
        self.outer.update(output.get(OUTER_KEY, ()))

    def pytest_sessionfinish(self, session, exitstatus) -> None:
        if self.is_worker:
            self.config.workeroutput[WORKEROUTPUT_KEY] = json.dumps(self.entries)
            self.config.workeroutput[OUTER_KEY] = sorted(self.outer)
            return
        # Tests that never reached teardown (a crashed worker's test) still get an entry.
        for nodeid, progress in sorted(self.in_progress.items()):
            if progress.reports:
                self.entries.extend(progress.entries(nodeid))
        self.in_progress.clear()
        entries = self.entries
        if self._distributed_controller():
            covered = {e["id"].split("#", 1)[0] for e in self.worker_entries} | self.outer
            entries = self.worker_entries + [e for e in self.entries if e["id"].split("#", 1)[0] not in covered]
        target, config_target_named = self._target()
        run_info = collect_run_info(target=target)
        run_info.update(self.config.stash.get(_RUN_INFO_KEY, {}))
        if not config_target_named:
            # the config target's version describes a target the header leaves unsaid
            run_info.pop("target_version", None)
        run_info.update(
            started_at=self.started_at,
            finished_at=utc_now_iso(),
            wall_seconds=round(time.perf_counter() - self.started, 3),
            pytest_exit_status=int(exitstatus),
            workers=self.workers_seen or None,
            vllm_version=self.config.getoption("kvconform_vllm_version", None),
        )
        engine = self.config.getoption("kvconform_kv_engine", None)
        if engine is not None:
            run_info["kv_engine"] = engine  # the engine that drove the connector suite (--kv-engine)
        document = ResultsDocument(run_info=run_info, results=sort_entries(entries))
        write_text_atomic(self.path, document.encode_for(self.path))

    def _target(self) -> tuple[str | None, bool]:
        """What ran, as given on the command line or in the environment (None: the reference everywhere): the
        config target, and the allocator and connectors under test when they are not the reference's; and
        whether the config target is named in it (its version describes it only then)."""
        def option(name: str):
            try:
                return self.config.getoption(name)
            except ValueError:  # that suite's plugin is not loaded
                return None

        config_target = option("--hma-target") or os.environ.get(TARGET_ENV)
        parts = []
        allocator = option("kvconform_kv_allocator")
        if allocator and allocator != "reference":
            # Imported here: a module-level import would load that plugin module before pytest registers it
            # (assertion rewriting warns in every session).
            from harness.plugins.allocator import loaded_allocator_name

            loaded = loaded_allocator_name(self.config)  # which release `vllm` turned out to be
            parts.append(f"allocator {allocator}" + (f" ({loaded})" if loaded and loaded != allocator else ""))
        connectors = list(option("kvconform_kv_connectors") or ())
        if connectors:
            shown = connectors if len(connectors) <= 4 else connectors[:3] + [f"{len(connectors) - 3} more"]
            parts.append(f"connectors {', '.join(shown)}")
        if config_target and (config_target != "reference" or not parts):
            parts.insert(0, str(config_target))  # the default config target goes unsaid next to another target
        return "; ".join(parts) or None, not parts or parts[0] == str(config_target)
