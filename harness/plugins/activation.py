"""Whether kvconform takes part in a pytest session.

Installed, kvconform's plugin is loaded by every pytest session of its environment (a `pytest11` entry
point). It acts only in a session that asks for it:

- a kvconform option is given (any option of the `kvconform` group other than its default), or the
  environment names a config target (`KVCONFORM_TARGET`);
- the session's test paths reach the kvconform suites: `suites/...`, `--pyargs suites...`, or a folder that
  pytest would recurse into down to them (the repository root; never through a virtual environment or
  site-packages, where pytest does not collect);
- a collected test uses one of the plugin's fixtures (`kvconform_record`, `kv_allocator`, ...).

Any other session (a vendor's own tests in the same environment) gets no header line, imports neither
torch nor the reference engine, runs no resolver probe, and keeps pytest's own console output.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

GROUP = "kvconform"
TARGET_ENV = "KVCONFORM_TARGET"
SUITES_PACKAGE = "suites"
#: The fixtures the plugin defines: a test using one takes part in kvconform.
FIXTURES = frozenset({"kvconform_record", "kv_allocator", "reference_allocator", "hma_target"})

_ACTIVE = pytest.StashKey[bool]()
_OPTIONS: dict[str, object] = {}  # dest -> default, of every option in the kvconform group
_OPTION_NAMES: set[str] = set()  # their long names, as spelled on a command line

# The folder the `suites` package is installed in, next to `harness` (site-packages, or the source tree).
SUITES_DIR = Path(__file__).resolve().parents[2] / SUITES_PACKAGE


def remember_options(parser) -> None:
    """Note the kvconform group's options and defaults (called once the concern plugins added theirs)."""
    for option in parser.getgroup(GROUP).options:
        _OPTIONS[option.dest] = getattr(option, "default", None)
        _OPTION_NAMES.update(option.names())


def _option_given(config) -> bool:
    """A kvconform option differs from its default, or is spelled on the command line (even at its default)."""
    if any(getattr(config.option, dest, default) != default for dest, default in _OPTIONS.items()):
        return True
    return any(arg.split("=", 1)[0] in _OPTION_NAMES for arg in config.invocation_params.args)


def _skipped_by_pytest(parts: tuple[str, ...], start: Path) -> bool:
    """True when pytest would not recurse from `start` through `parts` (a hidden folder, a virtual
    environment, an installed package folder)."""
    here = start
    for part in parts[:-1]:
        if part.startswith(".") or part in ("site-packages", "dist-packages"):
            return True
        here = here / part
        if (here / "pyvenv.cfg").exists():
            return True
    return False


def reaches_suites(arg: str, invocation_dir: Path, pyargs: bool, suites_dir: Path = SUITES_DIR) -> bool:
    """True when pytest, given the test path (or `--pyargs` module) `arg`, would collect from `suites_dir`."""
    name = arg.split("::", 1)[0]
    if pyargs and (name == SUITES_PACKAGE or name.startswith(SUITES_PACKAGE + ".")):
        return True
    try:
        path = (invocation_dir / name).resolve()
    except (OSError, RuntimeError):
        return False
    if path == suites_dir or suites_dir in path.parents:
        return True
    if path in suites_dir.parents:
        return not _skipped_by_pytest(suites_dir.relative_to(path).parts, path)
    return False


def reaches_package(config, package: str, suites_dir: Path = SUITES_DIR) -> bool:
    """True when the session's test paths (or `--pyargs` modules) would collect from the suites' sub-package
    `package` ("connector": `suites/connector`), as `reaches_suites` decides for the whole package."""
    qualified = f"{SUITES_PACKAGE}.{package}"
    invocation_dir = Path(config.invocation_params.dir)
    pyargs = bool(getattr(config.option, "pyargs", False))
    for arg in map(str, config.args):
        name = arg.split("::", 1)[0]
        if pyargs and (name in (SUITES_PACKAGE, qualified) or name.startswith(qualified + ".")):
            return True
        if pyargs and name.startswith(SUITES_PACKAGE + "."):
            continue  # another sub-package's module
        if reaches_suites(arg, invocation_dir, False, suites_dir / package):
            return True
    return False


def _decide(config) -> bool:
    if _option_given(config) or os.environ.get(TARGET_ENV):
        return True
    if not SUITES_DIR.is_dir():
        return False
    invocation_dir = Path(config.invocation_params.dir)
    pyargs = bool(getattr(config.option, "pyargs", False))
    return any(reaches_suites(str(arg), invocation_dir, pyargs) for arg in config.args)


def is_active(config) -> bool:
    """True when this session takes part in kvconform (decided at configure, widened at collection)."""
    active = config.stash.get(_ACTIVE, None)
    if active is None:
        active = config.stash[_ACTIVE] = _decide(config)
    return active


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Decide before the other kvconform plugins configure (they ask)."""
    is_active(config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session, config, items):
    """A collected test that uses a kvconform fixture makes the session a kvconform one (e.g. a project's
    own suite recording cells with `kvconform_record`)."""
    if not is_active(config) and any(FIXTURES.intersection(getattr(item, "fixturenames", ()))
                                     for item in items):
        config.stash[_ACTIVE] = True
