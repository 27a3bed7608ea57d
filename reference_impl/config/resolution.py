"""The HMA block of `VllmConfig.__post_init__` and the connector factory's enforcement, for every era.

Inputs and order follow `config-rules.md`: pre-seed (section 1.2), seed (2.2), 0.33 (3.2), with the
era's data (`eras.Era`) deciding everything that differs only in data.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from reference_impl.config import eras as E
from reference_impl.config import messages
from reference_impl.config.errors import HMAConfigError, UnknownOutcome
from reference_impl.config.factory import KVConnectorFactory, class_is_multi
from reference_impl.config.objects import (
    AttentionConfig,
    CacheConfig,
    KVEventsConfig,
    KVTransferConfig,
    ModelConfig,
    Runtime,
    SchedulerConfig,
    SpeculativeConfig,
)

logger = logging.getLogger("reference_impl.config")


@contextmanager
def warnings_not_logged():
    """Resolve without logging the warnings (this logger and its children): each stays in its outcome.

    For callers that resolve thousands of cases and read the warnings from the outcomes (the config matrix's era
    items, the invariants' judgement of an era): there, under pytest, every record was kept and formatted by its
    log capture for one item's report (about 5% of the matrix pass's CPU time), records no cell's own report
    carries. Logging them as vLLM does stays the default for any other caller."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)

CHUNKED_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


class Resolution:
    """What resolving one configuration did: warnings (in order), rules fired, and the factory used."""

    __slots__ = ("warnings", "rules", "factory", "platform_unknown")

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.rules: list[str] = []
        self.factory: KVConnectorFactory | None = None
        self.platform_unknown: str | None = None

    def warn(self, text: str) -> None:
        """Log a warning as vLLM does and keep it for the outcome."""
        logger.warning(text)
        self.warnings.append(text)

    def fail(self, message: str, stage: str, rule: str, vllm_type: str = "ValueError"):
        """Record the rule and raise vLLM's failure at `stage`."""
        self.rules.append(rule)
        raise HMAConfigError(message, stage=stage, vllm_type=vllm_type, rule=rule)


def env_flag(env: dict[str, str], name: str, default: str) -> bool:
    """vLLM's integer-valued boolean environment variables (`bool(int(value))`)."""
    return bool(int(env.get(name, default)))


def _or3(a: bool | None, b: bool | None) -> bool | None:
    """Three-valued OR: True wins, then unknown (None), then False."""
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


# --------------------------------------------------------------------------------------------------
def _keeps_trace(stage_function):
    """Attach the partial Resolution to an error so its warnings and rules reach the outcome."""

    def run(cfg: VllmConfig, res: Resolution) -> None:
        try:
            stage_function(cfg, res)
        except (HMAConfigError, UnknownOutcome) as exc:
            exc.resolution = res
            raise

    run.__name__, run.__doc__ = stage_function.__name__, stage_function.__doc__
    return run


@dataclass(slots=True)
class VllmConfig:
    """The aggregate config; construction resolves `scheduler_config.disable_hybrid_kv_cache_manager`.

    After construction `resolution` holds the warnings logged and the rules that fired. Errors raise
    `HMAConfigError` (stage "config"); an outcome that cannot be known raises `UnknownOutcome`.
    """

    runtime: Runtime
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
    kv_transfer_config: KVTransferConfig | None = None
    kv_events_config: KVEventsConfig | None = None
    model_config: ModelConfig | None = None
    speculative_config: SpeculativeConfig | None = None
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    attention_config: AttentionConfig = field(default_factory=AttentionConfig)
    resolution: Any = None

    def __post_init__(self) -> None:
        self.resolution = Resolution()
        post_init(self, self.resolution)


@_keeps_trace
def post_init(cfg: VllmConfig, res: Resolution) -> None:
    """Resolve the flag in place, as `VllmConfig.__post_init__` does in the runtime's era."""
    era = cfg.runtime.era
    factory = res.factory = KVConnectorFactory(era, res)
    hisparse = cfg.attention_config.hisparse_config is not None
    wants_offloading = cfg.cache_config.kv_offloading_backend is not None or cfg.cache_config.kv_offloading_size is not None

    if hisparse and not era.hisparse:
        res.rules.append("feature_absent")
        raise UnknownOutcome(f"HiSparse does not exist in vLLM {cfg.runtime.vllm_version} (it arrived in 0.30.0)", "feature_absent")
    if wants_offloading and era.offloading_shortcut == E.OFFLOAD_ABSENT:
        res.rules.append("feature_absent")
        raise UnknownOutcome(f"--kv-offloading-* does not exist in vLLM {cfg.runtime.vllm_version} (it arrived in 0.11.1)", "feature_absent")
    if cfg.kv_transfer_config is not None:
        factory.check_role(cfg.kv_transfer_config, "config")
    if cfg.speculative_config is not None:
        _check_speculative_method(cfg, res)

    if not era.tri_state_flag and cfg.scheduler_config.disable_hybrid_kv_cache_manager is None:
        res.rules.append("flag_absent_default")
        cfg.scheduler_config.disable_hybrid_kv_cache_manager = False

    if era.hisparse:
        hisparse = _hisparse_prerequisites(cfg, res, hisparse)
    if era.config_tree_lookup and cfg.kv_transfer_config is not None and cfg.kv_transfer_config.kv_connector is not None:
        # 0.34 config/vllm.py:2006 -> 3198: the extensible KV cache asks every connector of the tree how it
        # reaches the KV cache, which looks each class up (factory.py:137-141, multi_connector.py:238-247)
        res.rules.append("connector_tree_looked_up")
        factory.lookup_tree(cfg.kv_transfer_config, "config")
    if era.offloading_shortcut == E.OFFLOAD_BEFORE:
        ktc = cfg.kv_transfer_config
        if era.hidden_states_refuses_chunked_prefill and ktc is not None and ktc.kv_connector == "ExampleHiddenStatesConnector":
            # chunked prefill is vLLM's default and no case turns it off
            res.fail(messages.E_HIDDEN_STATES_CHUNKED_PREFILL, "config", "hidden_states_chunked_prefill")
        _apply_offloading_shortcut(cfg, res, "offloading_shortcut_before")
    if hisparse and era.hisparse_host_pool:
        _hisparse_host_pool(cfg, res)

    if era.tri_state_flag:
        _hma_block_tri_state(cfg, res)
    else:
        _hma_block_two_state(cfg, res)

    if era.offloading_shortcut == E.OFFLOAD_AFTER:
        _apply_offloading_shortcut(cfg, res, "offloading_shortcut_after")
    if hisparse and cfg.scheduler_config.disable_hybrid_kv_cache_manager is True:
        res.fail(messages.E_H, "config", "hisparse_requires_hma")
    if era.lookahead_lookup and cfg.kv_transfer_config is not None and _drops_eagle_block(cfg):
        # 0.34 config/vllm.py:2261 -> 633-655: an EAGLE-style speculator's hash lookahead asks the connector
        # class (after the offloading shortcut) whether it supports lookahead block hashes
        res.rules.append("lookahead_connector_lookup")
        factory.get_connector_class(cfg.kv_transfer_config, "config")


def _check_speculative_method(cfg: VllmConfig, res: Resolution) -> None:
    """SpeculativeConfig's method: a custom method needs 0.34's plugin registry; a name the release does not
    know is refused when the config is built, before VllmConfig runs (0.10.x, 0.33: pydantic's Literal check;
    0.34: neither built in nor registered)."""
    era, spec = cfg.runtime.era, cfg.speculative_config
    if spec.custom_uses_target_hidden_states is not None:
        if not era.custom_speculative_methods:
            res.rules.append("feature_absent")
            raise UnknownOutcome(
                f"custom speculative methods (registered by a plugin) do not exist in vLLM {cfg.runtime.vllm_version} "
                "(they arrived in 0.34.0)", "feature_absent")
        res.rules.append("custom_speculative_method")
        return
    if era.speculative_method_check == "registry" and spec.method not in E.BUILTIN_SPECULATIVE_METHODS:
        res.fail(messages.E_UNKNOWN_SPECULATIVE_METHOD.format(
            method=spec.method, builtin=sorted(E.BUILTIN_SPECULATIVE_METHODS), custom=[]),
            "config", "speculative_method_unknown")
    if era.speculative_method_check == "literal" and spec.method not in era.speculative_literal:
        quoted = [f"'{name}'" for name in era.speculative_literal]
        choices = f"{', '.join(quoted[:-1])} or {quoted[-1]}"
        res.fail(messages.E_SPECULATIVE_LITERAL.format(choices=choices), "config", "speculative_method_unknown",
                 vllm_type="ValidationError")


def _drops_eagle_block(cfg: VllmConfig) -> bool:
    """SpeculativeConfig.use_eagle_block_drop() with its defaults: EAGLE, EAGLE3 or MTP (not DFlash/DSpark,
    and not a custom method without a built-in base)."""
    spec = cfg.speculative_config
    if spec is None or spec.custom_uses_target_hidden_states is not None:
        return False
    return spec.method in ("eagle", "eagle3", "mtp") or spec.method in E.MTP_ALIASES


def _hisparse_host_pool(cfg: VllmConfig, res: Resolution) -> None:
    """0.34 config/vllm.py:2133-2141 and config/kv_transfer.py:16-47: HiSparse needs exactly one
    HiSparseConnector (top level, or a direct child of a MultiConnector) with a positive host_pool_gib."""
    ktc = cfg.kv_transfer_config
    entries: list = []
    if ktc is not None:
        if ktc.kv_connector == "MultiConnector":
            connectors = ktc.kv_connector_extra_config.get("connectors", [])
        else:
            connectors = [{"kv_connector": ktc.kv_connector, "kv_connector_extra_config": ktc.kv_connector_extra_config}]
        entries = [c.get("kv_connector_extra_config", {}) for c in connectors if c.get("kv_connector") == "HiSparseConnector"]
    if len(entries) > 1:
        res.fail(messages.E_HISPARSE_TWO, "config", "hisparse_host_pool")
    if not entries:
        res.fail(messages.E_HISPARSE_NEEDS_CONNECTOR, "config", "hisparse_needs_connector")
    size = entries[0].get("host_pool_gib")
    if size is None:
        res.fail(messages.E_HISPARSE_NO_HOST_POOL, "config", "hisparse_host_pool")
    try:
        size = float(size)  # vLLM converts with float(): its errors are the answer
    except (TypeError, ValueError, OverflowError) as exc:
        res.fail(str(exc), "config", "hisparse_host_pool", vllm_type=type(exc).__name__)
    if size <= 0:
        res.fail(messages.E_HISPARSE_HOST_POOL_NOT_POSITIVE, "config", "hisparse_host_pool")
    res.rules.append("hisparse_host_pool")


def _hisparse_prerequisites(cfg: VllmConfig, res: Resolution, hisparse: bool) -> bool:
    ktc = cfg.kv_transfer_config
    if not hisparse and ktc is not None and ktc.has_connector("HiSparseConnector"):
        res.rules.append("hisparse_auto_enabled")
        hisparse = True
    if hisparse:
        era = cfg.runtime.era
        if era.hisparse_platform_check == "backend" and era.platform_support[cfg.runtime.platform] is None:
            res.rules.append("platform_unknown")
            raise UnknownOutcome(
                f"platform {cfg.runtime.platform!r}: get_hisparse_backend_cls() is defined outside vLLM "
                f"{cfg.runtime.vllm_version}, so whether it supports HiSparse cannot be known", "platform_unknown")
        if cfg.runtime.platform != "cuda":
            message = messages.E_HISPARSE_PLATFORM if era.hisparse_platform_check == "backend" else messages.E_HISPARSE_CUDA
            res.fail(message, "config", "hisparse_requires_cuda")
        if cfg.model_config is not None or cfg.speculative_config is not None:
            # a speculative config needs the target's model config too
            raise UnknownOutcome(
                "HiSparse with a model config: vLLM also requires the model's index_topk, which a case does not describe",
                "feature_absent",
            )
    return hisparse


def _apply_offloading_shortcut(cfg: VllmConfig, res: Resolution, rule: str) -> None:
    era, cache = cfg.runtime.era, cfg.cache_config
    if era.offloading_needs_size:
        if cache.kv_offloading_size is None:
            return
        backend = cache.kv_offloading_backend or "native"
    else:
        if cache.kv_offloading_backend is None:
            return
        if cache.kv_offloading_size is None:
            # 0.13.0 config/vllm.py:484-487 (0.11.1: 313-316): the backend alone triggers the shortcut, which
            # then demands the size
            res.fail(messages.E_OFFLOAD_NO_SIZE, "config", "offloading_size_missing")
        backend = cache.kv_offloading_backend
    name = era.offloading_connectors[backend]
    if era.simple_offload_env and backend == "native" and env_flag(cfg.runtime.env, "VLLM_USE_SIMPLE_KV_OFFLOAD", "0"):
        name = "SimpleCPUOffloadConnector"
    res.rules.append(rule)
    if cfg.kv_transfer_config is None:
        cfg.kv_transfer_config = KVTransferConfig(kv_connector=name, kv_role="kv_both")
    else:
        # the shortcut overwrites a user-supplied connector and its role but keeps kv_connector_module_path
        # (vLLM 0.33.0 config/vllm.py:1157-1190)
        cfg.kv_transfer_config.kv_connector = name
        cfg.kv_transfer_config.kv_role = "kv_both"


def _platform_unsupported(cfg: VllmConfig, res: Resolution) -> bool | None:
    support = cfg.runtime.era.platform_support[cfg.runtime.platform]
    if support is None:
        res.rules.append("platform_unknown")
        res.platform_unknown = (
            f"platform {cfg.runtime.platform!r}: support_hybrid_kv_cache() is defined outside vLLM "
            f"{cfg.runtime.vllm_version} (tpu_inference), so the outcome cannot be known from vLLM's sources"
        )
        return None
    if not support:
        res.rules.append("platform_unsupported")
        return True
    return False


def _chunked_local(cfg: VllmConfig, res: Resolution) -> bool:
    """The chunked-local-attention item: True when it disables HMA (logs W-C where the era does)."""
    era = cfg.runtime.era
    if cfg.model_config is None or cfg.model_config.attention_chunk_size is None:
        return False
    spec = cfg.speculative_config
    if spec is not None and spec.custom_uses_target_hidden_states is not None:
        # 0.34: the custom method's config class answers `uses_target_hidden_states`
        if spec.custom_uses_target_hidden_states:
            res.rules.append("chunked_local_target_hidden_states")
            return True
    elif spec is not None and spec.method in era.eagle_methods:
        res.rules.append("chunked_local_eagle")
        return True
    if not era.chunked_local_without_eagle:
        return False
    if era.chunked_env_var and env_flag(cfg.runtime.env, CHUNKED_ENV, era.chunked_env_default):
        res.rules.append("chunked_local_env_on")
        return False
    res.warn(messages.W_C)
    res.rules.append("chunked_local_env_off")
    return True


def _hma_block_two_state(cfg: VllmConfig, res: Resolution) -> None:
    """Before the seed: independent ifs, any of which sets the flag to True (section 1.2)."""
    era, sched = cfg.runtime.era, cfg.scheduler_config
    if era.gated_on_vllm_use_v1 and not env_flag(cfg.runtime.env, "VLLM_USE_V1", "1"):
        res.rules.append("vllm_use_v1_off")
        return
    if sched.disable_hybrid_kv_cache_manager:
        res.rules.append("flag_true_kept")
        return
    disable: bool | None = _platform_unsupported(cfg, res)
    if cfg.kv_transfer_config is not None:
        if era.connector_rule == E.CONNECTOR_ALWAYS_WARN:
            res.warn(messages.W_A1)
        res.rules.append("kv_transfer_present")
        disable = True
    if era.kv_events_disables and cfg.kv_events_config is not None:
        res.rules.append("kv_events_present")
        disable = True
    if _chunked_local(cfg, res):
        disable = True
    _settle(cfg, res, disable)


def _hma_block_tri_state(cfg: VllmConfig, res: Resolution) -> None:
    """Seed and later: need_disable, then a branch on the flag (sections 2.2 and 3.2)."""
    era, sched = cfg.runtime.era, cfg.scheduler_config
    need: bool | None = _platform_unsupported(cfg, res)
    if era.kv_events_disables and cfg.kv_events_config is not None:
        res.rules.append("kv_events_present")
        need = True
    if _chunked_local(cfg, res):
        need = True

    flag = sched.disable_hybrid_kv_cache_manager
    if flag is True:
        res.rules.append("flag_true_kept")
        return
    if flag is False:
        res.rules.append("flag_false_explicit")
        if need is True:
            res.fail(era.explicit_enable_error, "config", "explicit_enable_rejected")
        _settle(cfg, res, need)
        res.rules.append("explicit_enable_honoured")
        sched.disable_hybrid_kv_cache_manager = False
        return

    res.rules.append("flag_none_auto")
    ktc = cfg.kv_transfer_config
    if ktc is not None:
        need = _or3(need, _connector_disables(cfg, res, ktc))
    _settle(cfg, res, need)


def _connector_disables(cfg: VllmConfig, res: Resolution, ktc: KVTransferConfig) -> bool:
    """The flag-None connector item of the era (W-B1, W-22 or W-C1)."""
    rule = cfg.runtime.era.connector_rule
    factory = res.factory
    if rule == E.CONNECTOR_FLAG_NONE:
        res.warn(messages.W_B1)
        res.rules.append("kv_transfer_present")
        return True
    if rule == E.CONNECTOR_CLASS_CHECK:
        offender = factory.non_hma_class_name(ktc, "config")
        if offender is None:
            res.rules.append("connector_hma_capable")
            return False
        res.warn(messages.W_22.format(connector=offender))
        res.rules.append("connector_not_hma")
        return True
    if factory.supports_hma_config(ktc, "config"):
        res.rules.append("connector_hma_capable")
        return False
    res.warn(messages.W_C1)
    res.rules.append("connector_not_hma")
    return True


#: `UnknownOutcome.rule` when only the platform's support_hybrid_kv_cache() is missing from the decision: the
#: case runner then tries both values (`cases.run_case`), as the oracle and the vllm target do.
SUPPORT_UNKNOWN = "platform_support_unknown"


def _settle(cfg: VllmConfig, res: Resolution, disable: bool | None) -> None:
    if disable is None:
        if res.platform_unknown is not None:
            raise UnknownOutcome(res.platform_unknown, SUPPORT_UNKNOWN)
        raise UnknownOutcome("the outcome depends on something vLLM's sources do not define", "platform_unknown")
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = disable


# --------------------------------------------------------------------------------------------------
@_keeps_trace
def create_connector(cfg: VllmConfig, res: Resolution) -> None:
    """`KVConnectorFactory.create_connector`'s checks for the configured connector (stage create_connector)."""
    ktc = cfg.kv_transfer_config
    if ktc is None:
        return
    era, factory = cfg.runtime.era, res.factory
    stage = "create_connector"
    if era.gated_on_vllm_use_v1 and not env_flag(cfg.runtime.env, "VLLM_USE_V1", "1"):
        # before anything else the factory checks the engine (0.10.0 factory.py:59, 0.11.0 factory.py:46)
        res.fail(messages.E_V1_CONNECTOR_UNDER_V0, stage, "v1_connector_under_v0")
    hma_on = cfg.scheduler_config.disable_hybrid_kv_cache_manager is False
    cls = factory.get_connector_class(ktc, stage)
    if era.factory_check == E.FACTORY_NONE:
        res.rules.append("factory_no_check")
    elif not hma_on:
        res.rules.append("factory_hma_off")
    else:
        capable = factory.class_supports_hma(cls) if era.factory_check == E.FACTORY_CLASS else factory.supports_hma_config(ktc, stage)
        if not capable:
            res.fail(messages.E_F.format(connector=cls.__name__), stage, "factory_hma_check_failed")
        res.rules.append("factory_hma_check_passed")
    if class_is_multi(cls):
        _multi_connector_init(cfg, res, ktc, hma_on)


def _multi_connector_init(cfg: VllmConfig, res: Resolution, ktc: KVTransferConfig, hma_on: bool) -> None:
    """MultiConnector.__init__: a "connectors" list must exist; each child gets a KVTransferConfig (which
    validates kv_role) and a class; then each child is constructed in order, so a MultiConnector child runs
    these same checks on its own children first; with HMA on, from 0.21, every child must support HMA."""
    factory, stage = res.factory, "create_connector"
    if ktc.kv_connector_extra_config.get("connectors") is None:
        res.fail(messages.E_MULTI_NO_CONNECTORS, stage, "multi_connector_no_children_key", vllm_type="AssertionError")
    children = ktc.children()
    if cfg.runtime.era.multi_children_one_at_a_time:
        # before 0.11.1 each child is configured, looked up and constructed before the next child's config is
        # built (0.11.0 multi_connector.py:92-100)
        for child in children:
            factory.check_role(child, stage)
            if class_is_multi(factory.get_connector_class(child, stage)):
                res.rules.append("multi_child_constructed")
                _multi_connector_init(cfg, res, child, hma_on)
        return
    classes = []
    for child in children:
        factory.check_role(child, stage)
        classes.append(factory.get_connector_class(child, stage))
    for child, cls in zip(children, classes):
        if class_is_multi(cls):
            res.rules.append("multi_child_constructed")
            _multi_connector_init(cfg, res, child, hma_on)
    if hma_on and cfg.runtime.era.multi_init_asserts and not _all_children_support_hma(cfg, res, children):
        res.fail(messages.E_MULTI_ASSERT, stage, "multi_connector_assert", vllm_type="AssertionError")


def _all_children_support_hma(cfg: VllmConfig, res: Resolution, children: list[KVTransferConfig]) -> bool:
    """MultiConnector.all_children_support_hma: False without children (0.23+). Before (0.21, 0.22) the
    constructor builds its children first, then asserts `all(supports_hma(c) for c in self._connectors)`, which an
    empty list passes (vLLM 0.21.0 multi_connector.py:163-175). A MultiConnector child has already run this
    assertion on its own children while it was built (the nested construction in this stage), so only the direct
    children's classes are asked here."""
    factory = res.factory
    if cfg.runtime.era.factory_check == E.FACTORY_HMA_CONFIG:
        return bool(children) and all(factory.supports_hma_config(child, "create_connector") for child in children)
    for child in children:
        cls = factory.get_connector_class(child, "create_connector")
        if not factory.class_supports_hma(cls):
            return False
    return True
