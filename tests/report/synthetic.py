"""Synthetic results documents for the report, diff and merge tests (hand-made data, no suite needed)."""

from __future__ import annotations

import itertools

from harness.outcomes import legacy_record, legacy_skip_cause
from harness.results_model import GROUPS_KEY, ResultsDocument, make_entry
from reference_impl.config.outcome import Outcome
from reference_impl.engine.presets import get_preset
from reference_impl.vocabulary import FLAGS as FLAG_IDS, NO_CONNECTOR, NO_FEATURES, PLATFORMS

ERAS = ("v0.10", "v0.11", "pre-seed", "seed", "v0.14", "v0.18", "v0.19", "v0.20", "v0.21", "v0.22", "v0.23",
        "v0.30", "v0.33")
FLAGS = (None, True, False)
FEATURES = ("none", "kv_events", "chunked_local_env_on", "chunked_local_env_off", "chunked_local_eagle",
            "hisparse", "offload_native", "offload_lmcache")
CONNECTORS = (NO_CONNECTOR, "LMCacheConnectorV1", "NixlConnector", "MooncakeConnector", "OffloadingConnector",
              "SimpleCPUOffloadConnector", "ExampleConnector", "ext-hma", "ext-non-hma", "multi-all-hma",
              "multi-mixed", "multi-empty", "multi-nested", "multi-renamed", "P2pNcclConnector", "DecodeBench")
STAGES = ("config", "create_connector")
WARNINGS = (
    "Turning off hybrid kv cache manager because `--kv-transfer-config` is set.",
    "There is a latency regression when using chunked local attention with the hybrid KV cache manager.",
    "Connector X does not support HMA; turning it off.",
)


def run_info(**overrides) -> dict:
    """A plausible run_info block."""
    info = {"kvconform_version": "0.1.0", "git_commit": "0" * 40, "git_dirty": False, "target": None,
            "platform": {"system": "Linux"}, "python_version": "3.11.7", "torch_version": "2.13.0+cpu",
            "machine": {"arch": "x86_64", "node": "ci", "cpu_count": 2},
            "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:30+00:00",
            "wall_seconds": 30.0}
    info.update(overrides)
    return info


def outcome(resolved=None, warnings=(), error=None, unknown=None, rules=()) -> dict:
    """A typed outcome's JSON form, its messages given their ids as a target gives them (`warnings`: texts; `error`:
    its type, stage and text)."""
    return Outcome.from_dict({"id": "x", "resolved_disable_hma": resolved, "warnings": list(warnings), "error": error,
                              "rules": list(rules), "unknown": unknown}).to_dict()


def config_entry(era="seed", flag=None, platform="cuda", features=NO_FEATURES, connector=NO_CONNECTOR, stage="config",
                 actual=None, expected=None, status="passed", message=None) -> dict:
    """One config-matrix entry as the results plugin writes it."""
    cell = {"era": era, "flag": flag, "platform": platform, "features": features, "connector": connector,
            "stage": stage}
    flag_id = next(ident for ident, value in FLAG_IDS.items() if value is flag)
    actual = actual if actual is not None else outcome(resolved=False)
    return make_entry(nodeid=f"suites/config/test_matrix.py::test_cell[{era}-{flag_id}-{platform}-{features}-"
                             f"{connector}-{stage}]", suite="config", status=status, cell=cell,
                      expected=expected if expected is not None else actual, actual=actual, message=message,
                      duration=0.001)


def synthetic_outcome(index: int) -> dict:
    """A deterministic mix of every kind of outcome."""
    kind = (index * 7919) % 11
    if kind < 4:
        return outcome(resolved=False)
    if kind < 7:
        return outcome(resolved=True, warnings=WARNINGS[: 1 + kind % 3])
    if kind < 9:
        return outcome(error={"type": "ValueError", "stage": "config",
                              "text": f"Hybrid KV cache manager is disabled but failed (case {kind})"})
    return outcome(unknown="TPU support comes from tpu_inference; not decidable from vLLM's source")


def big_matrix(count: int = 50_000) -> ResultsDocument:
    """`count` config entries spread over every dimension (for the rendering benchmark)."""
    entries = []
    product = itertools.product(ERAS, CONNECTORS, FEATURES, PLATFORMS, FLAGS, STAGES)
    for index, (era, connector, features, platform, flag, stage) in enumerate(product):
        if index >= count:
            break
        entries.append(config_entry(era, flag, platform, features, connector, stage,
                                    actual=synthetic_outcome(index),
                                    status="failed" if index % 997 == 0 else "passed",
                                    message="resolved value differs" if index % 997 == 0 else None))
    return ResultsDocument(run_info=run_info(), results=entries)


W1 = "Turning off hybrid kv cache manager because `--kv-transfer-config` is set."
E_H = "HiSparse currently requires NVIDIA CUDA."
W2 = "Turning off hybrid kv cache manager because connector LMCacheConnectorV1 does not support HMA."
E_F = "Connector LMCacheConnectorV1 does not support HMA but HMA is enabled."
TPU = "TPU support comes from tpu_inference"


def config_document() -> ResultsDocument:
    """A small hand-checked matrix: two eras, every kind of cell, one mismatch, one skip, one change between eras,
    and in each era one configuration where a connector meets a feature (listed under the era's table)."""
    entries = [
        config_entry("seed", None, "cuda", "none", NO_CONNECTOR, actual=outcome(resolved=False)),
        config_entry("seed", None, "cuda", "none", "LMCacheConnectorV1", actual=outcome(resolved=True, warnings=[W1])),
        config_entry("seed", False, "cuda", "none", "LMCacheConnectorV1", actual=outcome(resolved=False)),
        config_entry("seed", False, "cuda", "none", "LMCacheConnectorV1", stage="create_connector",
                     actual=outcome(error={"type": "ValueError", "stage": "create_connector", "text": E_F})),
        config_entry("seed", True, "cuda", "none", NO_CONNECTOR, actual=outcome(resolved=True), status="failed",
                     message="expected resolved False"),
        config_entry("seed", None, "rocm", "none", NO_CONNECTOR, actual=None, status="skipped", message="ROCm not modelled"),
        config_entry("v0.33", None, "cuda", "none", NO_CONNECTOR, actual=outcome(resolved=False)),
        config_entry("v0.33", None, "cuda", "none", "LMCacheConnectorV1", actual=outcome(resolved=True, warnings=[W2])),
        config_entry("v0.33", None, "tpu", "none", NO_CONNECTOR, actual=outcome(unknown=TPU)),
        config_entry("seed", True, "rocm", "kv_events", "LMCacheConnectorV1",
                     actual=outcome(resolved=True, warnings=[W1])),
        config_entry("v0.33", None, "tpu", "hisparse", "LMCacheConnectorV1", stage="create_connector",
                     actual=outcome(error={"type": "ValueError", "stage": "config", "text": E_H})),
    ]
    entries[5]["actual"] = None
    return ResultsDocument(run_info=run_info(), results=entries)


def na_record(status: str, message: str | None) -> dict | None:
    """The typed N/A record the suite records beside a skip it words `message` (each kind's wording:
    `harness.outcomes.message_of`), for entries built by hand as the suite records them."""
    return legacy_record(message, "connector") if status == "skipped" else None


def skip_cause_record(status: str, message: str | None, suite: str = "connector") -> dict | None:
    """The typed skip cause the suite records beside a skip it words `message` (`cannot run here: ...`,
    `inconclusive: ...`: `harness.outcomes.skip_message_of`), for entries built by hand."""
    if status != "skipped" or (suite == "connector" and na_record(status, message) is not None):
        return None
    return legacy_skip_cause(message, suite)


def groups_record(preset: str) -> dict:
    """The KV cache group count the connector suite records in a cell's `extra` for `preset` (the model presets
    themselves say it: `reference_impl.engine.presets`), for entries built by hand; nothing for a cell without a
    preset ("-")."""
    try:
        return {GROUPS_KEY: len(get_preset(preset).groups)}
    except ValueError:
        return {}
