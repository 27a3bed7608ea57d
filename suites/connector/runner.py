"""The connector check runner: how one connector check is called, guarded, timed and recorded.

`suites/connector/conftest.py`'s hooks are its only callers: `pytest_pyfunc_call` runs a check with
`run_check` (per-check time limit, hooks given up on after hanging twice), `ctx` wraps every connector instance
in a `ConnectorGuard` (a raising hook becomes a failure naming it, the running hook is named when time runs
out), and `_record_check` writes the cell with `check_evidence`.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest

from harness.failure_causes import cause_record, hook_raised

from reference_impl.connector.backdoors import BACKDOOR_PREFIX  # optional white-box methods (a typed Protocol)
from reference_impl.connector.base import supports_hma
from harness.connector_checks import CHECKS
from suites.connector.watchdog import CheckAbandoned, wait_for

__all__ = ["ConnectorHookError", "CheckFailed", "expectation_site", "failure_cause", "HookHung", "HANGS_BEFORE_GIVING_UP", "HangLog", "HANG_LOG", "ConnectorGuard",
           "guard_class", "make_guard_class", "run_with_timeout", "hooks_between", "run_check", "summarised",
           "check_evidence"]


class ConnectorHookError(AssertionError):
    """A connector hook raised; the message names the hook and the original error, `cause` is the failure's key
    (`harness.failure_causes`: the hook, the role and the exception's class)."""

    def __init__(self, message: str, cause: dict | None = None):
        super().__init__(message)
        self.cause = cause or {}


class CheckFailed(pytest.fail.Exception):
    """A check's expectation failed (pytest's own failure, so no `except Exception` in engine or connector code
    swallows it); `cause` is the failure's key (`harness.failure_causes`)."""

    def __init__(self, message: str, cause: dict):
        super().__init__(message, pytrace=False)
        self.cause = cause


def expectation_site(depth: int = 2) -> str:
    """'<module>.<function>' of the caller `depth` frames up: the key of a failed expectation that names no
    cause of its own."""
    frame = sys._getframe(depth)
    module = frame.f_globals.get("__name__", "?").rsplit(".", 1)[-1]
    return f"{module}.{frame.f_code.co_name}"


def failure_cause(exc: BaseException, state: dict) -> dict:
    """The cause key of a check's failure `exc` (`harness.failure_causes`): the one it carries, else what its
    class says (a stalled engine, a check out of time), else the site of the bare `assert` that raised it."""
    cause = getattr(exc, "cause", None)
    if cause:
        return dict(cause)
    if type(exc).__name__ == "NoProgress":
        return cause_record("no-progress", hook=getattr(exc, "hook", None), kind=getattr(exc, "kind", None))
    if state.get("timed_out"):
        return cause_record("timed-out", hook=state.get("timed_out_in"))
    tb, site, innermost = exc.__traceback__, None, ""
    while tb is not None:
        innermost = tb.tb_frame.f_globals.get("__name__", "")
        if innermost.startswith("suites."):  # the innermost frame of the suite's own code
            site = f"{innermost.rsplit('.', 1)[-1]}.{tb.tb_frame.f_code.co_name}"
        tb = tb.tb_next
    if site is None or not innermost.startswith("suites."):  # raised by code the checks call, outside any hook
        return cause_record("raised", exception=type(exc).__name__, module=innermost or "?")
    return cause_record("expectation", site=site)


class HookHung(BaseException):
    """A call of a hook this run has already seen hang twice: the check stops at once (a BaseException, so
    no `except Exception` in a check or in engine code swallows it)."""


# A hook that hangs this often is taken as hung for the rest of the run (per process): later checks that
# call it stop at once instead of each waiting out the per-check time limit.
HANGS_BEFORE_GIVING_UP = 2


class HangLog:
    """Which hook of which target hung in which checks; `hung(target)` names the hooks given up on."""

    def __init__(self) -> None:
        self._hangs: dict[tuple[str, str], list[str]] = {}

    def record(self, target: str, hook: str, check: str) -> None:
        """A check of `target` timed out inside `hook`."""
        self._hangs.setdefault((target, hook), []).append(check)

    def hung(self, target: str) -> dict[str, str]:
        """hook -> the check it first hung in, for the hooks of `target` that hung often enough."""
        return {hook: checks[0] for (name, hook), checks in self._hangs.items()
                if name == target and len(checks) >= HANGS_BEFORE_GIVING_UP}


HANG_LOG = HangLog()


class _HMAName:
    """Stand-in so a guard of an HMA connector still passes name-based `supports_hma`."""


class ConnectorGuard:
    """Forwards every attribute to the wrapped connector; a raising hook becomes ConnectorHookError.

    `calls` logs (role, hook, args, result); `around[hook] = (before, after)` instruments one hook;
    `current` is the hook running now (named when a check times out). With `backdoors=False` the optional
    `kvconform_*` methods are hidden, as if the connector had none.
    """

    def __init__(self, inner, role, calls: list, around: dict, state: dict, backdoors: bool = True):
        object.__setattr__(self, "_backdoors", backdoors)
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_role", role)
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "around", around)
        object.__setattr__(self, "_state", state)

    @property
    def inner(self):
        """The wrapped connector."""
        return self._inner

    def __getattr__(self, name):
        if name.startswith(BACKDOOR_PREFIX) and not self._backdoors:
            raise AttributeError(f"{name} (backdoors are off)")
        attr = getattr(self._inner, name)
        if not callable(attr) or name.startswith("_"):
            return attr
        inner_name = type(self._inner).__name__

        def call(*args, **kwargs):
            state = self._state
            if state.get("abandoned") == threading.get_ident():
                raise CheckAbandoned("the check already ran out of time")
            hung_in = (state.get("hung") or {}).get(name)
            if hung_in is not None:
                raise HookHung(f"skipped: hook {inner_name}.{name} hung in {hung_in} (and once more after it); "
                               "the checks that call it are not run again in this session")
            before, after = self.around.get(name, (None, None))
            if before is not None:
                before(self._role, *args)
            label = f"{inner_name}.{name} ({self._role.name.lower()})"
            state["current"] = label
            state["hook"] = name
            started = time.perf_counter()
            try:
                result = attr(*args, **kwargs)
            except ConnectorHookError:
                raise
            except Exception as exc:
                raise ConnectorHookError(
                    f"{inner_name}.{name} ({self._role.name.lower()} role) raised {type(exc).__name__}: {exc}",
                    hook_raised(name, self._role.name.lower(), exc),
                ) from exc
            finally:
                state["current"] = state["hook"] = None
                spent = state.setdefault("hook_time", {})  # label -> [seconds, calls]: named if time runs out
                entry = spent.setdefault(label, [0.0, 0])
                entry[0] += time.perf_counter() - started
                entry[1] += 1
                state["last"] = (label, time.monotonic())
            self.calls.append((self._role, name, args, result))
            if after is not None:
                after(self._role, result, *args)
            return result

        return call

    def __setattr__(self, name, value):
        setattr(self._inner, name, value)


def guard_class(inner_cls: type) -> type:
    """A ConnectorGuard subclass that is HMA-capable exactly when `inner_cls` is."""
    marker = type("SupportsHMA", (_HMAName,), {}) if supports_hma(inner_cls) else None
    return make_guard_class(f"Guarded{inner_cls.__name__}", marker)


def make_guard_class(name: str, hma_marker: type | None, methods: dict | None = None) -> type:
    """A ConnectorGuard subclass called `name`, HMA-capable exactly when `hma_marker` is given: a class the
    engine's HMA check accepts (kvconform's name-based `supports_hma`, or another engine's own `SupportsHMA`,
    which it tests with `isinstance`). `methods` become real methods of the class, for hooks an engine looks
    up on the class rather than on the instance."""
    bases = (ConnectorGuard,) if hma_marker is None else (ConnectorGuard, hma_marker)
    return type(name, bases, dict(methods or {}))


def run_with_timeout(fn, timeout_s: float, state: dict):
    """Run `fn()` in a daemon thread; AssertionError naming the running hook if it exceeds `timeout_s`."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        state["timed_out"] = True
        state["timed_out_in"] = state.get("hook")  # the hook running when time ran out (None: between hooks)
        running = state.get("current")
        # The thread cannot be killed: it stops at its next hook call or engine step instead of spinning on (the
        # check's teardown, in the caller's thread, still runs its hooks).
        state["abandoned"] = thread.ident
        if running:
            raise AssertionError(f"check hung past {timeout_s:g}s (inside {running})")
        raise AssertionError(f"check ran past {timeout_s:g}s; {hooks_between(state)}")
    if "error" in box:
        raise box["error"]
    return box.get("result")


def hooks_between(state: dict) -> str:
    """What the connector's hooks did in a check that ran out of time while none was running: the hook that
    took most of the time, and the last one to return."""
    spent = state.get("hook_time") or {}
    if not spent:
        return "no connector hook was called (the time went to the suite's own code)"
    total = sum(seconds for seconds, _ in spent.values())
    label, (seconds, calls) = max(spent.items(), key=lambda item: item[1][0])
    last, when = state.get("last") or ("?", time.monotonic())
    return (f"between hooks when time ran out: the hooks took {total:.1f} s of it, most in {label} ({seconds:.1f} s "
            f"over {calls:,} calls); the last to return was {last}, {time.monotonic() - when:.1f} s before")


def run_check(pyfuncitem) -> None:
    """Call the check `pyfuncitem` under its time limit (`--kv-connector-timeout` times its factor): a failure
    is one `pytest.fail` line per check (`summarised`), a hang inside a hook is logged against that hook, and a
    check calling a hook given up on is skipped naming it."""
    funcargs = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    check_id = pyfuncitem.get_closest_marker("kv_check").args[0]
    timeout = pyfuncitem.config.getoption("kvconform_kv_connector_timeout") * CHECKS[check_id].time_factor
    context = funcargs.get("ctx")
    if context is not None and context.load_error:
        pyfuncitem._kvconform_cause = cause_record("connector-load")
        pytest.fail(context.load_error, pytrace=False)
    state = context.state if context is not None else {}
    # The progress watchdog's patience with a backend grows with the limit a vendor sets (not with C36's factor).
    state["wait_s"] = wait_for(pyfuncitem.config.getoption("kvconform_kv_connector_timeout"))
    target = context.target.name if context is not None else None
    if target is not None:
        state["hung"] = HANG_LOG.hung(target)  # hooks that hung twice stop this check at once (HookHung)
    failure = skipped = None
    try:
        run_with_timeout(lambda: pyfuncitem.obj(**funcargs), timeout, state)
    except HookHung as exc:
        skipped = str(exc)
    except (AssertionError, pytest.fail.Exception) as exc:
        failure = summarised(pyfuncitem, exc)
        pyfuncitem._kvconform_cause = failure_cause(exc, state)  # the record's structured key (conftest)
        if target is not None and state.get("timed_out_in"):
            HANG_LOG.record(target, state["timed_out_in"], check_id)
    except Exception as exc:  # an error in code the check called: pytest reports it as it is, with its key
        pyfuncitem._kvconform_cause = failure_cause(exc, state)
        raise
    if skipped is not None:
        pytest.skip(skipped)
    if failure is not None:  # raised outside the except block: no chained traceback in the report
        pytest.fail(failure, pytrace=False)


def summarised(item, exc: BaseException) -> str:
    """"C07 [fa+swa]: <first line of evidence>", then the full evidence (one line per failing check). The label
    in brackets is the cell's id less the connector's (its preset, and any other parameter, e.g. "tp")."""
    check_id = item.get_closest_marker("kv_check").args[0]
    preset = "-"
    if hasattr(item, "callspec"):
        name = getattr(item.callspec.params.get("connector_target"), "name", "")
        cell = item.callspec.id
        preset = cell[len(name) + 1:] if name and cell.startswith(name + "-") else item.callspec.params.get("preset", "-")
    message = str(getattr(exc, "msg", None) or exc) or type(exc).__name__
    first, _, rest = message.strip().partition("\n")
    return f"{check_id} [{preset}]: {first}" + (f"\n{rest}" if rest else "")


def check_evidence(report) -> str | None:
    """What a check's record says of its outcome: the first line of a failure (500 characters at most), None
    when it did not fail."""
    if report is None or not report.failed:
        return None
    evidence = str(getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                   or report.longrepr)
    evidence = evidence.splitlines()[0][:500] if evidence else "failed"
    return evidence.removeprefix("Failed: ")
