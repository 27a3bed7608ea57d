"""The release registry (reference_impl/releases.toml): its rows load, agree with the eras and the dependency lists,
refuse bad data naming the row and key, and its command line gives the shell scripts what they read."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from reference_impl import releases
from reference_impl.config import eras

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "reference_impl" / "releases.py"


def test_every_era_is_tested_at_a_release_of_the_registry():
    missing = [era.id for era in eras.ERAS if era.representative not in releases.RELEASES_BY_VERSION]
    assert not missing, f"eras whose representative release has no registry row: {missing}"


def test_each_row_names_the_era_the_eras_place_it_in_and_each_era_starts_at_a_row():
    wrong = [(row.version, row.era, eras.era_for_version(row.version).id) for row in releases.RELEASES
             if row.era != eras.era_for_version(row.version).id]
    assert not wrong, f"rows whose era is not the one reference_impl/config/eras.py gives: {wrong}"
    firsts = {era.id: ".".join(map(str, era.first_version + (0,) * (3 - len(era.first_version)))) for era in eras.ERAS}
    missing = {era: first for era, first in firsts.items() if first not in releases.RELEASES_BY_VERSION}
    assert not missing, f"eras whose first release has no registry row (a release between rows takes the row before it): {missing}"
    assert releases.era_ids() == tuple(era.id for era in eras.ERAS)
    assert releases.era_at_least("v0.34", "seed") and not releases.era_at_least("pre-seed", "seed")
    with pytest.raises(ValueError, match="era 'v9' is not an era of the release registry; accepted: v0.10, v0.11"):
        releases.era_at_least("v9", "seed")


def test_a_profile_is_its_eras_representative():
    assert eras.PROFILES == releases.profiles() and eras.DEFAULT_PROFILE in eras.PROFILES
    for era, version in releases.profiles().items():
        assert eras.ERAS_BY_ID[era].representative == version, f"profile {era}: {version}"


def test_every_row_names_a_dependency_list_and_a_release_in_the_known_range():
    for row in releases.RELEASES:
        assert (REPO / "scripts" / "vllm-light-deps" / f"{row.deps}.txt").is_file(), f"{row.version}: deps {row.deps}"
        eras.era_for_version(row.version)  # raises outside the known range
        assert set(row.gaps) <= set(releases.STEPS)
    assert [r.key for r in releases.RELEASES] == sorted(r.key for r in releases.RELEASES)
    named = {row.deps for row in releases.RELEASES}
    orphans = sorted(p.stem for p in (REPO / "scripts" / "vllm-light-deps").glob("*.txt") if p.stem not in named)
    assert not orphans, f"dependency lists no registry row names: {orphans}"


def test_a_release_without_a_row_installs_as_the_row_before_it():
    assert releases.row_for("0.15.0").version == "0.14.0"
    assert releases.row_for("0.34.2").version == "0.34.0"
    with pytest.raises(releases.RegistryError, match=r"older than every release of the registry \(oldest: 0\.10\.0\)"):
        releases.row_for("0.9.2")


@pytest.mark.parametrize("text,message", [
    ('["0.34"]\nera = "v0.34"\ndeps = "0.34"\ntorch = "2.13.0"\n', "row '0.34' is not a release; expected X.Y.Z"),
    ('["0.34.0"]\ndeps = "0.34"\ntorch = "2.13.0"\n', "row '0.34.0': era must be a non-empty string, got None"),
    ('["0.33.0"]\nera = "a"\ndeps = "0.34"\n["0.34.0"]\nera = "b"\ndeps = "0.34"\n["0.35.0"]\nera = "a"\ndeps = "0.34"\n'
     '[defaults]\ntorch = "2"\n', "row '0.35.0': era 'a' comes back after 'b'; an era is one range of releases"),
    ('["0.34.0"]\nera = "v0.34"\ndeps = "0.34"\ntorch = "2.13.0"\ncl = true\n', "row '0.34.0': unknown key 'cl'; accepted: ci, deps, era, gaps, profile"),
    ('["0.34.0"]\nera = "v0.34"\ntorch = "2.13.0"\n', "row '0.34.0': deps must be a non-empty string, got None"),
    ('["0.34.0"]\nera = "v0.34"\ndeps = "0.34"\ntorch = "2.13.0"\nci = "yes"\n', "row '0.34.0': ci must be true or false, got 'yes'"),
    ('["0.34.0"]\nera = "v0.34"\ndeps = "0.34"\ntorch = "2.13.0"\nprofile = 1\n',
     "row '0.34.0': profile must be true or false, got 1"),
    ('["0.34.0"]\nera = "v0.34"\ndeps = "0.34"\nprofile = true\n["0.34.1"]\nera = "v0.34"\ndeps = "0.34"\n'
     'profile = true\n[defaults]\ntorch = "2"\n', "row '0.34.0': era 'v0.34' has two profile rows"),
    ('["0.34.0"]\nera = "v0.34"\ndeps = "0.34"\ntorch = "2.13.0"\nupstream_floor = 98\n',
     "row '0.34.0': upstream_floor must be a share from 0 to 1, got 98"),
    ('["0.34.0"]\nera = "v0.34"\ndeps = "0.34"\ntorch = "2.13.0"\n["0.34.0".gaps]\nupstrem = "x"\n',
     "row '0.34.0': gaps: unknown step 'upstrem'; accepted: matrix, allocator"),
    ('["0.34.0"]\nera = "v0.34"\ndeps = "0.34"\ntorch = "2.13.0"\n["0.34.0".gaps]\nupstream = " "\n',
     "row '0.34.0': gaps.upstream must name what is missing"),
])
def test_a_bad_row_is_refused_naming_the_row_and_key(tmp_path, text, message):
    path = tmp_path / "releases.toml"
    path.write_text(text)
    with pytest.raises(releases.RegistryError) as info:
        releases.load(path)
    assert str(info.value).startswith(f"releases.toml: {message}")


def _cli(*args: str) -> subprocess.CompletedProcess:
    # as the shell scripts run it: a plain interpreter on the file, nothing of the project imported
    return subprocess.run([sys.executable, "-S", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO / "scripts")


def test_the_command_line_lists_ci_releases_and_gaps():
    done = _cli("ci")
    assert done.returncode == 0 and done.stdout.split() == releases.ci_releases()
    gaps = _cli("gaps").stdout.splitlines()
    expected = [f"{r.version}:{s}\t{why}" for r in reversed(releases.RELEASES) for s, why in r.gaps.items()]
    assert gaps == expected and all("\n" not in why and "\t" not in why for r in releases.RELEASES
                                    for why in r.gaps.values())


def test_the_command_line_gives_the_install_row_or_one_line():
    done = _cli("install", "0.33.0")
    row = releases.RELEASES_BY_VERSION["0.33.0"]
    assert done.returncode == 0 and done.stdout == f"{row.deps} {row.torch}\n"
    done = _cli("install", "0.9.0")
    assert done.returncode == 2 and done.stderr == (
        "releases: vLLM 0.9.0 is older than every release of the registry (oldest: 0.10.0)\n")
    done = _cli("install", "0.33")
    assert done.returncode == 2 and done.stderr == "releases: VERSION must look like 0.33.0, got '0.33'\n"
    assert _cli("nonsense").returncode == 2


def test_the_install_script_refuses_a_release_before_every_row_in_one_line(tmp_path):
    done = subprocess.run(["bash", str(REPO / "scripts" / "install-vllm.sh"), "0.9.0", str(tmp_path / "venv")],
                          capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable})
    assert done.returncode == 2 and done.stderr == ("install-vllm: vLLM 0.9.0 is older than every release of the registry "
                                                    "(oldest: 0.10.0) (reference_impl/releases.toml)\n")
    assert not (tmp_path / "venv").exists()


def test_the_upstream_default_is_the_newest_release_with_a_floor():
    floored = [row.version for row in releases.RELEASES if row.upstream_floor is not None]
    assert floored and releases.upstream_default() == floored[-1]
    done = _cli("upstream-default")
    assert done.returncode == 0 and done.stdout == f"{floored[-1]}\n"


def test_a_release_venv_is_under_the_checkout_or_the_named_root(monkeypatch, tmp_path):
    # scripts/install-vllm.sh's default folder, and where the tests that run in a release's venv look for it
    monkeypatch.delenv(releases.VENV_ROOT_ENV, raising=False)
    assert releases.venv_dir("0.33.0") == REPO / ".cache" / "venvs" / "vllm-0.33.0"
    assert releases.install_command("0.33.0") == "scripts/install-vllm.sh 0.33.0"
    monkeypatch.setenv(releases.VENV_ROOT_ENV, str(tmp_path))
    assert releases.venv_dir("0.34.0") == tmp_path / "vllm-0.34.0"
    with pytest.raises(releases.RegistryError, match="VERSION must look like 0.33.0, got '0.34'"):
        releases.venv_dir("0.34")
    done = subprocess.run([sys.executable, "-S", str(SCRIPT), "venv", "0.34.0"], capture_output=True, text=True,
                          timeout=60, cwd=REPO / "scripts", env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout == f"{REPO / '.cache' / 'venvs' / 'vllm-0.34.0'}\n"
    done = _cli("venv", "latest")
    assert done.returncode == 2 and done.stderr == "releases: VERSION must look like 0.33.0, got 'latest'\n"



def test_the_install_hint_names_the_newest_release_in_ci_and_its_venv(monkeypatch, tmp_path):
    # the hint of every "install one" message and skip reason: a new release row in CI moves it
    monkeypatch.delenv(releases.VENV_ROOT_ENV, raising=False)
    newest_in_ci = [row.version for row in releases.RELEASES if row.ci][-1]
    assert releases.install_hint() == (f"scripts/install-vllm.sh {newest_in_ci}, then run with "
                                       f".cache/venvs/vllm-{newest_in_ci}/bin/python")
    assert releases.install_hint("0.20.0") == ("scripts/install-vllm.sh 0.20.0, then run with "
                                               ".cache/venvs/vllm-0.20.0/bin/python")
    monkeypatch.setenv(releases.VENV_ROOT_ENV, str(tmp_path))
    assert releases.install_hint("0.20.0") == f"scripts/install-vllm.sh 0.20.0, then run with {tmp_path}/vllm-0.20.0/bin/python"

def test_newer_orders_two_releases_for_the_scripts():
    assert _cli("newer", "0.35.0", "0.34.0").returncode == 0
    assert _cli("newer", "0.34.0", "0.34.0").returncode == 1
    done = _cli("newer", "banana", "0.34.0")
    assert done.returncode == 2 and done.stderr.startswith("releases: vllm_version: 'banana' is not a version")


def test_a_gap_names_a_step_the_job_asks_gaps_of():
    job = (REPO / ".ci" / "vllm-job.sh").read_text(encoding="utf-8")
    asked = set(re.findall(r'gap "\$R" ([a-z-]+)', job))
    assert asked == set(releases.STEPS), "reference_impl.releases.STEPS: the steps .ci/vllm-job.sh asks gaps of"
