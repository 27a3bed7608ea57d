"""A failure raised with `pytest.fail(..., pytrace=False)` gets no traceback built for it.

pytest shows such a failure as its message alone, yet still walks and filters the whole stack of the
failing call (pluggy and pytest frames included) to build the report: a few milliseconds per failure,
which is most of what a target that fails thousands of config cells costs beyond a correct one. Before
the report is made, this plugin trims the failure's traceback to its innermost frames (the code that
called `pytest.fail` and `fail` itself), so the report, its crash location and its message are the same
and the cost no longer depends on how deep the stack was. Only in a kvconform session
(`harness.plugins.activation`): other projects' failures are left to pytest.
"""

from __future__ import annotations

import pytest
from _pytest._code import ExceptionInfo

from harness.plugins.activation import is_active

# The frame that called pytest.fail (its crash location) and the frame of `fail` itself.
_KEEP_FRAMES = 2


def _innermost(tb, keep: int):
    """The suffix of a traceback chain holding its last `keep` frames."""
    chain = []
    while tb is not None:
        chain.append(tb)
        tb = tb.tb_next
    return chain[-keep] if len(chain) >= keep else (chain[0] if chain else None)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Trim the traceback of a pytrace=False failure before any plugin builds the report from it."""
    excinfo = call.excinfo
    if (excinfo is not None and isinstance(excinfo.value, pytest.fail.Exception) and not excinfo.value.pytrace
            and not item.config.getoption("fulltrace", False) and is_active(item.config)):
        value = excinfo.value
        short = _innermost(value.__traceback__, _KEEP_FRAMES)
        if short is not None:
            call.excinfo = ExceptionInfo.from_exc_info((type(value), value, short))
    return (yield)
