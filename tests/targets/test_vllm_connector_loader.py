"""`--kv-connector vllm:Name` bad input: no vLLM, an unknown name, a bad MultiConnector child -> exit 4 with
one line; the requirement table turns a missing package or device into one skip reason.

Runs in any venv: a fake `vllm` (tests/targets/fake_vllm.py) with a factory registry stands in for vLLM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import EXIT_TARGET, UsageError
from harness.targets.connector import vllm_target as vllm_connector
from harness.targets.connector import vllm_facts as facts
from reference_impl.releases import ci_releases
from tests.targets.fake_vllm import IMPORTABLE, write_fake_vllm

ROOT = Path(__file__).resolve().parents[2]
REGISTERED = ("ExampleConnector", "MultiConnector", "OffloadingConnector")
FACTORY = ("class KVConnectorFactory:\n"
           f"    _registry = {{name: (lambda: None) for name in {REGISTERED!r}}}\n")
MODULES = dict(IMPORTABLE, **{"vllm.distributed.kv_transfer.kv_connector.factory": FACTORY})


def test_no_vllm_is_exit_4_with_how_to_install(no_vllm_distribution):
    with pytest.raises(UsageError) as info:
        facts.validate_spec("vllm:ExampleConnector")
    assert info.value.exit_code == EXIT_TARGET
    assert str(info.value).startswith("--kv-connector vllm:ExampleConnector: vLLM is not installed in this Python environment; ")
    assert f"scripts/install-vllm.sh {ci_releases()[0]}" in str(info.value)


def test_unknown_name_is_exit_4_listing_registered_names(fake_vllm):
    fake_vllm("0.33.0", MODULES)
    with pytest.raises(UsageError) as info:
        facts.validate_spec("vllm:NoSuchConnector")
    assert info.value.exit_code == EXIT_TARGET
    assert str(info.value) == ("--kv-connector vllm:NoSuchConnector: vLLM 0.33.0 registers no connector "
                               "'NoSuchConnector'; registered: ExampleConnector, MultiConnector, OffloadingConnector")


@pytest.mark.parametrize("spec, bad", [("vllm:MultiConnector[ExampleConnector,Nope]", "Nope"),
                                       ("vllm:MultiConnector[]", "MultiConnector[]")])
def test_bad_multiconnector_child_is_exit_4(fake_vllm, spec, bad):
    fake_vllm("0.33.0", MODULES)
    with pytest.raises(UsageError) as info:
        facts.validate_spec(spec)
    assert info.value.exit_code == EXIT_TARGET and f"registers no connector {bad!r}" in str(info.value)


def test_multiconnector_cannot_nest(fake_vllm):
    fake_vllm("0.33.0", MODULES)
    with pytest.raises(UsageError, match="a MultiConnector child cannot be MultiConnector"):
        facts.validate_spec("vllm:MultiConnector[MultiConnector,ExampleConnector]")


def test_parse_name():
    assert facts.parse_name("vllm:ExampleConnector") == ("ExampleConnector", ())
    assert facts.parse_name("vllm:MultiConnector[A,B]") == ("MultiConnector", ("A", "B"))


WITH_DECODE_BENCH = ("DecodeBenchConnector", "ExampleConnector", "MultiConnector", "NixlConnector", "OffloadingConnector")


def test_default_multiconnector_pairs_connectors_that_store_kv(fake_vllm, monkeypatch):
    """`vllm:MultiConnector` alone: two children that store KV and can run here, never the dummy-KV
    DecodeBenchConnector (it claims every prompt first) nor a transfer-only connector."""
    factory = ("class KVConnectorFactory:\n"
               f"    _registry = {{name: (lambda: None) for name in {WITH_DECODE_BENCH!r}}}\n")
    fake_vllm("0.33.0", dict(IMPORTABLE, **{"vllm.distributed.kv_transfer.kv_connector.factory": factory}))
    monkeypatch.setitem(facts.REQUIREMENTS, "OffloadingConnector",
                        facts.Requirement(cuda=True, why="test: needs a GPU"))
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert facts.parse_name("vllm:MultiConnector") == ("MultiConnector", ("ExampleConnector", "ExampleConnector"))
    monkeypatch.delitem(facts.REQUIREMENTS, "OffloadingConnector")  # e.g. once it runs on a CPU
    assert facts.parse_name("vllm:MultiConnector") == ("MultiConnector", ("ExampleConnector", "OffloadingConnector"))
    assert vllm_connector.vllm_target("vllm:DecodeBenchConnector").known_kind == "dummy"
    assert vllm_connector.vllm_target("vllm:NixlConnector").known_kind == "transfer"
    assert vllm_connector.vllm_target("vllm:ExampleConnector").known_kind == "stores"


def test_target_name_carries_the_release(fake_vllm):
    fake_vllm("0.33.0", MODULES)
    target = vllm_connector.vllm_target("vllm:MultiConnector[ExampleConnector,OffloadingConnector]")
    assert target.name == "vllm-0.33.0:MultiConnector[ExampleConnector,OffloadingConnector]"


def test_missing_package_and_device_are_one_line_reasons(monkeypatch):
    import importlib.util

    import torch

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert facts.missing_requirement("NixlConnector") == (
        "cannot run here: NixlConnector needs the NIXL transfer library (UCX/RDMA) (package 'nixl' is not installed)")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert facts.missing_requirement("P2pNcclConnector").startswith(
        "cannot run here: P2pNcclConnector needs CUDA (")
    # CUDA plumbing only: CPU stand-ins, where the release has the worker modules they patch (find_spec is patched
    # above, so say so here; which releases have them is tests/targets/test_vllm_device_standins.py's business).
    monkeypatch.setattr("harness.targets.connector.vllm_device_standins.uncovered_modules", lambda name: [])
    for name in ("OffloadingConnector", "SimpleCPUOffloadConnector"):
        assert facts.missing_requirement(name) is None and facts.runs_on_standins(name)
    assert not facts.runs_on_standins("P2pNcclConnector")
    assert facts.missing_requirement("ExampleHiddenStatesConnector").startswith("not applicable: ")
    assert facts.missing_requirement("ExampleConnector") is None


def _run_pytest(tmp_path, modules, *argv):
    env = dict(os.environ)
    paths = [str(ROOT)]
    if modules is not None:
        paths.insert(0, str(write_fake_vllm(tmp_path / "fake-site", "0.33.0", modules)))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return subprocess.run([sys.executable, "-m", "pytest", "suites/connector", "-p", "no:cacheprovider",
                           "-p", "no:xdist", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_pytest_unknown_vllm_connector_exits_4_before_running(tmp_path):
    result = _run_pytest(tmp_path, MODULES, "--kv-connector", "vllm:NoSuchConnector")
    assert result.returncode == 4, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == ["ERROR: --kv-connector vllm:NoSuchConnector: vLLM 0.33.0 registers no connector "
                     "'NoSuchConnector'; registered: ExampleConnector, MultiConnector, OffloadingConnector"], \
        result.stderr
    assert " passed" not in result.stdout and " failed" not in result.stdout


def test_report_command_unknown_vllm_connector_exits_4_before_pytest(tmp_path):
    fake = write_fake_vllm(tmp_path / "fake-site", "0.33.0", MODULES)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(fake), str(ROOT)]))
    out = tmp_path / "report"
    result = subprocess.run([sys.executable, "-m", "harness.cli", "report", "--kv-connector", "vllm:Nope",
                             "--output-dir", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 4, result.stdout + result.stderr
    assert result.stderr.strip() == ("kvconform report: --kv-connector vllm:Nope: vLLM 0.33.0 registers no connector "
                                     "'Nope'; registered: ExampleConnector, MultiConnector, OffloadingConnector")
    assert result.stdout == "" and not out.exists(), "nothing runs and no report is written"


def test_each_connector_under_test_gets_its_own_store_directory():
    """vLLM's ExampleConnector keys its files by tokens only: a MultiConnector's ExampleConnector child must not
    share the directory of the ExampleConnector checked on its own (its prompts would hit there)."""
    alone = facts.default_extra_config("ExampleConnector")["shared_storage_path"]
    child = facts.default_extra_config("ExampleConnector", within="MultiConnector.0")["shared_storage_path"]
    second = facts.default_extra_config("ExampleConnector", within="MultiConnector.1")["shared_storage_path"]
    assert len({alone, child, second}) == 3, "two children, or a child and the connector on its own, share one store"
    assert facts.default_extra_config("ExampleConnector")["shared_storage_path"] == alone, \
        "every engine of one connector in one process shares its store"
    assert all(Path(p).is_dir() for p in (alone, child))


WITH_LMCACHE = ("ExampleConnector", "LMCacheConnectorV1", "LMCacheMPConnector", "MultiConnector",
                "OffloadingConnector")


def test_lmcache_connector_v1_is_not_run_in_a_shared_process_whether_or_not_lmcache_imports(fake_vllm, monkeypatch):
    """LMCacheConnectorV1 shares one LMCacheEngine per process: it is never run (one reason, the same with and
    without lmcache installed) and never a default MultiConnector child; nor is LMCacheMPConnector (a package
    beyond vLLM), so the pairing does not depend on which packages the venv happens to have."""
    import importlib.util

    factory = ("class KVConnectorFactory:\n"
               f"    _registry = {{name: (lambda: None) for name in {WITH_LMCACHE!r}}}\n")
    fake_vllm("0.33.0", dict(IMPORTABLE, **{"vllm.distributed.kv_transfer.kv_connector.factory": factory}))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    # OffloadingConnector runs on the CPU stand-ins where the release has their modules (the fake one has none).
    monkeypatch.setattr("harness.targets.connector.vllm_device_standins.uncovered_modules", lambda name: [])
    reasons = []
    for installed in (True, False):
        monkeypatch.setattr(importlib.util, "find_spec",
                            lambda name, *a: object() if name.startswith("lmcache") and installed else find_spec(name, *a))
        reasons.append(facts.missing_requirement("LMCacheConnectorV1"))
        assert facts.parse_name("vllm:MultiConnector") == ("MultiConnector",
                                                           ("ExampleConnector", "OffloadingConnector"))
    assert reasons[0] == reasons[1]
    assert reasons[0].startswith("cannot run here: LMCacheConnectorV1 cannot be judged in a test process shared "
                                 "with other checks: every instance in a process shares one LMCacheEngine")


def test_a_names_file_of_the_installed_release_stands_in_for_importing_vllm(fake_vllm, monkeypatch, tmp_path):
    """`--names-file` writes what the factory registers; a process given that file (REGISTERED_NAMES_ENV: the vLLM
    job's connector steps) checks names against it without importing vLLM; a file of another release is ignored."""
    fake_vllm("0.33.0", MODULES)
    names = tmp_path / "names"
    assert vllm_connector.main(["--names-file", str(names)]) == 0
    assert names.read_text() == "vllm 0.33.0\n" + "".join(f"{n}\n" for n in REGISTERED)
    for name in [n for n in sys.modules if n == "vllm" or n.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv(facts.REGISTERED_NAMES_ENV, str(names))
    names.write_text("vllm 0.33.0\nExampleConnector\n")  # what the file says is what counts, not the factory
    assert facts.registered_names() == ["ExampleConnector"]
    with pytest.raises(UsageError, match="registers no connector 'OffloadingConnector'"):
        facts.validate_spec("vllm:OffloadingConnector")
    assert "vllm.distributed.kv_transfer.kv_connector.factory" not in sys.modules
    names.write_text("vllm 0.34.0\nExampleConnector\n")  # another release's file: the factory answers
    assert facts.registered_names() == list(REGISTERED)


def test_the_listing_takes_no_argument_but_a_names_file(capsys):
    assert vllm_connector.main(["--names-file"]) == 2
    assert capsys.readouterr().err == ("kvconform: error: arguments '--names-file'; accepted: none, or --names-file "
                                       "FILE\n")
