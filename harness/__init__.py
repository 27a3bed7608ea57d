"""kvconform's harness: the command line, the pytest plugin, reports, baselines and merging of runs.

`harness.ConnectorUnderTest` is the declaration a connector vendor subclasses
(`harness.targets.connector.declaration`; docs/vendor.md)."""

__all__ = ["ConnectorUnderTest"]


def __getattr__(name: str):
    # Imported on first use: `import harness` (every pytest session's plugin does it) stays as light as it was.
    if name == "ConnectorUnderTest":
        from harness.targets.connector.declaration import ConnectorUnderTest

        return ConnectorUnderTest
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
