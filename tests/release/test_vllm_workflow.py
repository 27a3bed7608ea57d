"""The GitHub Actions workflow of the vLLM job (.github/workflows/vllm-job.yml) runs one runner per release of the
list the job script runs (the release registry's CI releases, reference_impl/releases.toml), with a cache keyed by
the release and the dependency lists, and a last job that renders every runner's summary. Parsed with PyYAML where it is installed; otherwise (the project's
own venv has no PyYAML) by the workflow's text, and the shell line that builds the matrix is run as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / ".github" / "workflows" / "vllm-job.yml"


def listed_releases() -> list[str]:
    """The registry's CI releases, newest first."""
    from reference_impl.releases import ci_releases

    return ci_releases()


def _job_text(name: str) -> str:
    """The text of one job of the workflow (from `  name:` to the next job or the end)."""
    text = WORKFLOW.read_text(encoding="utf-8")
    jobs = text[text.index("\njobs:\n"):]
    match = re.search(rf"^  {name}:\n(.*?)(?=^  \S|\Z)", jobs, re.M | re.S)
    assert match, f"no job {name!r} in {WORKFLOW.name}"
    return match[1]


def test_the_job_script_runs_the_listed_releases_by_default(tmp_path):
    assert listed_releases() and all(re.fullmatch(r"\d+\.\d+\.\d+", r) for r in listed_releases())
    done = subprocess.run(["bash", str(REPO / ".ci" / "vllm-job.sh")], capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "KVCONFORM_CI_VLLM_OUT": str(tmp_path),
                               "KVCONFORM_CI_VLLM_VENV_ROOT": str(tmp_path / "none")})
    assert done.returncode == 1  # no venvs: every release's install fails, in the listed order
    rows = [line.split("|")[1].strip() for line in (tmp_path / "summary.md").read_text().splitlines()
            if line.startswith("| 0.")]
    assert rows == listed_releases()
    assert "RELEASES=(" not in (REPO / ".ci" / "vllm-job.sh").read_text()  # one home for the list


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq is absent: the matrix line of the workflow needs it")
def test_the_matrix_is_the_release_list(tmp_path):
    step = _job_text("releases")
    line = re.search(r"^\s+run: (.*)$", step, re.M)[1]
    output = tmp_path / "github_output"
    subprocess.run(["bash", "-c", line], cwd=REPO, check=True, timeout=60,
                   env={**os.environ, "GITHUB_OUTPUT": str(output)})
    key, _, value = output.read_text().strip().partition("=")
    assert key == "releases" and json.loads(value) == listed_releases()
    assert "release: ${{ fromJSON(needs.releases.outputs.releases) }}" in _job_text("release")


def test_each_runner_judges_its_release_on_a_cached_install():
    job = _job_text("release")
    assert "needs: releases" in job and "fail-fast: false" in job
    assert "KVCONFORM_CI_VLLM_RELEASES: ${{ matrix.release }}" in job
    assert 'KVCONFORM_CI_VLLM_KEEP_VENVS: "1"' in job  # the venv stays for the cache to save
    assert re.search(r"^\s+run: \.ci/vllm-job\.sh$", job, re.M)
    restore, save = job[job.index("uses: actions/cache/restore@"):], job[job.index("uses: actions/cache/save@"):]
    for cache in (restore, save):
        paths = [p.strip() for p in re.search(r"path: \|\n((?:\s{12}\S.*\n)+)", cache)[1].splitlines()]
        assert paths == [".cache/wheelhouse", ".cache/wheels/vllm-${{ matrix.release }}-*.whl",
                         ".cache/venvs/vllm-${{ matrix.release }}", ".cache/vllm-cache/vllm-${{ matrix.release }}"]
    # saved after the job whatever it found (a red job's install is as good), under the key it restored with
    assert job.index("run: .ci/vllm-job.sh") < job.index("uses: actions/cache/save@")
    assert "key: ${{ steps.cache.outputs.cache-primary-key }}" in save
    save_step = job[job.rindex("- name:", 0, job.index("uses: actions/cache/save@")):]
    assert re.search(r"^\s+if: always\(\) && steps\.cache\.outputs\.cache-hit != 'true' && "
                     r"steps\.installed\.outputs\.done == 'true'$", save_step, re.M)  # a finished install only
    assert "-f .cache/venvs/vllm-${{ matrix.release }}/.kvconform-vllm-stamp" in job
    key = re.search(r"^\s+key: (.*)$", restore, re.M)[1]
    assert "${{ matrix.release }}" in key and "${{ steps.python.outputs.python-version }}" in key
    hashed = re.search(r"hashFiles\((.*?)\)", key)[1]
    for source in ("scripts/vllm-light-deps/*", "scripts/install-vllm.sh", "scripts/lmcache-deps.txt"):
        assert f"'{source}'" in hashed


def test_the_last_job_renders_every_runners_summary():
    job = _job_text("summary")
    assert "needs: release" in job and "if: always()" in job
    assert "pattern: vllm-job-*" in job and ".ci/vllm-summary.sh outs/vllm-job-*" in job


def test_the_workflow_parses_as_yaml_where_pyyaml_is_installed():
    yaml = pytest.importorskip("yaml", reason="PyYAML is not installed; the text checks above stand in for it")
    document = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert set(document["jobs"]) == {"releases", "release", "summary"}
    assert document["jobs"]["release"]["strategy"]["matrix"]["release"] == "${{ fromJSON(needs.releases.outputs.releases) }}"


def test_the_summary_script_adds_up_install_and_judging_per_release(tmp_path):
    for release, rows in (("0.34.0", ["0.34.0|install|ran|95|90|exit 0", "0.34.0|matrix|ran|120|200|x",
                                      "0.34.0|connectors|ran|300|500|y", "0.34.0|lmcache-install|ran|5|4|z",
                                      "0.34.0|judged|total|330|200|the release judged",
                                      "0.34.0|judging|total|380||w"]),
                          ("0.13.0", ["0.13.0|install|prebuilt|0|0|venv", "0.13.0|upstream|skipped|0|0|gap"])):
        (tmp_path / release).mkdir()
        (tmp_path / release / "summary-rows.txt").write_text("\n".join(rows) + "\n")
        (tmp_path / release / "summary-head.txt").write_text(f"run of {release}\n")
    done = subprocess.run(["bash", str(REPO / ".ci" / "vllm-summary.sh"), str(tmp_path / "0.34.0"),
                           str(tmp_path / "0.13.0")], capture_output=True, text=True, timeout=60, check=True)
    lines = done.stdout.splitlines()
    assert lines[:2] == ["# vLLM CI job: run of 0.34.0", "# vLLM CI job: run of 0.13.0"]
    assert "| 0.34.0 | matrix | ran | 120 | 200 | x |" in lines and "| 0.13.0 | upstream | skipped | 0 | 0 | gap |" in lines
    # the release's judging|total row is its judging wall time (steps beside each other count once); without one,
    # the steps' wall times add up. Its judged|total row (the matrix, allocator and connector steps, which ran first)
    # is part of judging: named beside it, not added to it.
    assert lines[-2:] == ["- 0.34.0: install 100 s (94 CPU s), judging 380 s (700 CPU s); of it the release judged "
                          "(matrix, allocator, connectors) 330 s (200 CPU s)",
                          "- 0.13.0: install 0 s (0 CPU s), judging 0 s (0 CPU s)"]
