"""Batch config resolution throughput of the reference resolver (target: 30,000 cases/s on one core)."""

from __future__ import annotations

import itertools

from reference_impl.config import resolve_cases

ERAS = ("pre-seed", "seed", "v0.20", "v0.22", "v0.33")
CONNECTORS = (None, "NixlConnector", "ExampleConnector", "MultiConnector")


def batch() -> list[dict]:
    """A mixed batch: every flag, platform and connector kind, half with chunked local attention."""
    cases = []
    for era, flag, platform, connector, chunk in itertools.product(
        ERAS, (None, True, False), ("cuda", "cpu", "tpu", "unspecified"), CONNECTORS, (None, 8192)
    ):
        case = {"profile": era, "flag": flag, "platform": platform, "attention_chunk_size": chunk, "stage": "create_connector"}
        if connector:
            case["kv_connector"] = connector
        if connector == "MultiConnector":
            case["multi_connector_children"] = ["NixlConnector", "OffloadingConnector"]
        cases.append(case)
    return cases


def test_batch_resolution_throughput(benchmark, kvconform_record):
    cases = batch()
    outcomes = benchmark(resolve_cases, cases)
    assert len(outcomes) == len(cases)
    assert not any(o["error"] and o["error"]["stage"] == "input" for o in outcomes), "the batch must be valid input"
    stats = getattr(benchmark, "stats", None)
    if stats is not None and stats.stats.median:
        median = stats.stats.median
        kvconform_record(
            suite="benchmark",
            cell={"workload": f"config resolution, batch of {len(cases)}", "implementation": "reference"},
            metrics={"cases_per_s": len(cases) / median, "median_s": median},
        )
