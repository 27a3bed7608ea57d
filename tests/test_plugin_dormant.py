"""Installed, kvconform's pytest plugin stays out of a session that is none of its business
(`harness.plugins.activation`): a project's own tests, in a folder of its own, with no kvconform option, run
exactly as they run with the plugin disabled (`-p no:kvconform`): same output, no torch, no reference engine,
no header line. The same project with one kvconform option does get kvconform's header (the check can fail).

Each run is a fresh pytest process on a temporary project, as a vendor's CI would start it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.plugins.activation import reaches_package, reaches_suites

ROOT = Path(__file__).resolve().parents[1]

# A project of its own whose folders happen to be called like kvconform's (`suites/config`), with a passing
# test that lists the modules loaded, a `pytrace=False` failure (kvconform trims those in its own sessions)
# and an ordinary failing assert.
PROJECT_TEST = '''
import json, os, sys

import pytest


def test_modules_loaded(request):
    names = sorted(sys.modules)
    files = sorted(str(getattr(m, "__file__", None) or "") for m in list(sys.modules.values()))
    plugin = request.config.pluginmanager.get_plugin("kvconform")
    with open(os.environ["DORMANT_OUT"], "w") as out:
        json.dump({"modules": names, "files": files, "plugin": getattr(plugin, "__name__", None)}, out)


def test_fails_without_trace():
    pytest.fail("a project failure, message only", pytrace=False)


def test_fails_with_assert():
    values = [1, 2]
    assert values == [1, 3]
'''

# Heavy or kvconform-internal modules a session of another project must not import.
FORBIDDEN_TOP_LEVEL = ("torch", "numpy", "reference_impl", "suites")


def _plugin_args() -> list[str]:
    """The plugin comes from the installed entry point; in a bare source tree it is named with -p."""
    installed = any(ep.name == "kvconform" for ep in metadata.entry_points(group="pytest11"))
    return [] if installed else ["-p", "harness.pytest_plugin"]


def _run(project: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KVCONFORM_", "PYTEST_"))}
    env.update(DORMANT_OUT=str(out), COLUMNS="120", PYTHONDONTWRITEBYTECODE="1")
    if _plugin_args():
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-p", "no:benchmark", "-p", "no:randomly", *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300, check=False)


def _normalised(stdout: str) -> list[str]:
    """pytest's output less what differs between two runs anyway: the plugin list and the timings."""
    lines = [line for line in stdout.splitlines() if not line.startswith("plugins:")]
    return [re.sub(r" in \d+\.\d+s", " in Xs", line) for line in lines]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vendor-project")
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "suites" / "config").mkdir(parents=True)
    (root / "suites" / "config" / "test_vendor.py").write_text(PROJECT_TEST)
    return root


def test_a_session_of_another_project_is_unchanged(project, tmp_path):
    with_plugin = _run(project, tmp_path / "with.json", *_plugin_args())
    without = _run(project, tmp_path / "without.json", "-p", "no:kvconform")
    assert with_plugin.returncode == without.returncode == 1, with_plugin.stdout + with_plugin.stderr

    loaded = json.loads((tmp_path / "with.json").read_text())
    assert loaded["plugin"] == "harness.pytest_plugin", "the kvconform plugin should be loaded (and dormant)"
    imported = sorted({name.split(".")[0] for name in loaded["modules"]} & set(FORBIDDEN_TOP_LEVEL))
    assert imported == [], f"a session of another project imported {imported}"
    kvconform_dirs = [str(ROOT / "reference_impl"), str(ROOT / "suites")]
    assert not [f for f in loaded["files"] if f.startswith(tuple(kvconform_dirs))]

    assert _normalised(with_plugin.stdout) == _normalised(without.stdout)
    assert with_plugin.stderr == without.stderr
    assert "kvconform" not in with_plugin.stdout.replace("kvconform-", "")  # only pytest's own plugin list


def test_one_kvconform_option_wakes_it(project, tmp_path):
    result = _run(project, tmp_path / "out.json", *_plugin_args(), "--vllm-version", "seed")
    header = result.stdout.split("collected", 1)[0].splitlines()
    assert any(re.fullmatch(r"kvconform \S+", line) for line in header), result.stdout
    assert any(line.startswith("kv-allocator: reference") for line in header), result.stdout


@pytest.mark.parametrize("layout, arg, pyargs, reaches", [
    ("repo", "", False, True),                       # pytest at the root of a source tree holding suites/
    ("repo", "suites/config", False, True),
    ("repo", "suites/config/test_matrix.py::test_config_cell", False, True),
    ("repo", "tests", False, False),
    ("venv", "", False, False),                      # a project whose venv (inside it) holds kvconform
    ("venv", "venv/lib/python3.11/site-packages/suites/connector", False, True),
    ("repo", "suites.connector", True, True),        # --pyargs
    ("repo", "suitesx", True, False),
    ("repo", "mypkg.suites", True, False),
])
def test_which_test_paths_reach_the_suites(tmp_path, layout, arg, pyargs, reaches):
    if layout == "repo":
        suites_dir = tmp_path / "suites"
        (tmp_path / "tests").mkdir()
    else:
        (tmp_path / "venv").mkdir()
        (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
        suites_dir = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "suites"
    (suites_dir / "config").mkdir(parents=True)
    (suites_dir / "connector").mkdir()
    assert reaches_suites(arg or ".", tmp_path, pyargs, suites_dir) is reaches


@pytest.mark.parametrize("args, pyargs, reaches", [
    (["."], False, True),                                       # the repository root holds suites/connector
    (["suites"], False, True),
    (["suites/connector/test_checks.py::test_c01"], False, True),
    (["suites/config"], False, False),                          # a config matrix process: no connector line
    (["tests"], False, False),
    (["suites"], True, True),                                   # --pyargs
    (["suites.connector"], True, True),
    (["suites.connector.test_checks"], True, True),
    (["suites.config"], True, False),
    (["suites.config", "suites.connector"], True, True),
    (["suites.connectors_elsewhere"], True, False),
])
def test_which_sessions_reach_the_connector_suite(tmp_path, args, pyargs, reaches):
    """The connector header line (which imports each connector, the built-in ones torch) is for sessions that
    collect the connector suite."""
    suites_dir = tmp_path / "suites"
    (suites_dir / "config").mkdir(parents=True)
    (suites_dir / "connector").mkdir()
    (tmp_path / "tests").mkdir()
    config = SimpleNamespace(args=args, option=SimpleNamespace(pyargs=pyargs),
                             invocation_params=SimpleNamespace(dir=tmp_path))
    assert reaches_package(config, "connector", suites_dir) is reaches
