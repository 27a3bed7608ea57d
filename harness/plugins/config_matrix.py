"""pytest glue of the config matrix: the target under test, era selection, and golden snapshots.

Options: `--hma-target module:callable` (or env KVCONFORM_TARGET) picks the implementation the matrix
runs against (default: the reference resolver); `--update-golden` rewrites the golden files from this
run; the era comes from `--vllm-version` (harness.plugins.session_info); when it is absent, all eras, or
the target's own era for a target bound to one release (one with an `era` attribute, like `vllm`).

The target is loaded (and probed with one case) when the session takes part in kvconform
(`harness.plugins.activation`), or on first use; never in a pytest session that is none of kvconform's.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
import os
from typing import Any, Callable, Iterable

import pytest

from harness.golden import GoldenStore
from harness.plugins.activation import TARGET_ENV, is_active
from harness.plugins.results import add_run_info
from harness.target_spec import KINDS, TargetError, load_config_target

DEFAULT_TARGET = "reference_impl.config:resolve_case"
_WIRE_KEY = "kvconform_golden"
_PROBE_CASE = {"id": "kvconform-probe", "profile": "seed", "stage": "config", "flag": None, "platform": "cuda"}
_OUTCOME_KEYS = ("resolved_disable_hma", "warnings", "error", "unknown")


@dataclasses.dataclass(frozen=True)
class ConfigTarget:
    """The implementation under test: `call(case) -> outcome`, where it came from, and its version."""

    spec: str
    call: Callable[[dict], dict] | None
    version: str
    is_default: bool
    unavailable: str | None = None  # why the default target cannot run (tests skip with this reason)


def _distribution_version(module_name: str) -> str:
    top = module_name.split(".")[0]
    for dist in importlib.metadata.packages_distributions().get(top, []):
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    version = getattr(importlib.import_module(top), "__version__", None)
    return f"{top} {version}" if version else "version unknown"


def _load_callable(spec: str) -> tuple[Callable, str]:
    """Import a target spec (harness.target_spec); its one-line errors become pytest usage errors."""
    try:
        target = load_config_target(spec)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    describe = getattr(target, "describe", None)
    if callable(describe):  # a named target knows what it wraps (`vllm`: the installed release and its era)
        return target, describe()
    module_name = getattr(target, "__module__", None) or spec.partition(":")[0]
    return target, _distribution_version(module_name)


def _check_shape(spec: str, target: Any) -> dict:
    """Probe call: a target must return an outcome dict for a minimal case; anything else is a usage error.
    Returns the probe's outcome."""
    try:
        outcome = target(dict(_PROBE_CASE))
    except Exception as exc:
        raise pytest.UsageError(f"--hma-target {spec}: calling it with a probe case raised {type(exc).__name__}: {exc}") from None
    if not isinstance(outcome, dict) or any(key not in outcome for key in _OUTCOME_KEYS):
        raise pytest.UsageError(f"--hma-target {spec}: returned {type(outcome).__name__}, expected an outcome dict with keys {', '.join(_OUTCOME_KEYS)}")
    return outcome


def _typed(target: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """A foreign target, each outcome it returns in an older form (its warnings as texts, the error's text under
    `message`) read into the typed outcome's form as it comes back, its messages given their ids there (the
    harness meets its texts there, `reference_impl.config.outcome.upgrade`); one in that form comes back as it is."""
    from reference_impl.config.outcome import OutcomeShapeError, upgrade

    @functools.wraps(target)  # keeps what the target says of itself (its `era`, `describe`)
    def typed(case: dict) -> dict:
        outcome = target(case)
        try:
            return upgrade(outcome) if isinstance(outcome, dict) else outcome
        except OutcomeShapeError:  # no outcome of any form: the matrix says what the target returned
            return outcome

    for name in ("era", "describe"):
        if hasattr(target, name) and not hasattr(typed, name):
            setattr(typed, name, getattr(target, name))
    return typed


def load_target(option: str | None) -> ConfigTarget:
    """The target named by --hma-target / KVCONFORM_TARGET, or the reference resolver."""
    spec = option or os.environ.get(TARGET_ENV) or None
    if spec is None:
        try:
            target, version = _load_callable(DEFAULT_TARGET)
            _check_shape(DEFAULT_TARGET, target)
        except pytest.UsageError as exc:
            return ConfigTarget(DEFAULT_TARGET, None, "n/a", True, unavailable=f"reference resolver unavailable: {exc}")
        return ConfigTarget(DEFAULT_TARGET, target, version, True)
    target, version = _load_callable(spec)
    _check_shape(spec, target)
    if spec != DEFAULT_TARGET and spec not in KINDS["config"].builtins:  # the built-in targets return the typed form
        target = _typed(target)
    return ConfigTarget(spec, target, version, spec == DEFAULT_TARGET)


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption(
        "--hma-target",
        dest="kvconform_hma_target",
        default=None,
        metavar="MODULE:CALLABLE",
        help=f"config matrix target: callable(case_dict) -> outcome_dict (default {DEFAULT_TARGET}; env {TARGET_ENV}).",
    )
    group.addoption(
        "--update-golden",
        dest="kvconform_update_golden",
        action="store_true",
        default=False,
        help="rewrite the config matrix golden files from this run's outcomes.",
    )
    group.addoption(
        "--config-matrix-items",
        dest="kvconform_matrix_items",
        choices=MATRIX_ITEMS,
        default="cell",
        help="cell (default): one test per config matrix cell, as -k, JUnit and --shard see them; "
             "era: one test per era that judges every cell of it alike and names each failing cell (fewer "
             "items for pytest and xdist to carry: the README's test command, kvconform's gate, and "
             "`kvconform report` use it); a results file has one entry per cell either way.",
    )


#: --config-matrix-items: one pytest item per cell, or per era
MATRIX_ITEMS = ("cell", "era")

_TARGET = pytest.StashKey[ConfigTarget]()
_ERAS = pytest.StashKey[tuple]()
_GOLDEN = pytest.StashKey[GoldenStore]()


def pytest_configure(config):
    if is_active(config):
        _configure(config)


def _configure(config) -> None:
    """Select the eras and load the target (usage errors for bad options); once per session."""
    if _TARGET in config.stash:
        return
    from harness.eras import ERA_IDS, EraSelectionError, select_eras  # the reference engine's era table

    version = config.getoption("kvconform_vllm_version", None)
    try:
        eras = select_eras(version)
    except EraSelectionError as exc:
        raise pytest.UsageError(str(exc)) from None
    target = load_target(config.getoption("kvconform_hma_target"))
    if version is None and getattr(target.call, "era", None) in ERA_IDS:
        # A target bound to one release (`vllm`) can only evaluate its own era: cover that one.
        eras = (target.call.era,)
    config.stash[_ERAS] = eras
    if config.getoption("kvconform_update_golden") and not target.is_default:
        raise pytest.UsageError("--update-golden records the reference resolver's outcomes; drop --hma-target/KVCONFORM_TARGET")
    add_run_info(config, target_version=target.version)  # e.g. "vllm 0.33.0 (era v0.33)": which release ran
    config.stash[_GOLDEN] = GoldenStore()
    config.stash[_TARGET] = target


def config_target(config) -> ConfigTarget:
    """The target this session runs the config matrix against."""
    _configure(config)
    return config.stash[_TARGET]


def selected_eras(config) -> tuple[str, ...]:
    """The eras this session covers (`--vllm-version`, or all)."""
    _configure(config)
    return config.stash[_ERAS]


def matrix_items(config) -> str:
    """What one config matrix item is: a cell (the default) or an era (--config-matrix-items)."""
    return config.getoption("kvconform_matrix_items", "cell") or "cell"


def golden_store(config) -> GoldenStore:
    """This process's golden store (suites declare their keys into it at collection)."""
    _configure(config)
    return config.stash[_GOLDEN]


def golden_mode(config) -> str:
    """'update' (record and rewrite), 'check' (compare with committed files) or 'off' (foreign target)."""
    if config.getoption("kvconform_update_golden"):
        return "update"
    return "check" if config_target(config).is_default else "off"


@pytest.fixture(scope="session")
def hma_target(request) -> Callable[[dict], dict]:
    """The config target callable; skips when the default reference resolver cannot be loaded."""
    target = config_target(request.config)
    if target.call is None:
        pytest.skip(target.unavailable)
    return target.call


MATRIX_TEST = "test_config_cell"  # the matrix's test function (suites/config/test_matrix.py)
#: the name of the config matrix items of --config-matrix-items era, one per era
MATRIX_ERA_TEST = "test_config_cells_of_era"
#: A module-level test function carrying this attribute is collected as the items it names (`collects_as`).
ITEMS_ATTR = "kvconform_items"


def collects_as(make_items: Callable[[pytest.Module, str], Iterable[pytest.Item]]):
    """Decorator: pytest collects the decorated test function as the items `make_items(module, name)` yields (each
    named `name[<id>]`, so node ids read as a parametrized function's) instead of as one function per parameter.
    An item of its own carries no fixture machinery: the config matrix's 31,674 cells each cost pytest less."""
    def decorate(function):
        setattr(function, ITEMS_ATTR, make_items)
        return function
    return decorate


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makeitem(collector, name, obj):
    make_items = getattr(obj, ITEMS_ATTR, None) if inspect.isfunction(obj) else None
    if make_items is not None:
        return list(make_items(collector, name))
    return None


def header_line(config) -> str | None:
    """The line saying what the config matrix runs against: target, its version, eras, golden mode."""
    from harness.eras import ERA_IDS

    target = config_target(config)
    eras = config.stash[_ERAS]
    era_text = f"all {len(eras)} ({eras[0]} .. {eras[-1]})" if eras == ERA_IDS else ", ".join(eras)
    state = target.unavailable or target.version
    return f"kvconform config matrix: target {target.spec} ({state}); eras {era_text}; golden {golden_mode(config)}"


def _write_header_once(config) -> None:
    line = header_line(config)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line is None or reporter is None or getattr(config, "_kvconform_matrix_header_shown", False):
        return
    config._kvconform_matrix_header_shown = True
    reporter.write_line(line)


# The header line only when the session collected the matrix (a run of the other suites says nothing of it),
# so it comes under pytest's "collected N items" line rather than in pytest's header.
@pytest.hookimpl(tryfirst=True)  # before -k/-m deselect: `-k <no cell>` still names the target it would run
def pytest_collection_modifyitems(session, config, items):
    if not hasattr(config, "workerinput") and is_active(config) and any(getattr(item, "originalname", None) == MATRIX_TEST
                                                                        for item in items):
        config._kvconform_matrix_collected = True


def pytest_collection_finish(session):
    if getattr(session.config, "_kvconform_matrix_collected", False):
        _write_header_once(session.config)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    """xdist controller (it collects nothing itself): the workers' ids say whether the matrix runs."""
    if is_active(node.config) and any(f"::{MATRIX_TEST}[" in nodeid or f"::{MATRIX_ERA_TEST}[" in nodeid
                                      for nodeid in ids):
        _write_header_once(node.config)


def pytest_sessionfinish(session):
    config = session.config
    if _GOLDEN not in config.stash or not config.getoption("kvconform_update_golden"):
        return
    store = config.stash[_GOLDEN]
    if hasattr(config, "workerinput"):  # an xdist worker: hand the store to the controller
        config.workeroutput[_WIRE_KEY] = store.to_wire()
        return
    written = store.write_updates()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and written:
        reporter.write_line(f"kvconform: rewrote {len(written)} golden file(s): {', '.join(p.name for p in written)}")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: gather each worker's golden store."""
    wire = getattr(node, "workeroutput", {}).get(_WIRE_KEY)
    if wire:
        node.config.stash[_GOLDEN].merge_wire(wire)
