"""Throughput benchmarks (pytest-benchmark), run side by side with the peer implementation where present."""
