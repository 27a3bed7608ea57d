"""Repository-level pytest configuration: Hypothesis profiles (the suites themselves ship with the package),
single-threaded torch, compiled bytecode for the Python processes the test command starts, and xdist's
work-stealing schedule."""

import os

from hypothesis import HealthCheck, settings

from harness.bytecode import share_bytecode

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The KV tensors of the suites are tiny: torch's intra-op thread pool only spins, and with two xdist workers on two
# cores it nearly doubled the connector suite's CPU time. Set before anything imports torch; processes the tests
# start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The test command starts some eighty Python processes (xdist workers; pytest and kvconform runs in tests/,
# where a fresh process is the evidence): they share compiled bytecode (harness.bytecode).
share_bytecode()


def pytest_configure(config):
    """`-n N` without `--dist` steals work: xdist's default "load" schedule hands each worker its share up
    front, and this repository's tests range from 1 ms matrix cells to 30 s end-to-end runs, so one worker
    used to sit idle for two minutes while the other worked through a queue of slow tests."""
    args = config.invocation_params.args
    if getattr(config.option, "dist", "no") == "load" and not any(a == "-d" or a.startswith("--dist") for a in args):
        config.option.dist = "worksteal"
