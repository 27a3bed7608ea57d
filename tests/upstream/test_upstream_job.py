"""The upstream job's offline hub cache, per-file counts, whole-process aliasing and results loading
(no network, no vLLM needed)."""

import json
import sys
import textwrap

import pytest

from harness.upstream import process_alias, vllm_core_tests
from harness.upstream.offline_hub import load_model_configs, named_models, write_offline_hub
from harness.upstream.results import UpstreamResultsError, load_upstream
from harness.upstream.vllm_core_tests import compare, main


def test_named_models_finds_model_arguments_not_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "test_a.py").write_text(textwrap.dedent('''\
        MODEL = "org/tiny-model"
        create_scheduler(model="facebook/opt-125m")
        ModelConfig(model="Qwen/Qwen3-0.6B", max_model_len=128)
        path = "tests/v1/core/utils.py"
        mock.patch("a/b")
    '''))
    (tmp_path / "sub" / "test_b.py").write_text('MODEL = os.environ.get("X", "facebook/opt-350m")\n'
                                                 'model_id = "Qwen/Qwen1.5-7B"\n')
    assert named_models(tmp_path) == {"org/tiny-model", "facebook/opt-125m", "Qwen/Qwen3-0.6B",
                                      "facebook/opt-350m", "Qwen/Qwen1.5-7B"}


def test_offline_hub_layout(tmp_path):
    config = {"architectures": ["OPTForCausalLM"], "model_type": "opt"}
    [written] = write_offline_hub(tmp_path, {"facebook/opt-125m": config})
    repo = tmp_path / "models--facebook--opt-125m"
    revision = (repo / "refs" / "main").read_text()
    assert len(revision) == 40 and written == repo / "snapshots" / revision / "config.json"
    assert json.loads(written.read_text()) == config, "the snapshot holds the config as given"
    assert write_offline_hub(tmp_path, {"facebook/opt-125m": config}) == [written], "rewriting is a no-op"


def test_model_configs_are_hub_configs():
    configs = load_model_configs()
    assert "facebook/opt-125m" in configs and not any(name.startswith("_") for name in configs)
    for name, config in configs.items():
        assert name.count("/") == 1, name
        assert config["architectures"] and config["model_type"], f"{name}: a loadable config names its architecture"


def test_per_file_counts():
    on_vllm = {"tests/v1/core/test_a.py::t1": {"outcome": "passed", "reason": ""},
               "tests/v1/core/test_a.py::t2": {"outcome": "passed", "reason": ""},
               "tests/v1/core/sub/test_b.py::t3": {"outcome": "failed", "reason": "hub"}}
    on_ref = {"tests/v1/core/test_a.py::t1": {"outcome": "passed", "reason": ""},
              "tests/v1/core/test_a.py::t2": {"outcome": "failed", "reason": "x"},
              "tests/v1/core/sub/test_b.py::t3": {"outcome": "passed", "reason": ""}}
    result = compare(on_vllm, on_ref)
    assert result["files"] == {
        "tests/v1/core/sub/test_b.py": {"collected": 1, "pass_on_vllm": 0, "pass_on_reference": 0},
        "tests/v1/core/test_a.py": {"collected": 2, "pass_on_vllm": 2, "pass_on_reference": 1},
    }, "a test passing only on the reference does not count"


def test_only_must_stay_in_the_folder(tmp_path, capsys):
    assert main(["--vllm-python", sys.executable, "--work", str(tmp_path), "--only", "tests/v1/worker"]) == 2
    assert "is not under tests/v1/core/" in capsys.readouterr().err


def test_process_alias_binds_the_names_for_every_importer(tmp_path, monkeypatch):
    (tmp_path / "fakevllm" / "core").mkdir(parents=True)
    (tmp_path / "fakevllm" / "__init__.py").write_text("")
    (tmp_path / "fakevllm" / "core" / "__init__.py").write_text("")
    (tmp_path / "fakevllm" / "core" / "pool.py").write_text("WHO = 'vllm'\n")
    (tmp_path / "fakeref.py").write_text("WHO = 'reference'\n")
    (tmp_path / "user.py").write_text("from fakevllm.core.pool import WHO\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fakevllm", "fakevllm.core", "fakevllm.core.pool", "fakeref", "user"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    process_alias.install({"fakevllm.core.pool": "fakeref"})
    import user
    from fakevllm.core import pool
    assert user.WHO == "reference" and pool.WHO == "reference", "every later importer gets the reference module"


def test_process_alias_refuses_a_module_already_imported(tmp_path, monkeypatch):
    (tmp_path / "fakeref2.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "fakevllm2.pool", type(sys)("fakevllm2.pool"))
    with pytest.raises(RuntimeError, match="imported before the alias: fakevllm2.pool"):
        process_alias.install({"fakevllm2.pool": "fakeref2"})


def _upstream_file(tmp_path, **changes):
    data = {"vllm_version": "0.33.0", "collected": 3, "pass_on_vllm": 2, "pass_on_reference": 1,
            "files": {"tests/v1/core/test_a.py": {"collected": 3, "pass_on_vllm": 2, "pass_on_reference": 1}}}
    data.update(changes)
    path = tmp_path / "up.json"
    path.write_text(json.dumps(data))
    return path


def test_load_upstream(tmp_path):
    loaded = load_upstream(_upstream_file(tmp_path))
    assert loaded["total"] == {"collected": 3, "pass_on_vllm": 2, "pass_on_reference": 1}
    assert list(loaded["files"]) == ["tests/v1/core/test_a.py"]


@pytest.mark.parametrize("changes,message", [
    ({"vllm_version": None}, "vllm_version must be a non-empty string, got None"),
    ({"files": []}, "files must be an object of per-file counts"),
    ({"pass_on_vllm": -1}, "(top level).pass_on_vllm must be a non-negative integer, got -1"),
    ({"files": {"f.py": {"collected": 1, "pass_on_vllm": "1", "pass_on_reference": 0}}},
     "files['f.py'].pass_on_vllm must be a non-negative integer, got '1'"),
])
def test_load_upstream_names_the_bad_field(tmp_path, changes, message):
    with pytest.raises(UpstreamResultsError) as info:
        load_upstream(_upstream_file(tmp_path, **changes))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_junit_classnames_map_to_files_and_classes(tmp_path):
    from harness.upstream.vllm_core_tests import read_junit
    (tmp_path / "tests/v1/core").mkdir(parents=True)
    (tmp_path / "tests/v1/core/test_p.py").write_text("")
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite>'
                     '<testcase classname="tests.v1.core.test_p.TestDense" name="test_x"/>'
                     '<testcase classname="tests.v1.core.test_p" name="test_y"/>'
                     '<testcase classname="" name="tests.v1.core.test_q"><error message="collect"/></testcase>'
                     '</testsuite></testsuites>')
    assert sorted(read_junit(junit, tmp_path)) == ["tests/v1/core/test_p.py::TestDense::test_x",
                                                   "tests/v1/core/test_p.py::test_y", "tests/v1/core/test_q.py"]


def test_report_shows_the_upstream_figures_per_release_and_file(tmp_path):
    from harness.report import render_reports
    from harness.results_model import ResultsDocument
    newer = tmp_path / "new.json"
    newer.write_text(json.dumps({"vllm_version": "0.34.0", "collected": 5, "pass_on_vllm": 4, "pass_on_reference": 4,
                                 "files": {"tests/v1/core/test_b.py": {"collected": 5, "pass_on_vllm": 4,
                                                                        "pass_on_reference": 4}}}))
    upstream = [load_upstream(newer), load_upstream(_upstream_file(tmp_path))]
    markdown = render_reports(ResultsDocument(run_info={"kvconform_version": "0.1.0"}, results=[]),
                              upstream)["compatibility.md"]
    assert "vLLM's tests/v1/core on the reference allocator" in markdown
    assert markdown.index("vLLM 0.33.0:") < markdown.index("vLLM 0.34.0:"), "releases in version order"
    rows = {" ".join(line.split()) for line in markdown.splitlines()}
    assert "| tests/v1/core/test_a.py | 3 | 2 | 1 |" in rows
    assert "| all files | 5 | 4 | 4 |" in rows


def test_select_plugin_runs_only_the_listed_tests(tmp_path):
    import os
    import subprocess
    from pathlib import Path
    (tmp_path / "test_s.py").write_text("import pytest\n"
                                        "def test_a(): pass\n"
                                        "def test_b(): assert False\n"
                                        "@pytest.mark.parametrize('x', [1, 2])\n"
                                        "def test_c(x): pass\n")
    listing = tmp_path / "ids.txt"
    listing.write_text("test_s.py::test_a\ntest_s.py::test_c[2]\n")
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "KVCONFORM_UPSTREAM_SELECT": str(listing), "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:kvconform",
                           "-p", "no:xdist", "-p", "harness.upstream.select_tests", "test_s.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    assert "2 passed, 2 deselected" in done.stdout
    # less the excluded tests (the vLLM run's not_on_cpu list), which it names in the .dropped file
    excluding = tmp_path / "not-on-cpu.txt"
    excluding.write_text("test_s.py::test_c[2]\ntest_s.py::test_gone\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:kvconform",
                           "-p", "no:xdist", "-p", "harness.upstream.select_tests", "test_s.py"],
                          cwd=tmp_path, env={**env, "KVCONFORM_UPSTREAM_EXCLUDE": str(excluding)},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 3 deselected" in done.stdout
    assert (tmp_path / "not-on-cpu.txt.dropped").read_text() == "test_s.py::test_c[2]\n", "only what was collected"


def test_run_pytest_gives_the_tests_vllms_cpu_platform_offline(tmp_path):
    """The environment the upstream runs see: vLLM's CPU platform, offline hub, and an empty
    CUDA_VISIBLE_DEVICES (vLLM 0.34's CPU platform accepts the installed Triton only then); checked by a
    test file that records its own environment."""
    root = tmp_path / "root"
    (root / "t").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    record = tmp_path / "env.json"
    (root / "t" / "test_env.py").write_text(
        "import json, os\n"
        "def test_env():\n"
        f"    json.dump({{k: os.environ.get(k) for k in ('CUDA_VISIBLE_DEVICES', 'VLLM_TARGET_DEVICE',"
        f" 'HF_HUB_OFFLINE')}}, open({str(record)!r}, 'w'))\n")
    status = vllm_core_tests.run_pytest(sys.executable, root, tmp_path / "junit.xml", [], 1,
                                        tmp_path / "log.txt", files=("t",))
    assert status == 0, (tmp_path / "log.txt").read_text()
    assert json.loads(record.read_text()) == {"CUDA_VISIBLE_DEVICES": "", "VLLM_TARGET_DEVICE": "cpu",
                                              "HF_HUB_OFFLINE": "1"}


def test_not_on_cpu_applies_while_the_needed_module_is_absent(tmp_path):
    from harness.upstream.not_on_cpu import NotOnCpuError, load_causes, not_on_cpu
    data = tmp_path / "not_on_cpu.toml"
    data.write_text('[cause.gone]\nneeds = "kvconform_no_such_module"\nreason = "it is not installed"\n'
                    '[cause.here]\nneeds = "json.decoder"\nreason = "it is installed"\n'
                    '[release."9.9.9"]\ngone = ["tests/v1/core/test_a.py::t1"]\nhere = ["tests/v1/core/test_a.py::t2"]\n')
    applying, present = not_on_cpu("9.9.9", sys.executable, data)
    assert applying == {"tests/v1/core/test_a.py::t1": "not run on vLLM (not_on_cpu.toml, gone): it is not installed"}
    assert [c.name for c in present] == ["here"], "a cause whose module is installed lets its tests run"
    assert not_on_cpu("1.0.0", sys.executable, data) == ({}, []), "a release the file does not name: everything runs"
    data.write_text('[release."9.9.9"]\nnone = ["tests/v1/core/test_a.py::t1"]\n')
    with pytest.raises(NotOnCpuError, match=r"release.'9.9.9'.none: no \[cause.none\]"):
        load_causes("9.9.9", data)


def test_not_on_cpu_lists_are_tests_of_the_folder():
    from harness.upstream.not_on_cpu import load_causes
    for release in ("0.34.0", "0.33.0"):
        causes = load_causes(release)
        tests = [t for c in causes for t in c.tests]
        assert causes and len(tests) == len(set(tests)), f"{release}: a test listed twice"
        assert all(t.startswith(vllm_core_tests.TEST_DIR + "/") for t in tests)


def test_tests_left_out_on_vllm_are_excluded_not_compared():
    on_vllm = {"tests/v1/core/test_a.py::t1": {"outcome": "passed", "reason": ""},
               "tests/v1/core/test_a.py::t2": {"outcome": "not run", "reason": "not run on vLLM (x): y"}}
    result = compare(on_vllm, {"tests/v1/core/test_a.py::t1": {"outcome": "passed", "reason": ""}})
    assert (result["collected"], result["pass_on_vllm"], result["pass_on_reference"]) == (2, 1, 1)
    assert result["tests"]["tests/v1/core/test_a.py::t2"] == {"vllm": "not run", "reference": "not run",
                                                               "excluded": "not run on vLLM (x): y"}
