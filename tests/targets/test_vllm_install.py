"""The `vllm` targets refuse a missing or unusable vLLM with one line and exit 4 (issue 6, "Bad input").

Every broken install is staged with a fake `vllm` first on sys.path (tests/targets/fake_vllm.py), so
these run in the main venv without vLLM. The expected texts are the user-facing promises: what is
missing, and the install command.
"""

from __future__ import annotations

import pytest

from harness.errors import EXIT_TARGET, UsageError
from harness.target_spec import load_config_target
from harness.targets.vllm_install import INSTALL_HINT, import_vllm_modules, installed_vllm_version, vllm_era
from reference_impl.releases import RELEASES
from tests.targets.fake_vllm import IMPORTABLE

# From the release registry, so a new release is no edit here: the first minor after its newest row (outside the
# known range) and the range a refusal names.
_NEWEST = RELEASES[-1].key
BEYOND = f"{_NEWEST[0]}.{_NEWEST[1] + 1}.0"
KNOWN_RANGE = f"{RELEASES[0].version} to {_NEWEST[0]}.{_NEWEST[1]}.x"


def _refusal(call) -> str:
    """The one-line message of the UsageError (exit 4) that `call()` must raise."""
    with pytest.raises(UsageError) as info:
        call()
    assert info.value.exit_code == EXIT_TARGET, f"exit code {info.value.exit_code}, expected {EXIT_TARGET}"
    message = str(info.value)
    assert "\n" not in message, f"the message must be one line, got {message!r}"
    return message


def test_not_installed_names_the_install_script(no_vllm_distribution):
    message = _refusal(installed_vllm_version)
    assert message.startswith("vLLM is not installed in this Python environment")
    # the release it suggests is the registry's newest row in CI, not one written down in the code
    newest_in_ci = [row.version for row in RELEASES if row.ci][-1]
    assert f"install one with: scripts/install-vllm.sh {newest_in_ci}, then run with " in message
    assert INSTALL_HINT in message


def test_not_installed_through_the_named_target(no_vllm_distribution):
    """`--hma-target vllm` goes through the built-in name's loader; the refusal keeps its reason."""
    message = _refusal(lambda: load_config_target("vllm"))
    assert "vLLM is not installed" in message


@pytest.mark.parametrize("version,why", [
    ("0.9.2", "outside"),
    (BEYOND, "outside"),
    ("1.0.0", "outside"),
])
def test_unsupported_release(fake_vllm, version, why):
    fake_vllm(version, IMPORTABLE)
    assert installed_vllm_version() == version
    message = _refusal(lambda: vllm_era(installed_vllm_version()))
    assert message.startswith(f"installed vLLM {version} is not supported (")
    assert why in message, message
    assert "0.10.0" in message and "0.33" in message, f"the accepted range must be named: {message}"
    assert "scripts/install-vllm.sh" in message


def test_unsupported_release_stops_the_named_target(fake_vllm):
    fake_vllm(BEYOND, IMPORTABLE)
    assert f"installed vLLM {BEYOND} is not supported" in _refusal(lambda: load_config_target("vllm"))


def test_unreadable_version(fake_vllm):
    fake_vllm("dev", IMPORTABLE)
    message = _refusal(installed_vllm_version)
    assert message == f"cannot read a release number from vLLM version 'dev'; accepted: X.Y.Z in {KNOWN_RANGE}"


def test_local_suffix_is_dropped(fake_vllm):
    fake_vllm("0.33.0+cpu", IMPORTABLE)
    assert installed_vllm_version() == "0.33.0"
    assert vllm_era("0.33.0") == "v0.33"


def test_missing_dependency_halfway(fake_vllm):
    """vllm.config imports, the connector factory needs a package the light install left out."""
    fake_vllm("0.33.0", {
        "vllm.config": IMPORTABLE["vllm.config"],
        "vllm.distributed.kv_transfer.kv_connector.factory": "import kvconform_absent_dependency\n",
    })
    message = _refusal(lambda: import_vllm_modules("0.33.0"))
    assert message == (
        "vLLM 0.33.0 is installed but vllm.distributed.kv_transfer.kv_connector.factory does not "
        "import (missing package 'kvconform_absent_dependency'); reinstall it with: scripts/install-vllm.sh 0.33.0"
    )


def test_module_raising_at_import(fake_vllm):
    """Not an ImportError: the exception class and the first line of its text name the gap."""
    fake_vllm("0.20.0", {"vllm.config": "raise RuntimeError('libcuda.so.1: cannot open shared object file\\nmore detail')\n"})
    message = _refusal(lambda: load_config_target("vllm"))
    assert message == (
        "--hma-target vllm: vLLM 0.20.0 is installed but vllm.config does not import "
        "(RuntimeError: libcuda.so.1: cannot open shared object file); reinstall it with: scripts/install-vllm.sh 0.20.0"
    )


def test_working_fake_passes_the_import_check(fake_vllm):
    """The check itself: with every required module importable it raises nothing."""
    fake_vllm("0.33.0", IMPORTABLE)
    import_vllm_modules("0.33.0")


def test_judge_era_judges_a_release_by_an_era_it_does_not_belong_to(monkeypatch):
    """scripts/new-vllm-release.sh runs the newest era's matrix on a release kvconform does not know yet."""
    from harness.targets.vllm_install import JUDGE_ERA_ENV

    monkeypatch.setenv(JUDGE_ERA_ENV, "v0.33")
    assert vllm_era("0.99.0") == "v0.33"
    monkeypatch.delenv(JUDGE_ERA_ENV)
    assert "not supported" in _refusal(lambda: vllm_era("0.99.0"))


def test_judge_era_must_name_an_era(monkeypatch):
    from harness.targets.vllm_install import JUDGE_ERA_ENV

    monkeypatch.setenv(JUDGE_ERA_ENV, "v9")
    with pytest.raises(UsageError) as info:
        vllm_era("0.33.0")
    assert info.value.exit_code == 2 and str(info.value).startswith("KVCONFORM_VLLM_JUDGE_ERA: 'v9' is not an era id; accepted: v0.10")
