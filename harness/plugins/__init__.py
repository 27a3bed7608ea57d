"""pytest glue, one module per concern; `harness.pytest_plugin` loads them all."""
