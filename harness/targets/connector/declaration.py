"""The connector under test, declared once (`harness.ConnectorUnderTest`).

A vendor writes one class, beside the connector, and names it on the command line
(`--kv-connector mypkg.declare:MyConnectorUnderTest`):

    from harness import ConnectorUnderTest
    from mypkg.mod import MyConnector

    class MyConnectorUnderTest(ConnectorUnderTest):
        connector = MyConnector                      # the production class, unmodified
        extra_config = {"capacity_bytes": 400_000}   # the kv_connector_extra_config every instance gets
        kind = "stores"                              # stores | dummy | transfer
        store_scope = "process"                      # shared | process | engine

        def kvconform_evict(self, connector, request, group_id, chunk_index):  # optional backdoors: here,
            connector._store.drop(request, group_id, chunk_index)              # not on the product

`--kv-connector mypkg.mod:MyConnector` (a bare connector class) is the default declaration of that class: every
field at its default, and the backdoors the class itself offers (`kvconform_*` methods, the older channel).
The run's `--kv-connector-extra-config` is merged over `extra_config`, and its `"kvconform"` object over the
profile fields (the older channel, same field names). The declaration is resolved once per process
(`harness.targets.connector.selection`) and travels with the target to every check.

This module is light (the standard library and `harness.target_spec`): a vendor's package, and the pytest plugin of a
session that is none of kvconform's business, import it without the reference engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from harness.errors import EXIT_USAGE
from harness.target_spec import TargetError

#: What `kind` accepts: what the connector does with KV (docs/connector-profiles.md).
KINDS = {
    "stores": "stores and loads KV",
    "dummy": "fills dummy KV",
    "transfer": "transfers KV between instances only",
}
#: What `store_scope` accepts: which engines read one store.
STORE_SCOPES = {
    "shared": "a store shared by the engines of one process",
    "process": "a store that lives and dies with its process (a new process starts empty)",
    "engine": "a store owned by the engine (a second engine starts empty)",
}
#: The profile fields, with the type each takes: a declaration's attributes and the keys of the `"kvconform"`
#: object in `--kv-connector-extra-config`.
PROFILE_FIELDS: dict[str, type] = {"kind": str, "multi_group": str, "async_load_config": dict, "store_scope": str,
                                   "block_size_option": str}
#: The key of `--kv-connector-extra-config` that holds profile fields (taken out before the connector sees it).
DECLARATION_KEY = "kvconform"


class ConnectorLoadError(TargetError):
    """The connector cannot be used at all (import failure, not a class, bad declaration, bad constructor, missing
    hooks): one line `SOURCE SPEC: why`, exit status 4."""


class DeclarationError(ConnectorLoadError):
    """A declaration with a bad field: one line naming where, the field, its value and what is accepted; exit
    status 2 (bad input, as any bad option)."""

    def __init__(self, option: str, spec: str, why: str):
        super().__init__(option, spec, why)
        self.exit_code = EXIT_USAGE


def check_field(field: str, value: Any) -> str | None:
    """Why `value` is not accepted for the profile field `field` (None: accepted; None values mean "not declared")."""
    if value is None:
        return None
    expected = PROFILE_FIELDS[field]
    if expected is dict:
        if not isinstance(value, Mapping):
            return f"{field} is {value!r}; accepted: a JSON object (a mapping)"
        return None
    if not isinstance(value, str):
        return f"{field} is {value!r}; accepted: a string"
    choices = {"kind": KINDS, "store_scope": STORE_SCOPES}.get(field)
    if choices is not None and value not in choices:
        return f"{field} is {value!r}; accepted: " + ", ".join(f"{k} ({v})" for k, v in choices.items())
    return None


class ConnectorUnderTest:
    """The declaration of a connector under test: subclass it, name the connector class, its extra config and
    profile, and implement any optional backdoors here (see the module docstring). Every field is optional but
    `connector`; a field left at None is taken from reviewed data (vLLM's connectors) or inferred."""

    #: The connector class (vLLM's `(vllm_config, role, kv_cache_config)` constructor and hooks).
    connector: ClassVar[type | None] = None
    #: The name the report gives it (default: the connector class's name).
    name: ClassVar[str | None] = None
    #: The `kv_connector_extra_config` every instance gets (the run's `--kv-connector-extra-config` merges over it).
    extra_config: ClassVar[Mapping[str, Any]] = {}
    #: stores (stores and loads KV back; the default), dummy (fills dummy KV) or transfer (moves KV between
    #: instances only): checks that do not apply to the kind are "N/A" (docs/connector-profiles.md).
    kind: ClassVar[str | None] = None
    #: shared (the default), process or engine: which engines read one store.
    store_scope: ClassVar[str | None] = None
    #: Why multi-group models do not apply on this configuration although the class declares HMA.
    multi_group: ClassVar[str | None] = None
    #: Extra config merged into the connector's in the checks that exercise asynchronous loads.
    async_load_config: ClassVar[Mapping[str, Any] | None] = None
    #: The extra-config key that sets the size, in tokens, of the blocks the connector stores (C40).
    block_size_option: ClassVar[str | None] = None

    # Optional backdoors (`reference_impl.connector.backdoors` says what each returns), each taking the connector
    # instance (scheduler role unless said otherwise) first; None: not offered here (the connector's own
    # `kvconform_*` method is used when it has one).
    kvconform_chunk_size: ClassVar[Callable[..., int] | None] = None
    kvconform_evict: ClassVar[Callable[..., None] | None] = None
    kvconform_tracked_block_ids: ClassVar[Callable[..., Any] | None] = None
    kvconform_object_keys: ClassVar[Callable[..., list[str]] | None] = None
    kvconform_open_state: ClassVar[Callable[..., dict[str, int]] | None] = None

    @classmethod
    def for_class(cls, connector: type) -> ConnectorUnderTest:
        """The default declaration of a bare connector class (`--kv-connector module:Class`)."""
        declared = type(f"{connector.__name__}UnderTest", (cls,), {"connector": connector,
                                                                   "__module__": connector.__module__})
        declared.default = True
        return declared()

    #: True for the declaration kvconform makes of a bare class.
    default: ClassVar[bool] = False

    def problems(self) -> list[str]:
        """Why this declaration cannot be used, one phrase per bad field (`Class.field is VALUE; accepted: ...`);
        empty when it can."""
        label = type(self).__name__
        found = []
        if not isinstance(self.connector, type):
            found.append(f"{label}.connector is {self.connector!r}; accepted: a connector class")
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()):
            found.append(f"{label}.name is {self.name!r}; accepted: a non-empty string")
        if not isinstance(self.extra_config, Mapping):
            found.append(f"{label}.extra_config is {self.extra_config!r}; accepted: a mapping (JSON object)")
        for field in PROFILE_FIELDS:
            why = check_field(field, getattr(self, field))
            if why:
                found.append(f"{label}.{why}")
        for backdoor in BACKDOOR_METHODS:
            method = getattr(self, backdoor)
            if method is not None and not callable(method):
                found.append(f"{label}.{backdoor} is {method!r}; accepted: a method (self, connector, ...) or None")
        known = set(vars(ConnectorUnderTest))
        for klass in type(self).__mro__:
            if klass is ConnectorUnderTest:
                break
            for attr in vars(klass):
                if attr.startswith("kvconform_") and attr not in known:
                    found.append(f"{label}.{attr} is not a backdoor; accepted: {', '.join(BACKDOOR_METHODS)}")
                elif (not attr.startswith("_") and attr not in known and not callable(vars(klass)[attr])
                      and not isinstance(vars(klass)[attr], (property, classmethod, staticmethod))):
                    found.append(f"{label}.{attr} is not a field of a declaration; accepted: connector, name, "
                                 f"extra_config, {', '.join(PROFILE_FIELDS)}")
        return found

    def profile_fields(self) -> dict[str, Any]:
        """The profile fields this declaration sets, as the `"kvconform"` object of the extra config would."""
        fields = {}
        for field in PROFILE_FIELDS:
            value = getattr(self, field)
            if value is not None and value != {}:
                fields[field] = dict(value) if isinstance(value, Mapping) else value
        return fields

    @property
    def display_name(self) -> str:
        """The name the report gives the connector."""
        return self.name or self.connector.__name__

    def backdoor(self, name: str, connector: Any) -> Callable[..., Any] | None:
        """The backdoor `name` (one of `BACKDOOR_METHODS`) bound to `connector` (an instance): the declaration's
        own method, else the connector's `kvconform_*` method, else None."""
        if name not in BACKDOOR_METHODS:
            raise ValueError(f"{name} is not a backdoor; accepted: {', '.join(BACKDOOR_METHODS)}")
        declared = getattr(self, name)
        if declared is not None:
            return lambda *args, **kwargs: declared(connector, *args, **kwargs)
        return getattr(connector, name, None)


#: The backdoors a declaration may implement: the names of `reference_impl.connector.backdoors.KVConformBackdoors`
#: (tests/connector/test_declaration.py holds them equal), each taking the connector instance first.
BACKDOOR_METHODS: tuple[str, ...] = tuple(name for name in vars(ConnectorUnderTest) if name.startswith("kvconform_"))


def declaration_of(obj: Any, option: str, spec: str) -> ConnectorUnderTest:
    """The declaration `--kv-connector SPEC` names: a `ConnectorUnderTest` subclass (instantiated), or a bare
    connector class (its default declaration); DeclarationError (exit 2, one line) for a bad field,
    ConnectorLoadError for an object that is neither."""
    if isinstance(obj, type) and issubclass(obj, ConnectorUnderTest):
        declaration = obj()
    elif isinstance(obj, ConnectorUnderTest):
        declaration = obj
    elif isinstance(obj, type):
        return ConnectorUnderTest.for_class(obj)
    else:
        raise ConnectorLoadError(option, spec, f"{type(obj).__name__} object is neither a connector class nor a "
                                        "ConnectorUnderTest declaration; accepted: module:Class")
    problems = declaration.problems()
    if problems:
        raise DeclarationError(option, spec, "; ".join(problems))
    return declaration
