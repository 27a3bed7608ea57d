"""docs/vendor.md's "Your first hour" runs as written: a vendor's package made from the template and its
declaration, outside the checkout, found by `--kv-connector mypkg.declare:MyConnectorUnderTest` and reported on by
`kvconform report`.

The block is read from the page, so a step that stops working there (a missing `mkdir`, a package layout that
does not import as `mypkg.mod`) fails here. Three substitutions keep it cheap and leave this venv alone, each
asserted to find its line: the template's own run is left out (tests/connector/test_template_connector.py runs
it), `pip install -e ./mypkg` becomes `PYTHONPATH=$PWD/mypkg` (the page names that alternative), and the two
suite runs keep one check (`-k c01`) without xdist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from harness.results_model import load_results

REPO = Path(__file__).resolve().parents[2]
INSTALL = "pip install -e ./mypkg"
SUITE_RUN = "pytest --pyargs suites.connector --kv-connector mypkg.declare:MyConnectorUnderTest -n 2"
REPORT_RUN = ("kvconform report --suite suites.connector --kv-connector mypkg.declare:MyConnectorUnderTest -n 2 "
              "--output-dir my-report")


def first_hour_block() -> list[str]:
    """The commands of the page's first `bash` block under "Your first hour", comments dropped (the `sh` block
    before it installs kvconform from its wheel: it needs the network, and this test runs in the checkout's venv)."""
    section = (REPO / "docs" / "vendor.md").read_text().split("## Your first hour", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_first_hour_block_runs_as_written(tmp_path):
    lines = first_hour_block()
    assert lines[0].startswith("pytest --pyargs suites.connector --kv-connector "
                               "harness.targets.connector.template_declaration:TemplateConnectorUnderTest")
    script = []
    for line in lines[1:]:
        command = line.split("  #", 1)[0].strip()
        if command == INSTALL:
            command = 'export PYTHONPATH="$PWD/mypkg:$PYTHONPATH"'
        elif command == SUITE_RUN:
            command = SUITE_RUN.replace("-n 2", "-p no:xdist -k c01")
        elif command == REPORT_RUN:
            command = REPORT_RUN.replace("-n 2", "-n 0") + " -- -k c01"
        script.append(command)
    assert sum(c.startswith("export PYTHONPATH") for c in script) == 1, f"{INSTALL!r} is no longer on the page"
    assert sum("-k c01" in c for c in script) == 2, "the page's suite and report commands changed"
    bin_dir = str(Path(sys.executable).parent)  # the venv's python, pytest and kvconform, as when activated
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=str(REPO))
    done = subprocess.run(["bash", "-e", "-c", "\n".join(script)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    where = f"\nstdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 0, where
    assert "kv-connectors: MyConnector (--kv-connector, mypkg.mod.MyConnector, HMA)" in done.stdout, where
    assert "C36  MUST    determinism-across-processes" in done.stdout, "kvconform checks lists the catalogue" + where
    report = (tmp_path / "my-report" / "compatibility.md").read_text()
    assert re.search(r"^\| check +\| tier +\| description +\| MyConnector +\|$", report, re.M), report
    assert re.search(r"^\| C01 declares-hma +\| MUST +\|.*\| ✅ pass +\|$", report, re.M), report
    # Only C01 ran (-k c01): it reads the class, so the HMA verdict rests on no multi-group behaviour (issue 31).
    assert "MyConnector declares `SupportsHMA`, not exercised: only the declaration check C01 ran" in report
    assert "Produced by kvconform " in report and " · target connectors mypkg.declare:MyConnectorUnderTest." in report, \
        "the report names the connector that ran, not 'reference'"
    results = load_results(tmp_path / "my-report" / "results.json.gz").to_json()
    assert results["run_info"]["target"] == "connectors mypkg.declare:MyConnectorUnderTest"
    # The declaration the page copies took effect: its profile is the template's, declared in mypkg.declare.
    assert ("kv-connector profile: MyConnector: stores and loads KV, declares HMA, async loads configured, a store "
            "that lives and dies with its process (a new process starts empty) (inferred, options declared)") \
        in done.stdout, where


def test_the_wheel_the_page_names_is_the_one_the_checkout_builds():
    """vendor.md installs `dist/kvconform-VERSION-py3-none-any.whl` (`pip wheel` names it from pyproject.toml)."""
    import tomllib

    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    named = set(re.findall(r"kvconform-([\w.]+)-py3-none-any\.whl", (REPO / "docs" / "vendor.md").read_text()))
    assert named == {version}
