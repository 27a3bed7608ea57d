"""Floors of two throughput workloads, side by side: what the workload costs any implementation, next to what it
costs the reference and vLLM. A ratio of two implementations cannot be much above the ratio of what lies above
a floor they share.

`lookup`: the per-call floor of a prefix-cache lookup. A 32k-token lookup that misses
(`test_allocator_throughput.py::test_lookup_32k[miss]`) reads one block hash and stops, so nearly all of its time
is the call's fixed cost (argument checks, the coordinator, the empty result), which the floor measures on a
prompt shorter than one block (no hash to read).

`steady`: the steady state of `pool.steady_k16` (`test_block_pool_throughput.py`), after the FIFO ring has turned
once (every block it frees then is unhashed and goes back to the head, and the next allocation takes exactly
those blocks back). Beside vLLM and the reference it times, on pools built by the reference:
- `minimal`: `MinimalSteadyPool`, the least a pool following vLLM's rules does there (hand out the blocks on top
  of the free stack and count them up; count freed blocks down, check each is held once, owned and unhashed, and
  stack them back) and nothing else: it refuses any other state rather than do less;
- `lists`: `ListsOnly`, the workload's list handling and the two calls with no block's count touched (not a pool:
  what every implementation pays around its per-block work, the ring's cold blocks included).

    PYTHONPATH=$PWD <vLLM venv>/bin/python -m suites.benchmarks.floor {lookup,steady} [--rounds N]

prints, per implementation (vLLM only where it imports), the median time per call (lookup) or per get/free pair
(steady), and the ratios to vLLM. Rounds are interleaved (every round times each side once, in turn) and timed in
the thread's CPU time, not wall time: on a machine shared with other jobs the wall time of a 2 us call is mostly
waiting for a core (load average 20 on 2 cores read 12 to 24 us per call, CPU time 2 to 4).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from harness.peer import peer_importable
from harness.target_spec import load_allocator_target
from suites.benchmarks import workloads as w

_LOOKUP_CALLS_PER_ROUND = 2000
_STEADY_PAIRS_PER_ROUND = 10_000
_STEADY_K = 16


def _implementations():
    names = ["reference"] + (["vllm"] if peer_importable() else [])
    return [load_allocator_target(name) for name in names]


def interleaved_medians(sides: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Side name -> median over `rounds` rounds of what its timer returns; every round calls each timer once."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, timer in sides.items():
            samples[name].append(timer())
    return {name: statistics.median(v) for name, v in samples.items()}


# ----------------------------------------------------------------------------------------------------- lookup
def _lookup_timer(call, request) -> Callable[[], float]:
    def one_round() -> float:
        started = time.thread_time()
        for _ in range(_LOOKUP_CALLS_PER_ROUND):
            call(request)
        return (time.thread_time() - started) / _LOOKUP_CALLS_PER_ROUND * 1e6
    return one_round


def lookup_sides() -> dict[str, Callable[[], float]]:
    """'<implementation> floor' and '<implementation> miss' -> a timer of one round (microseconds per call), after
    the 32k prompt was prefilled and freed."""
    sides = {}
    for impl in _implementations():
        tokens, _, miss = w.lookup_prompts(impl)
        manager = w.prefill_and_free(impl, "full", tokens)
        short = impl.make_request("short", tokens[: w.BLOCK_SIZE - 1], w.BLOCK_SIZE)
        for name, request in (("floor", short), ("miss", miss)):
            got = manager.get_computed_blocks(request)[1]
            assert got == 0, f"{impl.name} {name}: expected no hit, got {got} tokens"
            sides[f"{impl.name} {name}"] = _lookup_timer(manager.get_computed_blocks, request)
    return sides


# ----------------------------------------------------------------------------------------------------- steady
class MinimalSteadyPool:
    """The least work a pool following vLLM's rules does in `pool.steady_k16`'s steady state, on a reference
    pool's blocks and free stack: `get_new_blocks` takes the top of the stack (the blocks freed last, which the
    rules hand out first) and counts each up (no block there has a key to evict: the reference keeps keyed
    blocks off the stack), `free_blocks` counts each down after checking it is held once, owned and unhashed
    (an unhashed block goes back to the head) and stacks them back in the rules' order. Any other state (a
    short stack, a shared, foreign or keyed block to free) raises: it never does less than a pool must."""

    def __init__(self, pool):
        self._queue = pool.free_block_queue
        self._own = pool._weak_self

    def get_new_blocks(self, num_blocks: int) -> list:
        """The top `num_blocks` of the free stack, ref_cnt 1 each."""
        queue = self._queue
        front = queue.front
        if not 0 < num_blocks <= len(front):
            raise AssertionError(f"the steady state hands out blocks from the free stack; it holds {len(front)}")
        out = front[:-num_blocks - 1:-1]
        del front[-num_blocks:]
        queue.num_free_blocks -= num_blocks
        for block in out:
            block.ref_cnt = 1
        return out

    def free_blocks(self, ordered_blocks: list) -> None:
        """Count each block down (held once, owned, unhashed) and stack them back, the first on top."""
        own = self._own
        for block in ordered_blocks:
            if block.ref_cnt != 1 or block.pool is not own or block.block_hash is not None:
                raise AssertionError(f"block {block.block_id} is outside the steady state (shared, foreign or keyed)")
            block.ref_cnt = 0
        queue = self._queue
        queue.front += reversed(ordered_blocks)
        queue.num_free_blocks += len(ordered_blocks)


class ListsOnly(MinimalSteadyPool):
    """Not a pool: `MinimalSteadyPool`'s list handling with no block's count read or written, to time what the
    workload costs around the per-block work (calls, slices, the ring, its cold blocks)."""

    def get_new_blocks(self, num_blocks: int) -> list:
        """The top `num_blocks` of the free stack, counts untouched."""
        queue = self._queue
        front = queue.front
        out = front[:-num_blocks - 1:-1]
        del front[-num_blocks:]
        queue.num_free_blocks -= num_blocks
        return out

    def free_blocks(self, ordered_blocks: list) -> None:
        """Stack the blocks back, counts untouched."""
        queue = self._queue
        queue.front += reversed(ordered_blocks)
        queue.num_free_blocks += len(ordered_blocks)


def steady_state(target, num_blocks: int = 100_000):
    """A `make_steady_pool` pool and ring, turned once: every allocation it started with (cached, freed to the
    tail) has been freed, so from here on every freed block is unhashed. With 100,000 blocks 31 free blocks stay
    on the free stack past the ring, so every later allocation takes blocks off the stack."""
    pool, ring = w.make_steady_pool(target, num_blocks, _STEADY_K)
    w.steady_pairs(pool, ring, _STEADY_K, len(ring))
    return pool, ring


def _steady_timer(pool, ring) -> Callable[[], float]:
    def one_round() -> float:
        started = time.thread_time()
        w.steady_pairs(pool, ring, _STEADY_K, _STEADY_PAIRS_PER_ROUND)
        return (time.thread_time() - started) / _STEADY_PAIRS_PER_ROUND * 1e9
    return one_round


def steady_sides(num_blocks: int = 100_000) -> dict[str, Callable[[], float]]:
    """Side name -> a timer of one round of steady pairs (nanoseconds per pair), each side on its own pool."""
    impls = _implementations()
    sides = {impl.name: _steady_timer(*steady_state(impl, num_blocks)) for impl in impls}
    reference = impls[0]
    for name, wrap in (("minimal", MinimalSteadyPool), ("lists", ListsOnly)):
        pool, ring = steady_state(reference, num_blocks)
        sides[name] = _steady_timer(wrap(pool), ring)
    return sides


# ----------------------------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m suites.benchmarks.floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", choices=["lookup", "steady"], help="which workload's floor")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds: {args.rounds} is not accepted; expected a whole number >= 1")
    peer = next((impl.name for impl in _implementations() if impl.name != "reference"), None)
    if args.workload == "lookup":
        figures = interleaved_medians(lookup_sides(), args.rounds)
        for name, value in figures.items():
            print(f"{name}: {value:.2f} us per call")
        for kind in ("floor", "miss") if peer else ():
            print(f"{peer} / reference, {kind}: {figures[f'{peer} {kind}'] / figures[f'reference {kind}']:.2f}x")
    else:
        figures = interleaved_medians(steady_sides(), args.rounds)
        for name, value in figures.items():
            print(f"{name}: {value:.0f} ns per pair")
        for name in ("reference", "minimal", "lists") if peer else ():
            print(f"{peer} / {name}: {figures[peer] / figures[name]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
