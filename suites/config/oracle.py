"""The config matrix's independent oracle: a case in, the outcome the spec predicts out.

Everything era-specific is data in `tables/` (one reviewed TOML file per era); this evaluator only
walks the decision procedure the spec describes (config-rules.md §1.2, §2.2, §3.2, factory §2.5/§3.5)
and consults the table at each step. It never calls the reference resolver, so a disagreement between
the two points at a bug in one of them (or in the spec reading), never at a shared mistake. What the two share
is the case schema: a case reaches both parsed by its one parser (`reference_impl.config.case`), the connector written
as vLLM reads a kv_transfer_config.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any

from reference_impl.config.case import Case, parse_case
from reference_impl.config.outcome import OutcomeError, OutcomeWarning
from suites.config.tables import era_table, message_text, messages

CHUNKED_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
SIMPLE_OFFLOAD_ENV = "VLLM_USE_SIMPLE_KV_OFFLOAD"
USE_V1_ENV = "VLLM_USE_V1"
_TRUE_ENV_VALUES = ("1", "true")
MULTI = "MultiConnector"
HISPARSE_CONNECTOR = "HiSparseConnector"


@dataclasses.dataclass(frozen=True)
class Expectation:
    """What the spec predicts for one case: the outcome (the typed outcome's JSON form without `id` and `rules`,
    each message with the id of the table's entry it comes from and the text the target's must contain) and the
    rules that led there."""

    outcome: dict[str, Any]
    because: tuple[str, ...]


class _Raised(Exception):
    def __init__(self, message_id: str, stage: str, **fields: str):
        super().__init__(message_id)
        entry = messages()[message_id]
        self.error = OutcomeError(message_id, entry["type"], stage, message_text(message_id, **fields))
        self.message_id = message_id


class _Unknown(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class _Connector:
    """A kv_transfer_config as the rules see it: name, module path, role and MultiConnector children."""

    name: str
    module_path: str | None = None
    role: str | None = "kv_both"
    children: tuple = ()
    #: whether kv_connector_extra_config has a "connectors" key at all (an empty list is not a missing key)
    has_children_key: bool = False
    #: kv_connector_extra_config without its "connectors" list (transfer_mode, host_pool_gib, ...)
    extra: Any = None

    @classmethod
    def from_config(cls, child: dict) -> "_Connector":
        """A connector (or a MultiConnector child) as the parsed case writes it (`Case.kv_transfer`)."""
        extra = dict(child.get("kv_connector_extra_config") or {})
        children = child["children"] if child.get("children") is not None else extra.pop("connectors", None)
        return cls(
            name=child.get("kv_connector"),
            module_path=child.get("kv_connector_module_path"),
            role=child.get("kv_role"),
            children=tuple(children or ()),
            has_children_key=children is not None,
            extra=extra,
        )


@dataclasses.dataclass(frozen=True)
class _ConnectorClass:
    class_name: str
    hma: bool
    multi: bool


def _mro_names(cls: type) -> set[str]:
    # The guide's contract: capability and MultiConnector-ness are read from MRO class names.
    return {klass.__name__ for klass in cls.__mro__}


def _env_true(value: str | None) -> bool:
    return value is not None and value.strip().lower() in _TRUE_ENV_VALUES


class _Evaluation:
    """One walk through an era's decision procedure for one case and one platform-support value."""

    def __init__(self, table: dict, case: Case, platform_supported: bool):
        self.table = table
        self.case = case
        self.platform_supported = platform_supported
        self.warnings: list[OutcomeWarning] = []
        self.because: list[str] = []
        self.spec = table["spec"]

    # -- small helpers ---------------------------------------------------------------------------
    def note(self, text: str) -> None:
        self.because.append(text)

    def warn(self, message_id: str, **fields: str) -> None:
        self.warnings.append(OutcomeWarning(message_id, message_text(message_id, **fields)))
        self.note(f"logs {message_id}")

    def env(self, name: str) -> str | None:
        return self.case.env.get(name)

    # -- class lookup (§2.5 item 1, §3.3) --------------------------------------------------------
    def lookup(self, connector: _Connector, stage: str) -> _ConnectorClass:
        factory = self.table["factory"]
        registry = self.table["connectors"]
        by_path = connector.module_path and (
            factory["class_lookup"] == "module-path-first" or connector.name not in registry
        )
        if by_path:
            cls = getattr(importlib.import_module(connector.module_path), connector.name, None)
            if cls is None:
                self.note(f"factory.py:108-114: {connector.module_path} has no class {connector.name}")
                raise _Raised("E-CLASS-NOT-FOUND", stage, name=connector.name, module=connector.module_path)
            if factory["two_arg_constructor"] == "error" and (
                "kv_cache_config" not in inspect.signature(cls.__init__).parameters
            ):
                self.note(f"§3.3: {connector.name} has the deprecated 2-argument constructor")
                raise _Raised("E-TWO-ARG", stage, name=cls.__name__)
            names = _mro_names(cls)
            if MULTI in names:
                # A subclass of MultiConnector is as HMA-capable as the era's MultiConnector class (vLLM's
                # class gained SupportsHMA in 0.21; vLLM 0.13.0's factory rejects a renamed subclass with E-F).
                return _ConnectorClass(cls.__name__, registry[MULTI], True)
            return _ConnectorClass(cls.__name__, "SupportsHMA" in names, False)
        if connector.name is None:
            raise _Unknown("a connector without a kv_connector name (outside the matrix's schema)")
        if connector.name not in registry:
            self.note(f"§3.3: {connector.name} is not registered in era {self.table['era']} and has no module path")
            raise _Raised("E-UNSUPPORTED-CONNECTOR", stage, name=connector.name)
        if connector.name == "NixlConnector" and factory["nixl_transfer_mode"]:
            mode = (connector.extra or {}).get("transfer_mode", "pull")
            if mode not in ("pull", "push"):
                self.note(f"0.34 factory.py:126-129: NixlConnector transfer_mode {mode!r} is neither pull nor push")
                raise _Raised("E-NIXL-TRANSFER-MODE", stage, name=repr(mode))
            resolved = {"pull": "NixlPullConnector", "push": "NixlPushConnector"}[mode]
            self.note(f"0.34 factory.py:126-130: NixlConnector with transfer_mode {mode} is {resolved}")
            return _ConnectorClass(resolved, registry[resolved], False)
        missing_import = factory["import_requires"].get(connector.name)
        if missing_import:
            self.note(f"resolving {connector.name} imports a package that is not installed ({missing_import})")
            raise _Raised(missing_import, stage)
        return _ConnectorClass(connector.name, registry[connector.name], connector.name == MULTI)

    @staticmethod
    def child_configs(connector: _Connector) -> list[_Connector]:
        """The children of a MultiConnector, as configured (nothing checked yet)."""
        return [_Connector.from_config(child) for child in connector.children]

    def child_role(self, child: _Connector, stage: str) -> None:
        """KVTransferConfig(**child): a child that names a connector must give a kv_role."""
        if child.role is None:
            self.note(f"§3.3: child {child.name} sets kv_connector without kv_role")
            raise _Raised(self.table["factory"]["missing_kv_role_error"], stage)

    def lookup_tree(self, connector: _Connector, stage: str) -> None:
        """0.34: the class of the connector and, for a MultiConnector class, of every child at any depth
        (each child's KVTransferConfig checks its kv_role first), none skipped."""
        cls = self.lookup(connector, stage)
        if cls.multi:
            # 0.34.0 multi_connector.py:238-247 (kv_cache_access): child by child, depth first: its kv_role, its
            # class, then its own children.
            for child in self.child_configs(connector):
                self.child_role(child, stage)
                self.lookup_tree(child, stage)

    def hisparse_host_pool(self, connector: _Connector | None) -> None:
        """0.34 kv_transfer.py:16-47 over the connector after the offloading shortcut."""
        entries = []
        if connector is not None:
            candidates = [_Connector.from_config(c) for c in connector.children] if connector.name == MULTI else [connector]
            entries = [c.extra or {} for c in candidates if c.name == HISPARSE_CONNECTOR]
        if len(entries) > 1:
            raise _Raised("E-HISPARSE-TWO", "config")
        if not entries:
            self.note("0.34 config/vllm.py:2133-2141: HiSparse without a HiSparseConnector after the shortcut")
            raise _Raised("E-HISPARSE-NEEDS-CONNECTOR", "config")
        size = entries[0].get("host_pool_gib")
        if size is None:
            raise _Raised("E-HISPARSE-NO-HOST-POOL", "config")
        if isinstance(size, bool) or not isinstance(size, (int, float)):
            raise _Unknown(f"host_pool_gib {size!r} is not a number (the matrix gives numbers)")
        if size <= 0:
            raise _Raised("E-HISPARSE-HOST-POOL-NOT-POSITIVE", "config")
        self.note(f"0.34: HiSparse host pool of {size} GiB")

    def speculative_check(self) -> None:
        """The speculative method as SpeculativeConfig takes it (0.34: custom methods, unknown names)."""
        method = self.case.speculative_method
        block = self.table["block"]
        if self.case.custom_speculative is not None:
            if not block["custom_speculative_methods"]:
                raise _Unknown("custom speculative methods arrive in vLLM 0.34.0")
            return
        builtin = block["builtin_speculative_methods"]
        if method is not None and builtin and method not in builtin:
            raise _Raised("E-UNKNOWN-SPECULATIVE-METHOD", "config", name=repr(method), methods=str(sorted(builtin)))

    def uses_target_hidden_states(self) -> bool:
        if self.case.custom_speculative is not None:
            return self.case.custom_speculative
        return self.case.speculative_method in self.table["block"]["eagle_methods"]

    def supports_hma_config(self, connector: _Connector, stage: str) -> bool:
        """§3.3: the configured-name MultiConnector recursion of 0.23+."""
        cls = self.lookup(connector, stage)
        if connector.name != MULTI:
            return cls.hma
        children = self.child_configs(connector)
        if not children:
            self.note("§3.3: MultiConnector without children does not support HMA")
            return False
        # 0.23.0 multi_connector.py:161-167: one child at a time, its KVTransferConfig (kv_role) first, and the
        # first child without HMA support ends the loop: later children are never looked at.
        for child in children:
            if self.table["factory"]["child_kv_role_required"]:
                self.child_role(child, stage)
            if not self.supports_hma_config(child, stage):
                return False
        return True

    def class_rule_capable(self, connector: _Connector, stage: str) -> bool:
        """§6 0.22.0: class SupportsHMA, and for __name__ MultiConnector every (direct) child class."""
        cls = self.lookup(connector, stage)
        if not cls.hma:
            return False
        if cls.class_name != MULTI:
            return True
        # 0.22.0 config/vllm.py:1458-1468: all() over a generator that builds each child's KVTransferConfig (its
        # kv_role validated) and then asks its class: a child after the first non-HMA one is never looked at.
        for child in self.child_configs(connector):
            self.child_role(child, stage)
            if not self.lookup(child, stage).hma:
                return False
        return True

    # -- the steps -------------------------------------------------------------------------------
    def user_connector(self) -> _Connector | None:
        transfer = self.case.kv_transfer
        if transfer is None or not transfer["kv_connector"]:
            return None
        return _Connector.from_config(transfer)

    def offloading_connector(self, connector: _Connector | None) -> _Connector | None:
        """The kv-offloading shortcut (§2.2 step 4, §3.2 step 0): the connector it installs, if any."""
        offloading = self.table["offloading"]
        backend = self.case.kv_offloading_backend
        size = self.case.kv_offloading_size
        triggered = backend is not None if offloading["trigger"] == "backend" else size is not None
        if not triggered:
            return connector
        if size is None and offloading["backend_without_size"]:
            self.note(f"{self.spec} 4: kv_offloading_backend {backend} without kv_offloading_size")
            raise _Raised(offloading["backend_without_size"], "config")
        if backend == "lmcache":
            name = offloading["lmcache"]
        elif offloading["native_simple"] and _env_true(self.env(SIMPLE_OFFLOAD_ENV)):
            name = offloading["native_simple"]
        else:
            name = offloading["native"]
        # vLLM 0.33.0 config/vllm.py:1157-1190: the shortcut overwrites kv_connector and kv_role but keeps
        # kv_connector_module_path (which a module-path-first lookup then uses for the new name).
        module_path = connector.module_path if connector is not None else None
        self.note(f"§8.5: kv offloading ({backend or 'native'}) installs {name}")
        return _Connector(name=name, module_path=module_path)

    def hisparse_on(self, connector: _Connector | None) -> bool:
        if self.case.hisparse:
            return True
        if connector is None:
            return False
        # §10 item 1: top level, or a direct child of a top-level MultiConnector; no deeper.
        if connector.name == HISPARSE_CONNECTOR:
            return True
        return connector.name == MULTI and any(
            _Connector.from_config(child).name == HISPARSE_CONNECTOR for child in connector.children
        )

    def resolve(self) -> bool:
        """The HMA block; returns resolved `disable_hybrid_kv_cache_manager`."""
        table, case = self.table, self.case
        flag_table, block = table["flag"], table["block"]
        flag = case.flag
        if not flag_table["tri_state"] and flag is None:
            flag = False  # §1.1: absent is the default False
        if block["vllm_use_v1_gate"] and not _env_true(self.env(USE_V1_ENV) or "1"):
            self.note(f"{self.spec}: VLLM_USE_V1 is off, the block does not run")
            return flag
        if flag is True and flag_table["explicit_true_skips_checks"]:
            self.note("§1.2 step 1: flag True, nothing checked or logged")
            return True

        need_disable = False
        if not self.platform_supported:
            self.note(f"{self.spec}: platform {case.platform} lacks hybrid KV cache support (P)")
            need_disable = True
        if case.kv_events and block["kv_events_disables"]:
            self.note(f"{self.spec}: kv_events_config present (EV)")
            need_disable = True
        chunked_warning = False
        if case.attention_chunk_size:
            if self.uses_target_hidden_states():
                method = case.as_dict()["speculative_method"]  # a custom method as the case gave it
                self.note(f"{self.spec}: chunked local attention with EAGLE-style {method} (CE)")
                need_disable = True
            elif block["chunked_env"]:
                env_value = self.env(CHUNKED_ENV)
                if not _env_true(env_value if env_value is not None else block["chunked_env_default"]):
                    self.note(f"{self.spec}: chunked local attention with {CHUNKED_ENV} off (CL)")
                    need_disable = True
                    chunked_warning = True

        connector = self.connector_at_block
        if not flag_table["tri_state"]:
            # §1.2: independent ifs; any kv_transfer_config disables (W-A1 from 0.11.1), logged first.
            if connector is not None:
                self.note(f"{self.spec} 2b: kv_transfer_config present (K)")
                need_disable = True
                if block["connector_warning"]:
                    self.warn(block["connector_warning"])
            if chunked_warning:
                self.warn("W-C")
            return need_disable

        if chunked_warning:
            self.warn("W-C")  # §8.7/§8.8: logged for every flag value, before the connector warning
        if flag is True:
            self.note(f"{self.spec} 2: flag True is kept")
            return True
        if flag is False:
            if need_disable:
                self.note(f"{self.spec} 2: explicit enable but the configuration needs HMA off")
                raise _Raised(block["explicit_enable_error"], "config")
            self.note(f"{self.spec} 2: explicit enable kept (the connector is never part of need_disable, §8.2)")
            return False
        if connector is not None:
            rule = block["connector_rule"]
            if rule == "flag-none-any":
                capable = False
                self.note(f"{self.spec} 2: flag None with a kv_transfer_config (capability not inspected)")
            elif rule == "flag-none-class":
                capable = self.class_rule_capable(connector, "config")
                self.note(f"§6 0.22.0: class check of {connector.name} (and its children by __name__): {'passes' if capable else 'fails'}")
            else:
                capable = self.supports_hma_config(connector, "config")
                self.note(f"§3.3: supports_hma_config({connector.name}) is {capable}")
            if not capable:
                self.warn(block["connector_warning"], name=connector.name)
                need_disable = True
        self.note(f"{self.spec} 2: flag None resolves to need_disable={need_disable}")
        return need_disable

    def create_connector(self, connector: _Connector, hma_enabled: bool) -> None:
        """The factory (§2.5 item 1, §3.5 items 1-2) and MultiConnector's constructor."""
        factory = self.table["factory"]
        if self.table["block"]["vllm_use_v1_gate"] and not _env_true(self.env(USE_V1_ENV) or "1"):
            # 0.10.0 factory.py:59 / 0.11.0 factory.py:46: the V1 factory refuses under the V0 engine, first
            self.note(f"{self.spec}: VLLM_USE_V1 is off, the V1 connector factory refuses")
            raise _Raised("E-V1-CONNECTOR-UNDER-V0", "create_connector")
        cls = self.lookup(connector, "create_connector")
        if hma_enabled and factory["check"] != "none":
            capable = cls.hma if factory["check"] == "class" else self.supports_hma_config(connector, "create_connector")
            if not capable:
                self.note(f"§2.5/§3.5: factory check ({factory['check']}) rejects {cls.class_name} with HMA on")
                raise _Raised("E-F", "create_connector", name=cls.class_name)
        if cls.multi:
            self.multi_connector_init(connector, hma_enabled)
        self.note(f"factory creates {cls.class_name}")

    def multi_connector_init(self, connector: _Connector, hma_enabled: bool) -> None:
        """MultiConnector.__init__ (the same code in every release from 0.13.0, multi_connector.py)."""
        factory = self.table["factory"]
        if not connector.has_children_key:
            self.note('multi_connector.py:242: MultiConnector.__init__ asserts kv_connector_extra_config has "connectors"')
            raise _Raised("E-MULTI-NO-CONNECTORS", "create_connector")
        # It builds a KVTransferConfig per child, which validates kv_role in every era (vLLM 0.13.0
        # config/kv_transfer.py:100), and looks that child's class up, child by child, before constructing any
        # (0.34.0 multi_connector.py:274-287, the same loop from 0.13.0).
        children = self.child_configs(connector)
        if factory["multi_children_one_at_a_time"]:
            # before 0.11.1: configured, looked up and constructed one child at a time
            for child in children:
                self.child_role(child, "create_connector")
                child_cls = self.lookup(child, "create_connector")
                if child_cls.multi:
                    self.note(f"multi_connector.py:99: MultiConnector.__init__ constructs its child {child_cls.class_name}")
                    self.multi_connector_init(child, hma_enabled)
            return
        child_classes = []
        for child in children:
            self.child_role(child, "create_connector")
            child_classes.append(self.lookup(child, "create_connector"))
        # Then it constructs the children in order (0.34.0 multi_connector.py:184-188): a MultiConnector child
        # runs this same __init__ on its own children before the parent's assertion below.
        for child, child_cls in zip(children, child_classes):
            if child_cls.multi:
                self.note(f"multi_connector.py:187: MultiConnector.__init__ constructs its child {child_cls.class_name}")
                self.multi_connector_init(child, hma_enabled)
        if hma_enabled and factory["multi_init_asserts"]:
            # all_children_support_hma: False without children (§3.3); recursive where the factory is.
            if factory["check"] == "supports_hma_config":
                capable = bool(children) and all(self.supports_hma_config(c, "create_connector") for c in children)
            else:
                capable = self.constructed_children_support_hma(children)
            if not capable:
                self.note("§3.5 item 2: MultiConnector.__init__ asserts every child supports HMA")
                raise _Raised("E-MULTI-ASSERT", "create_connector")

    def constructed_children_support_hma(self, children: list[_Connector]) -> bool:
        """vLLM 0.21.0-0.22.x multi_connector.py:163-175: __init__ constructs every child, then asserts
        `all(supports_hma(c) ...)` over the instances: an empty list passes. A MultiConnector child ran this same
        assertion on its own children when it was built (the nested construction), so only direct children count."""
        for child in children:
            cls = self.lookup(child, "create_connector")
            if not cls.hma:
                return False
        return True

    def run(self) -> dict:
        table, case = self.table, self.case
        offloading_requested = case.kv_offloading_backend is not None or case.kv_offloading_size is not None
        if offloading_requested and table["offloading"]["shortcut"] == "absent":
            raise _Unknown("kv offloading does not exist before vLLM 0.11.1 (§6)")
        user = self.user_connector()
        if case.hisparse and not table["hisparse"]["exists"]:
            raise _Unknown("HiSparse does not exist before vLLM 0.30.0 (§6)")
        if user is not None and user.role is None:
            self.note("KVTransferConfig: kv_connector is set without kv_role")
            raise _Raised(table["factory"]["missing_kv_role_error"], "config")
        if case.speculative_method is not None:
            self.speculative_check()
        hisparse_table = table["hisparse"]
        hisparse = hisparse_table["exists"] and self.hisparse_on(user)
        if hisparse:
            # §10 lists the CUDA check (item 2) before the sparse-indexer model check (item 3); the
            # oracle takes that as their order.
            if hisparse_table["platform_outside_vllm_unknown"] and table["platforms"][case.platform] == "unknown":
                raise _Unknown("the platform's HiSparse backend is defined outside vLLM")
            if case.platform != "cuda":
                self.note("§10 item 2: HiSparse requires CUDA (0.34: a HiSparse backend), checked before the HMA block")
                raise _Raised(hisparse_table["platform_error"], "config")
            if case.attention_chunk_size or case.speculative_method is not None:
                raise _Unknown(
                    "HiSparse with a model config needs index_topk (§10 item 3), which a case cannot express"
                )
        if table["factory"]["tree_lookup_before_block"] and user is not None:
            self.note("0.34 config/vllm.py:2006: every connector class of the tree is looked up before the HMA block")
            self.lookup_tree(user, "config")
        shortcut = table["offloading"]["shortcut"]
        if table["offloading"]["hidden_states_refuses_chunked_prefill"] and user is not None \
                and user.name == "ExampleHiddenStatesConnector":
            self.note("0.22.0 config/vllm.py:737-746 (0.23.0: 764-772): ExampleHiddenStatesConnector with chunked prefill (on by default)")
            raise _Raised("E-HIDDEN-STATES-CHUNKED-PREFILL", "config")
        self.connector_at_block = self.offloading_connector(user) if shortcut == "before" else user
        if hisparse and hisparse_table["host_pool_required"]:
            self.hisparse_host_pool(self.connector_at_block)
        resolved = self.resolve()
        if hisparse and resolved:
            self.note("§3.2 step 4: HiSparse with HMA disabled")
            raise _Raised("E-H", "config")
        method = case.speculative_method
        if self.connector_at_block is not None and method is not None and case.custom_speculative is None and (
            method in table["factory"]["lookahead_lookup_methods"]
        ):
            self.note("0.34 config/vllm.py:2261: the EAGLE block drop's hash lookahead looks the connector up again")
            self.lookup(self.connector_at_block, "config")
        # where the shortcut runs after the block it still runs at config (its own error surfaces there)
        created = self.offloading_connector(user) if shortcut == "after" else self.connector_at_block
        if case.stage == "create_connector":
            if created is not None:
                self.create_connector(created, hma_enabled=not resolved)
        return _expected(resolved, self.warnings)


def _expected(resolved: bool | None = None, warnings: list[OutcomeWarning] = (),
              error: OutcomeError | None = None, unknown: str | None = None) -> dict[str, Any]:
    """An expected outcome in the typed outcome's JSON form (`id` and `rules` are the caller's)."""
    return {"resolved_disable_hma": resolved, "warnings": [message.to_dict() for message in warnings],
            "error": None if error is None else error.to_dict(), "unknown": unknown}


def _outcome_for(table: dict, case: Case, platform_supported: bool) -> Expectation:
    evaluation = _Evaluation(table, case, platform_supported)
    try:
        outcome = evaluation.run()
    except _Raised as raised:
        evaluation.note(f"raises {raised.message_id} at stage {raised.error.stage}")
        outcome = _expected(None, evaluation.warnings, raised.error)
    except _Unknown as unknown:
        outcome = _expected(unknown=str(unknown))
    return Expectation(outcome=outcome, because=tuple(evaluation.because))


def expected_outcome(case: Case | dict) -> Expectation:
    """The outcome the spec predicts for `case` (a parsed case, or a case dict of the schema, which is parsed
    here: a case that does not follow the schema raises `CaseError`), with the rules that fired."""
    if not isinstance(case, Case):
        case = parse_case(case)
    table = era_table(case.era)
    platform = case.platform
    support = table["platforms"][platform]
    if support != "unknown":
        return _outcome_for(table, case, support)
    # The platform's support is not knowable (TPU in 0.33, §8.13): the outcome is known only when it
    # does not depend on that value.
    supported, unsupported = _outcome_for(table, case, True), _outcome_for(table, case, False)
    if supported.outcome == unsupported.outcome:
        return Expectation(supported.outcome, supported.because + (f"{platform}: same outcome with or without HMA support",))
    reason = f"{platform}'s support_hybrid_kv_cache() lives outside vLLM in this era (§3.6, §8.13) and the outcome depends on it"
    return Expectation(_expected(unknown=reason), (reason,))
