"""Repository-level pytest configuration: Hypothesis profiles (the suites themselves ship with the package), and
compiled bytecode for the Python processes the test command starts."""

import os

from hypothesis import HealthCheck, settings

from harness.bytecode import share_bytecode

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The test command starts some eighty Python processes (xdist workers; pytest and kvconform runs in tests/,
# where a fresh process is the evidence): they share compiled bytecode (harness.bytecode).
share_bytecode()
