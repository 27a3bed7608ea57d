"""Out-of-tree connectors that the config matrix loads through `kv_connector_module_path`.

They stand for a vendor's classes: each is found by its class name in this module, and only what the
config rules look at matters (the MRO names SupportsHMA / MultiConnector, and whether the constructor
takes `kv_cache_config`). Methods are deliberately minimal; these classes are never run as connectors.
"""

from __future__ import annotations

from reference_impl.connector.base import SupportsHMA
from reference_impl.connector.multi import MultiConnector

MODULE_PATH = __name__


class _MinimalConnector:
    """The three-argument constructor of current vLLM connectors."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        self.vllm_config, self.role, self.kv_cache_config = vllm_config, role, kv_cache_config

    def request_finished(self, request, block_ids):
        return False, None


class ExternalHMAConnector(_MinimalConnector, SupportsHMA):
    """An external connector that declares HMA support (spec §2.7: the seed's only working combination)."""

    def request_finished_all_groups(self, request, block_ids):
        return False, None


class ExternalPlainConnector(_MinimalConnector):
    """An external connector without SupportsHMA."""


class LegacyTwoArgConnector:
    """An external connector with the deprecated 2-argument constructor (spec §3.3: an error in 0.33)."""

    def __init__(self, vllm_config, role):
        self.vllm_config, self.role = vllm_config, role

    def request_finished(self, request, block_ids):
        return False, None


class LMCacheConnectorV1(ExternalHMAConnector):
    """A hand-patched LMCache connector that adds SupportsHMA under the built-in's registered name.

    Spec §2.7 / §8.14: users patch SupportsHMA in by hand. Whether it is used depends on the era's lookup
    order: the registry wins in the seed, the module path wins in 0.33 (§3.3).
    """


class RenamedMultiConnector(MultiConnector):
    """A MultiConnector subclass under another name: the literal-name child check skips it (spec §3.3)."""
