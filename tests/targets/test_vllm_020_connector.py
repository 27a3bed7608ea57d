"""vLLM 0.20.0's SimpleCPUOffloadConnector through the adapter on this CPU machine (skipped, naming the venv,
where that release is not installed). Before the stand-ins knew 0.20's names (`is_pin_memory_available`,
`_batch_memcpy_fn`) every check ended at `register_kv_caches` with "Torch not compiled with CUDA enabled"; before
the adapter bound the block pool as 0.20's Scheduler does (`bind_gpu_block_pool`) and shared the engine's
NONE_HASH, the connector stored nothing and found nothing. C04 (a lookup repeated after a store answers the
same hit) needs all of that. The scratch_group preset has no layout on 0.20.0 (no prefix_cacheable)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_ROOT = Path(os.environ.get("KVCONFORM_CI_VLLM_VENV_ROOT") or "/work/venvs")

# Reviewed data: the status of each C04 cell on vLLM 0.20.0 (measured 2026-12-05), and the N/A reason's start.
EXPECTED = {"fa_only": "passed", "fa+swa": "passed", "fa16+swa32": "passed", "fa+mamba_align": "passed",
            "fa+swa+mamba": "passed", "scratch_group": "skipped"}
SCRATCH_NA = "N/A on 0.20.0: KVCacheSpec has no prefix_cacheable"


def test_simple_cpu_offload_runs_on_vllm_0_20_stand_ins(tmp_path):
    python = VENV_ROOT / "vllm-0.20.0" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"vLLM 0.20.0 is not installed here (no {python}; scripts/install-vllm.sh 0.20.0 "
                    f"{VENV_ROOT}/vllm-0.20.0, or KVCONFORM_CI_VLLM_VENV_ROOT)")
    results = tmp_path / "results.json"
    done = subprocess.run([str(python), "-m", "pytest", "suites/connector", "-p", "no:cacheprovider", "-n", "0", "-q",
                           "-W", "ignore::DeprecationWarning", "--kv-connector", "vllm:SimpleCPUOffloadConnector",
                           "-k", "C04", "--kvconform-results", str(results)],
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=600)
    assert results.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    cells = {r["cell"]["preset"]: r for r in json.loads(results.read_text())["results"]}
    assert {preset: r["status"] for preset, r in cells.items()} == EXPECTED, done.stdout[-3000:]
    assert cells["scratch_group"]["message"].startswith(SCRATCH_NA), cells["scratch_group"]["message"]
