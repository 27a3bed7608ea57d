"""Config resolution of the reference engine: what each vLLM release does with the HMA flag.

`resolve_case(case)` is the reference target of the config matrix (one case dict in, one outcome out);
`VllmConfig` and friends are the vLLM-shaped objects; `eras` holds the per-release rules as data.
"""

from reference_impl.config.case import Case, CaseError, parse_case
from reference_impl.config.cases import resolve_case, resolve_cases, run_case
from reference_impl.config.eras import ERAS, ERAS_BY_ID, PROFILES, Era, era_for_version, resolve_era
from reference_impl.config.errors import HMAConfigError, UnknownOutcome
from reference_impl.config.factory import KVConnectorFactory
from reference_impl.config.objects import (
    AttentionConfig,
    CacheConfig,
    HiSparseConfig,
    KVEventsConfig,
    KVTransferConfig,
    ModelConfig,
    Runtime,
    SchedulerConfig,
    SpeculativeConfig,
)
from reference_impl.config.resolution import VllmConfig
from reference_impl.vocabulary import STAGES

__all__ = [
    "AttentionConfig", "CacheConfig", "Case", "CaseError", "ERAS", "ERAS_BY_ID", "Era", "HMAConfigError", "HiSparseConfig",
    "KVConnectorFactory", "KVEventsConfig", "KVTransferConfig", "ModelConfig", "PROFILES", "Runtime", "STAGES",
    "SchedulerConfig", "SpeculativeConfig", "UnknownOutcome", "VllmConfig", "era_for_version", "parse_case",
    "resolve_case", "resolve_cases", "resolve_era", "run_case",
]
