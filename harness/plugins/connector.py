"""`--kv-connector module:Class` (repeatable), the `kvconform.connectors` entry points, and the header
line naming the connectors the connector suite checks."""

from __future__ import annotations

import json

import pytest

from harness.targets.connector_target import ConnectorLoadError, select_targets


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption("--kv-connector", dest="kvconform_kv_connectors", action="append", default=[],
                    metavar="MODULE:CLASS",
                    help="connector class for the connector suite (repeatable; vllm:Name for a connector the "
                         "installed vLLM registers); default: the built-in connectors")
    group.addoption("--kv-connector-builtins", dest="kvconform_kv_connector_builtins", action="store_true",
                    help="check the built-in connectors too when --kv-connector or entry points select others")
    group.addoption("--kv-connector-extra-config", dest="kvconform_kv_connector_extra_config", default=None,
                    metavar="JSON", help="kv_connector_extra_config (a JSON object) for --kv-connector classes")
    group.addoption("--kv-connector-timeout", dest="kvconform_kv_connector_timeout", type=float, default=60.0,
                    metavar="SECONDS", help="per-check time limit for the connector suite (default 60)")


def pytest_configure(config):
    # `vllm:Name` needs a usable vLLM that registers Name: otherwise one line and exit 4 before anything runs.
    from harness.errors import UsageError

    for spec in config.getoption("kvconform_kv_connectors", None) or ():
        if spec.startswith("vllm:"):
            from harness.targets.vllm_connector import validate_spec

            try:
                validate_spec(spec)
            except UsageError as exc:
                raise pytest.UsageError(str(exc)) from None


def connector_targets(config):
    """The selected targets, cached on the config."""
    targets = getattr(config, "_kvconform_connector_targets", None)
    if targets is None:
        raw = config.getoption("kvconform_kv_connector_extra_config")
        try:
            extra = json.loads(raw) if raw else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"--kv-connector-extra-config is not JSON ({exc}); accepted: a JSON object") from None
        if not isinstance(extra, dict):
            raise ValueError(f"--kv-connector-extra-config must be a JSON object, got {raw!r}")
        targets = select_targets(config.getoption("kvconform_kv_connectors"),
                                 config.getoption("kvconform_kv_connector_builtins"))
        for target in targets:
            if not target.builtin:
                target.extra_config = dict(extra)
        config._kvconform_connector_targets = targets
    return targets


def pytest_report_header(config):
    parts = []
    for target in connector_targets(config):
        try:
            cls = target.load()
            hma = "HMA" if target.is_hma else "not HMA"
            parts.append(f"{target.name} ({target.source}, {cls.__module__}.{cls.__qualname__}, {hma})")
        except ConnectorLoadError as exc:
            parts.append(f"{target.name} ({target.source}, LOAD ERROR: {exc})")
    return ["kv-connectors: " + "; ".join(parts)]
