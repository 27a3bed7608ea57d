"""The names kvconform puts into a user's environment are exactly the ones the README's "Package names" section
decides: three top-level packages (`harness`, `reference_impl`, `suites`), one command and one pytest plugin, both
named `kvconform`. A new top-level package (a `tests` or `scripts` swept into the wheel, another generic name) or a
second command fails here until the decision is made again and written down."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest
import setuptools

REPO = Path(__file__).resolve().parents[1]
#: Reviewed: the decision of the README's "Package names" section.
TOP_LEVEL = {"harness", "reference_impl", "suites"}
ENTRY_POINTS = {"console_scripts": {"kvconform"}, "pytest11": {"kvconform"}}


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def _readme_section() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^### Package names\n(.*?)(?=^#)", text + "\n#", flags=re.M | re.S)
    assert match, "README.md has no '### Package names' section"
    return match.group(1)


def test_the_build_installs_exactly_the_documented_top_level_packages():
    # The wheel's packages as setuptools finds them from pyproject's [tool.setuptools.packages.find] (namespace
    # discovery, its default), from the checkout: what `pip install .` puts into site-packages.
    found = _pyproject()["tool"]["setuptools"]["packages"]["find"]
    packages = setuptools.find_namespace_packages(where=str(REPO), include=found["include"],
                                                  exclude=found.get("exclude", ()))
    assert {name.split(".")[0] for name in packages} == TOP_LEVEL


def test_the_command_and_the_plugin_are_the_only_entry_points_and_the_readme_names_every_package():
    project = _pyproject()["project"]
    assert set(project.get("scripts", {})) == ENTRY_POINTS["console_scripts"]
    assert set(project.get("gui-scripts", {})) == set()
    assert {group: set(names) for group, names in project.get("entry-points", {}).items()} == \
        {"pytest11": ENTRY_POINTS["pytest11"]}
    section = _readme_section()
    assert all(f"`{name}`" in section for name in TOP_LEVEL), section


def test_an_installed_kvconform_has_the_same_top_level_names():
    # Where this Python has kvconform installed (a wheel or an editable install), its metadata agrees.
    try:
        distribution = importlib.metadata.distribution("kvconform")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("kvconform is not installed in this Python (a checkout on PYTHONPATH): the build's discovery "
                    "is checked from pyproject.toml instead")
    top_level = distribution.read_text("top_level.txt")
    assert top_level is not None, "the installed kvconform's metadata has no top_level.txt"
    assert set(top_level.split()) == TOP_LEVEL
    assert {ep.name for ep in distribution.entry_points if ep.group == "console_scripts"} == \
        ENTRY_POINTS["console_scripts"]
    assert {ep.name for ep in distribution.entry_points if ep.group == "pytest11"} == ENTRY_POINTS["pytest11"]
