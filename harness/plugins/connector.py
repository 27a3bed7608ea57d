"""`--kv-connector module:Class` (repeatable), the `kvconform.connectors` entry points, and the header
line naming the connectors the connector suite checks."""

from __future__ import annotations

import json

import pytest

from harness.plugins.activation import is_active, reaches_package
from harness.report_options import option_values
from harness.target_spec import KINDS, VLLM_PREFIX, TargetError

# The run's engine, validated once (at configure): checks read it for every test.
_KV_ENGINE = pytest.StashKey[str]()


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption("--kv-connector", dest="kvconform_kv_connectors", action="append", default=[],
                    metavar="MODULE:CLASS",
                    help="connector class, or its declaration (harness.ConnectorUnderTest), for the connector suite "
                         "(repeatable): " + KINDS["connector"].accepted()
                         + "; vllm:NAME is a connector the installed vLLM registers; default: the built-in connectors")
    group.addoption("--kv-connector-builtins", dest="kvconform_kv_connector_builtins", action="store_true",
                    help="check the built-in connectors too when --kv-connector or entry points select others")
    group.addoption("--kv-connector-extra-config", dest="kvconform_kv_connector_extra_config", default=None,
                    metavar="JSON", help="kv_connector_extra_config (a JSON object) for --kv-connector classes")
    # No argparse `type` nor `choices` on these two: argparse's refusal is pytest's usage text, several lines;
    # pytest_configure checks them instead (one line naming the option, the value and what is accepted).
    group.addoption("--kv-connector-timeout", dest="kvconform_kv_connector_timeout", default=60.0,
                    metavar="SECONDS", help="per-check time limit for the connector suite (default 60)")
    group.addoption("--kv-connector-backdoors", dest="kvconform_kv_connector_backdoors",
                    default="on", metavar="on|off", help="use the optional kvconform_* backdoor methods of a connector (or its declaration) when it has "
                                       "them (default on); 'off' decides every check from behaviour alone")
    group.addoption("--kv-engine", dest="kvconform_kv_engine", default=None, metavar="ENGINE",
                    help="the engine that drives the connector: kvconform (default: kvconform's own engine) or vllm "
                         "(the installed vLLM's Scheduler on CPU schedules and calls the connector's scheduler side; "
                         "kvconform's workers execute)")


def pytest_configure(config):
    """Reject bad connector options up front: one line, pytest's usage-error exit status.

    Every `--kv-connector` target is loaded here, before anything runs (a `vllm:Name` target needs a usable
    vLLM that registers Name).
    """
    try:
        config.option.kvconform_kv_connector_timeout = parse_timeout(
            config.getoption("kvconform_kv_connector_timeout", None))
        check_backdoors(config.getoption("kvconform_kv_connector_backdoors", None))
        raw = config.getoption("kvconform_kv_connector_extra_config", None)
        if raw:
            parse_extra_config(raw)
        kv_engine(config)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    specs = config.getoption("kvconform_kv_connectors", None) or ()
    if specs:  # named explicitly: each must declare, load and build, or nothing runs, as for the other targets
        from harness.targets.connector.target import ConnectorLoadError

        try:
            for target in connector_targets(config):  # each spec parsed and its declaration imported once, here
                if target.source == KINDS["connector"].option and not target.spec.startswith(VLLM_PREFIX):
                    target.load()  # a vLLM connector is checked against vLLM's registry, its adapter built later
        except (TargetError, ConnectorLoadError) as exc:
            raise pytest.UsageError(str(exc)) from None


def kv_engine(config) -> str:
    """The `--kv-engine` of this run (DEFAULT_KV_ENGINE when not given), validated on the first call (this
    plugin's configure) and kept on the config; ValueError (a usage error) for a value that is not an engine, or
    `vllm` without vLLM installed."""
    engine = config.stash.get(_KV_ENGINE, None)
    if engine is None:
        from harness.kv_engine import check_kv_engine

        engine = config.stash[_KV_ENGINE] = check_kv_engine(config.getoption("kvconform_kv_engine", None))
    return engine


def parse_timeout(timeout) -> float | None:
    """`--kv-connector-timeout` as seconds; ValueError unless it is a positive number."""
    if timeout is None:
        return None
    try:
        seconds = float(timeout)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0:  # nan, 0 and negatives
        raise ValueError(f"--kv-connector-timeout must be a positive number of seconds, got {timeout}")
    return seconds


BACKDOOR_CHOICES = ("on", "off")


def check_backdoors(value) -> None:
    """ValueError unless `--kv-connector-backdoors` is on or off."""
    if value is not None and value not in BACKDOOR_CHOICES:
        raise ValueError(f"--kv-connector-backdoors: {value!r} is not accepted; accepted: {', '.join(BACKDOOR_CHOICES)}")


def parse_extra_config(raw: str) -> dict:
    """The `--kv-connector-extra-config` JSON object; ValueError naming the problem otherwise."""
    try:
        extra = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--kv-connector-extra-config is not JSON ({exc.msg} at character {exc.pos}): "
                         f"{raw!r}; accepted: a JSON object") from None
    if not isinstance(extra, dict):
        raise ValueError(f"--kv-connector-extra-config must be a JSON object, got {raw!r}")
    from harness.targets.connector.profile import split_declaration  # pytest comes with it: not at plugin import

    split_declaration(extra)  # a bad "kvconform" profile declaration is a usage error too
    return extra


def check_pytest_args(args: list[str]) -> None:
    """ValueError for a bad connector option among pytest arguments (`kvconform report -- ...`)."""
    for name, value in option_values(args, ("--kv-connector-extra-config", "--kv-connector-timeout", "--kv-engine",
                                            "--kv-connector-backdoors")):
        if name == "--kv-connector-extra-config":
            parse_extra_config(value)
        elif name == "--kv-engine":
            from harness.kv_engine import check_kv_engine

            check_kv_engine(value)
        elif name == "--kv-connector-backdoors":
            check_backdoors(value)
        else:
            parse_timeout(value)


def connector_targets(config):
    """The selected targets, each with its declaration and the run's `--kv-connector-extra-config` merged over it;
    built once per process (at configure when `--kv-connector` names any) and cached on the config: the one object
    per connector the fixtures and checks receive."""
    from harness.targets.connector.profile import split_declaration
    from harness.targets.connector.selection import select_targets  # imports the reference engine (torch)

    targets = getattr(config, "_kvconform_connector_targets", None)
    if targets is None:
        raw = config.getoption("kvconform_kv_connector_extra_config")
        extra = parse_extra_config(raw) if raw else {}
        targets = select_targets(config.getoption("kvconform_kv_connectors"),
                                 config.getoption("kvconform_kv_connector_builtins"))
        connector_extra, declared = split_declaration(extra)
        for target in targets:
            if not target.builtin:
                target.apply_run_options(connector_extra, declared)
        config._kvconform_connector_targets = targets
    return targets


def unusable_targets(config) -> dict[str, str]:
    """name -> one-line reason, for every selected target that cannot be loaded (import, class, hooks,
    constructor)."""
    from harness.targets.connector.target import ConnectorLoadError

    reasons = {}
    for target in connector_targets(config):
        try:
            target.load()
        except ConnectorLoadError as exc:
            reasons[target.name] = str(exc)
    return reasons


def pytest_report_header(config):
    # Naming a connector's class loads it (the built-in ones import torch and the reference engine): only in a
    # session that collects the connector suite, not in a config matrix process (two seconds of its time).
    if not is_active(config) or not reaches_package(config, "connector"):
        return []
    from harness.targets.connector.target import ConnectorLoadError

    parts = []
    for target in connector_targets(config):
        try:
            cls = target.load()
            hma = "HMA" if target.is_hma else "not HMA"
            parts.append(f"{target.name} ({target.source}, {cls.__module__}.{cls.__qualname__}, {hma})")
        except ConnectorLoadError as exc:
            parts.append(f"{target.name} ({target.source}, LOAD ERROR: {exc})")
    return ["kv-connectors: " + "; ".join(parts)]
