"""The vllm config target's stand-ins for MultiConnector children that cannot be built on CPU keep what vLLM 0.21 and
0.22's MultiConnector asserts over (`all(supports_hma(c) for c in self._connectors)`): an HMA child stays HMA, a
nested MultiConnector runs its own assertion. Runs in the vLLM 0.22.0 venv where it is installed (skipped
otherwise, naming it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.vllm_venvs import release_python

REPO = Path(__file__).resolve().parents[2]


def test_multi_connector_children_stand_ins_keep_hma_on_vllm_022():
    """Measured on vLLM 0.22.0 (era v0.22's matrix): MultiAllHMA (DecodeBench + ExampleHiddenStates, whose
    constructor asserts a speculative method here) was E-MULTI-ASSERT with HMA-less stand-ins; MultiNestedMixed
    must still assert (its inner MultiConnector holds ExampleConnector)."""
    python = release_python("0.22.0")
    cells = ["v0.22-F-cpu-none-MultiAllHMA-create", "v0.22-F-cpu-none-MultiNestedMixed-create",
             "v0.22-F-cpu-none-MultiNested-create"]
    done = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
         "suites/config", "--vllm-version", "v0.22", "--hma-target", "vllm", "-k", " or ".join(cells)],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout, done.stdout[-1000:]
