"""kvconform conformance suites, runnable with `pytest --pyargs suites` after installing kvconform."""
