"""Which connectors a run checks: a built-in kvconform connector, a `--kv-connector module:attr` (or `vllm:Name`,
see `harness.targets.connector.vllm_target`), or an entry point of the group `kvconform.connectors` (its value is
`module:attr`); the spec is read by `harness.target_spec`, as every target's is. `attr` names a declaration
(`harness.ConnectorUnderTest`) or a bare connector class (its default declaration): the spec is parsed and its
object imported once, here, and the declaration travels with the target.

The selection sits above the targets it builds (`harness.targets.connector.target`, and for `vllm:` specs the vLLM
target), so imports run one way.
"""

from __future__ import annotations

from importlib import metadata

from harness.target_spec import BUILTIN_CONNECTORS, VLLM_PREFIX, TargetError, TargetSpec, parse_spec
from harness.targets.connector.target import ConnectorTarget, resolve_declaration

ENTRY_POINT_GROUP = "kvconform.connectors"

# Extra config a built-in connector is checked with (a MultiConnector needs children).
_BUILTIN_EXTRA_CONFIG = {
    "MultiConnector": {"connectors": [
        {"kv_connector": "LMCacheLikeConnector", "kv_connector_extra_config": {}},
        {"kv_connector": "LMCacheLikeConnector", "kv_connector_extra_config": {}},
    ]},
}


def _builtin_target(name: str) -> ConnectorTarget:
    return ConnectorTarget(name, name, "built-in", extra_config=dict(_BUILTIN_EXTRA_CONFIG.get(name, {})), builtin=True)


BUILTIN_TARGETS = tuple(_builtin_target(name) for name in BUILTIN_CONNECTORS)


def declared_target(spec: TargetSpec, source: str, name: str | None = None) -> ConnectorTarget:
    """The target of a parsed `module:attr` spec, its declaration resolved (imported) once; `name` (an entry
    point's) or the declaration's name, else the attribute's (a bare class). DeclarationError (exit 2) or
    ConnectorLoadError (exit 4), one line, when it cannot be declared."""
    declaration = resolve_declaration(spec, source)
    if name is None:
        name = declaration.name or (spec.attribute.rpartition(".")[2] if declaration.default
                                    else declaration.connector.__name__)
    target = ConnectorTarget(name, spec.text, source, declaration=declaration)
    target.apply_run_options({}, {})
    return target


def connector_target(text: str, option: str = "--kv-connector") -> ConnectorTarget:
    """The target a spec names (`harness.target_spec`): a built-in by name, `vllm:Name`, or `module:attr` (a
    declaration or a connector class, imported here); TargetError (one line) when the spec is malformed, does not
    import, declares badly (exit 2) or names no connector vLLM registers."""
    spec = parse_spec("connector", text, option)
    if spec.builtin is not None:
        return _builtin_target(spec.builtin)
    if spec.vllm_name is not None:
        from harness.targets.connector.vllm_target import vllm_target  # needs vLLM; imported only for a vllm: spec

        return vllm_target(spec.text, option)
    return declared_target(spec, option)


def check_loadable(text: str, option: str = "--kv-connector", extra_config: dict | None = None) -> ConnectorTarget:
    """Fail fast, before anything runs: the target `text` names, loaded and, for a vendor's class, built once
    with the run's `extra_config` (`probe_constructor`); TargetError (exit 4, one line) when it cannot be
    used (a bad spec, a module that does not import, a class without the hooks, a constructor that raises, a
    name the installed vLLM does not register; a `vllm:` connector is checked against vLLM's registry
    without building its adapter)."""
    target = connector_target(text, option)
    if not target.builtin and extra_config is not None:
        target.apply_run_options(extra_config, {})
    if not target.spec.startswith(VLLM_PREFIX):
        target.load()
    return target


def entry_point_targets() -> list[ConnectorTarget]:
    """Targets registered by installed packages under the `kvconform.connectors` entry-point group (a declaration
    or a connector class each). One that does not load is kept undeclared: its `load()` says why, and the suite
    reports it as a load error instead of failing the whole session at selection."""
    targets = []
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        source = f"entry point {ep.name!r}"
        try:
            targets.append(declared_target(parse_spec("connector", ep.value, source), source, name=ep.name))
        except TargetError:
            targets.append(ConnectorTarget(ep.name, ep.value, source))
    return targets


def select_targets(cli_specs: list[str], include_builtins: bool) -> list[ConnectorTarget]:
    """`--kv-connector` targets, then entry points; the built-ins too when asked or nothing else is given."""
    targets = [connector_target(spec) for spec in cli_specs]
    targets += entry_point_targets()
    if include_builtins or not targets:
        named = {t.name for t in targets if t.builtin}
        targets = [t for t in BUILTIN_TARGETS if t.name not in named] + targets
    return targets
