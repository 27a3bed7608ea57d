"""Options shared by every suite and the pytest header line naming kvconform's version."""

from __future__ import annotations

from importlib import metadata

from harness.plugins.activation import is_active
from harness.standalone import standalone_module

# The profiles' names from the release registry, read without importing the reference engine (a dormant plugin).
PROFILES = standalone_module("releases.py").profiles()


def kvconform_version() -> str:
    """The installed kvconform distribution's version, or 'unknown' when run from a bare tree."""
    try:
        return metadata.version("kvconform")
    except metadata.PackageNotFoundError:
        return "unknown"


def pytest_addoption(parser):
    group = parser.getgroup("kvconform", "kvconform conformance suites")
    group.addoption(
        "--vllm-version",
        dest="kvconform_vllm_version",
        default=None,
        metavar="X.Y.Z|PROFILE",
        help=f"vLLM rule era to test (a version such as 0.13.0 or a profile: {', '.join(PROFILES)}).",
    )


def pytest_report_header(config):
    return [f"kvconform {kvconform_version()}"] if is_active(config) else []
