"""The per-call floor of a prefix-cache lookup, side by side: what `get_computed_blocks` costs when it reads no
block hash at all, next to the 32k-token lookup that misses (`test_allocator_throughput.py::test_lookup_32k[miss]`).

A miss reads one block hash and stops, so nearly all of its time is the call's fixed cost (argument checks, the
coordinator, the empty result), which the floor measures on a prompt shorter than one block (no hash to read). The
ratio of the two implementations' misses cannot be much above the ratio of their floors.

    PYTHONPATH=$PWD <vLLM venv>/bin/python -m suites.benchmarks.lookup_floor [--rounds N]

prints, per implementation (the reference and, where vLLM imports, vLLM), the median microseconds per call of the
floor and of the miss, and the ratios. Rounds are interleaved (every round times each implementation and workload
once, in turn) and timed in the thread's CPU time, not wall time: on a machine shared with other jobs the wall time
of a 2 us call is mostly waiting for a core (load average 20 on 2 cores read 12 to 24 us per call, CPU time 2 to 4).
"""

from __future__ import annotations

import argparse
import statistics
import time

from harness.peer import peer_importable
from harness.target_spec import load_allocator_target
from suites.benchmarks import workloads as w

_CALLS_PER_ROUND = 2000


def _workloads(impl) -> dict[str, tuple]:
    """Workload name -> (manager.get_computed_blocks, request), after the 32k prompt was prefilled and freed."""
    tokens, _, miss = w.lookup_prompts(impl)
    manager = w.prefill_and_free(impl, "full", tokens)
    short = impl.make_request("short", tokens[: w.BLOCK_SIZE - 1], w.BLOCK_SIZE)
    for name, request, hit in (("floor", short, 0), ("miss", miss, 0)):
        got = manager.get_computed_blocks(request)[1]
        assert got == hit, f"{impl.name} {name}: expected a hit of {hit} tokens, got {got}"
    return {"floor": (manager.get_computed_blocks, short), "miss": (manager.get_computed_blocks, miss)}


def _time(call, request) -> float:
    """Microseconds of thread CPU time per call, over one round of calls."""
    started = time.thread_time()
    for _ in range(_CALLS_PER_ROUND):
        call(request)
    return (time.thread_time() - started) / _CALLS_PER_ROUND * 1e6


def measure(rounds: int) -> dict[str, dict[str, float]]:
    """Implementation name -> workload -> median microseconds per call over `rounds` interleaved rounds."""
    names = ["reference"] + (["vllm"] if peer_importable() else [])
    impls = [load_allocator_target(name) for name in names]
    sides = {impl.name: _workloads(impl) for impl in impls}
    samples: dict[str, dict[str, list[float]]] = {n: {k: [] for k in s} for n, s in sides.items()}
    for _ in range(rounds):
        for name, workloads in sides.items():
            for workload, (call, request) in workloads.items():
                samples[name][workload].append(_time(call, request))
    return {n: {k: statistics.median(v) for k, v in s.items()} for n, s in samples.items()}


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m suites.benchmarks.lookup_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    args = parser.parse_args(argv)
    figures = measure(args.rounds)
    for name, row in figures.items():
        print(f"{name}: floor {row['floor']:.2f} us, miss {row['miss']:.2f} us per call")
    if len(figures) == 2:
        (_, ref), (other, theirs) = figures.items()
        print(f"ratio {other} / reference: floor {theirs['floor'] / ref['floor']:.2f}x, "
              f"miss {theirs['miss'] / ref['miss']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
