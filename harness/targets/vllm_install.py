"""Finding the installed vLLM release and turning its absence into one clear line (exit 4).

Shared by every adapter that runs a suite against a real vLLM (the config target, the allocator
adapter): they all need the same answer to "is there a usable vLLM here, which release, which era".
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re

from harness.errors import EXIT_TARGET, UsageError
from reference_impl.config import eras as _eras
from reference_impl.releases import install_hint

#: What the refusals below suggest: the release registry's install hint (the newest release CI judges).
INSTALL_HINT = f"install one with: {install_hint()}"
# Modules every vLLM adapter imports; a failure in any of them means the install is not usable.
REQUIRED_MODULES = (
    "vllm.config",
    "vllm.distributed.kv_transfer.kv_connector.factory",
)


def installed_vllm_version() -> str:
    """The release number of the installed vLLM distribution (local suffixes such as +cpu dropped)."""
    try:
        raw = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        raise UsageError(f"vLLM is not installed in this Python environment; {INSTALL_HINT}", EXIT_TARGET) from None
    match = re.match(r"^(\d+\.\d+\.\d+)", raw)
    if not match:
        raise UsageError(f"cannot read a release number from vLLM version {raw!r}; accepted: X.Y.Z in {_eras.known_range()}", EXIT_TARGET)
    return match.group(1)


#: Judge the installed release by the rules of this era instead of its own (a release kvconform does not
#: know yet, checked against the newest era by scripts/new-vllm-release.sh).
JUDGE_ERA_ENV = "KVCONFORM_VLLM_JUDGE_ERA"


def vllm_era(version: str) -> str:
    """The rule era of an installed release (or the era KVCONFORM_VLLM_JUDGE_ERA names); an unsupported
    release is a target error (exit 4), an unknown era in the variable a usage error (exit 2)."""
    from harness.eras import ERA_IDS, EraSelectionError, era_for_version

    judged = os.environ.get(JUDGE_ERA_ENV)
    if judged:
        if judged not in ERA_IDS:
            raise UsageError(f"{JUDGE_ERA_ENV}: {judged!r} is not an era id; accepted: {', '.join(ERA_IDS)}")
        return judged
    try:
        return era_for_version(version)
    except EraSelectionError as exc:
        raise UsageError(f"installed vLLM {version} is not supported ({exc}); {INSTALL_HINT}", EXIT_TARGET) from None


def import_vllm_modules(version: str, modules: tuple[str, ...] = REQUIRED_MODULES) -> None:
    """Import the vLLM modules an adapter needs; a half-working install becomes one line naming the gap."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure here means the install is unusable for us
            missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
            what = f"missing package {missing!r}" if missing else f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            raise UsageError(
                f"vLLM {version} is installed but {name} does not import ({what}); "
                f"reinstall it with: scripts/install-vllm.sh {version}",
                EXIT_TARGET,
            ) from None
