"""The matrix models an environment without the connectors' optional packages: a cell expecting vLLM's import
error for a package that is installed here is skipped with that reason, not failed (a vLLM venv with LMCache
installed for the lmcache step gave 105 failing LMCacheMPConnector cells)."""

from __future__ import annotations

import pytest

from suites.config.test_matrix import _skip_if_the_missing_package_is_installed


def _error(message: str) -> dict:
    return {"resolved_disable_hma": None, "warnings": [], "unknown": None,
            "error": {"id": None, "type": "ModuleNotFoundError", "stage": "config", "text": message}}


def test_an_installed_package_skips_the_cell():
    with pytest.raises(pytest.skip.Exception, match="'json' is installed in this environment"):
        _skip_if_the_missing_package_is_installed(_error("No module named 'json'"))


def test_a_missing_package_keeps_the_cell():
    _skip_if_the_missing_package_is_installed(_error("No module named 'kvconform_absent_package'"))
    _skip_if_the_missing_package_is_installed({**_error(""), "error": None})
    _skip_if_the_missing_package_is_installed(_error("Connector X does not support HMA"))


def test_the_mooncake_message_names_its_package(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "mooncake" else None)
    with pytest.raises(pytest.skip.Exception, match="'mooncake' is installed"):
        _skip_if_the_missing_package_is_installed(_error("Please install mooncake by following the instructions"))
