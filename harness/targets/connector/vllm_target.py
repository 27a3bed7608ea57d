"""`--kv-connector vllm:Name`: an in-tree connector of the installed vLLM as the connector under test.

`vllm:ExampleConnector` names a connector vLLM's `KVConnectorFactory` registers. The class is vLLM's,
unmodified; kvconform's thin adapter (`harness.targets.connector.vllm_adapter`) translates the mini
engine's objects into vLLM's. `vllm:MultiConnector[A,B]` wraps registered connectors A and B.

Bad input is a target error (exit 4): no usable vLLM (with how to install one), or a name vLLM does not
register (with the names it does). A registered connector that needs a package or a device this machine
lacks still loads: each of its checks is skipped with that one reason (`ConnectorUnavailable`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from harness.errors import UsageError
from harness.target_spec import VLLM_PREFIX, TargetError
from harness.targets.connector.capabilities import ReleaseTable, installed_vllm_table
from harness.targets.connector.target import ConnectorLoadError, ConnectorTarget
from harness.targets.connector.vllm_facts import (BLOCK_SIZE_OPTIONS, KINDS, STORE_SCOPES, default_multi_children,
                                                  names_file_text, parse_name, registered_names, validate_spec)
from harness.targets.vllm_install import installed_vllm_version


class VllmConnectorTarget(ConnectorTarget):
    """A connector registered by the installed vLLM, loaded as kvconform's adapter class around it."""

    @property
    def known_kind(self) -> str | None:
        name, children = parse_name(self.spec)
        kinds = {KINDS.get(n, "stores") for n in (children or (name,))}
        # A MultiConnector stores KV when any child does (every child gets the stores).
        return "stores" if "stores" in kinds else min(kinds)

    @property
    def known_store_scope(self) -> str | None:
        name, children = parse_name(self.spec)
        # A MultiConnector with an engine-owned child: only the storing engine reads back all of its hits.
        return "engine" if any(STORE_SCOPES.get(n) == "engine" for n in (children or (name,))) else None

    @property
    def known_block_size_option(self) -> str | None:
        name, children = parse_name(self.spec)
        return None if children else BLOCK_SIZE_OPTIONS.get(name)

    @property
    def release_table(self) -> ReleaseTable:
        """The installed vLLM release's connector API (`harness.targets.connector.capabilities`)."""
        if not self.spec.startswith(VLLM_PREFIX):
            return super().release_table  # a plain module:Class target built from this one (check C33's wrapper)
        return installed_vllm_table()

    def load(self) -> type:
        if self._cls is not None or not self.spec.startswith(VLLM_PREFIX):
            return super().load()  # a plain module:Class target built from this one (e.g. check C33's wrapper)
        from harness.targets.connector.vllm_adapter import adapter_class

        name, children = parse_name(self.spec)
        try:
            validate_spec(self.spec, self.source)
        except TargetError as exc:
            raise ConnectorLoadError(exc.option, exc.spec, exc.why) from None
        self._cls = adapter_class(name, children)
        return self._cls


def vllm_target(spec: str, option: str = "--kv-connector") -> VllmConnectorTarget:
    """The target for `--kv-connector vllm:...`; its report name carries the vLLM release."""
    validate_spec(spec, option)
    name, children = parse_name(spec)
    label = name + (f"[{','.join(children)}]" if children else "")
    return VllmConnectorTarget(f"vllm-{installed_vllm_version()}:{label}", spec, option)


def main(argv: list[str] | None = None) -> int:
    """`python -m harness.targets.connector.vllm_target [--names-file FILE]`: the `--kv-connector vllm:Name` arguments
    for every connector the installed vLLM registers, plus a MultiConnector over the ones that run on a CPU (for CI
    scripts); with `--names-file`, the registered names are also written to FILE (`REGISTERED_NAMES_ENV`)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and (len(argv) != 2 or argv[0] != "--names-file"):
        print(f"kvconform: error: arguments {' '.join(argv)!r}; accepted: none, or --names-file FILE", file=sys.stderr)
        return 2
    try:
        names = registered_names()
    except UsageError as exc:
        print(f"kvconform: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if argv:
        written = Path(f"{argv[1]}.tmp")
        written.write_text(names_file_text(installed_vllm_version(), names))
        written.replace(argv[1])
    specs = [f"{VLLM_PREFIX}{n}" for n in names if n != "MultiConnector"]
    if "MultiConnector" in names:
        specs.append(f"{VLLM_PREFIX}MultiConnector[{','.join(default_multi_children())}]")
    print("\n".join(f"--kv-connector={s}" for s in specs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
