"""The config matrix's out-of-tree connectors, written against the installed vLLM's own base classes.

`suites/config/external_connectors.py` stands for a vendor's connectors built on the reference engine's
classes; a vendor testing a real vLLM builds them on vLLM's `KVConnectorBase_V1`, `SupportsHMA` and
`MultiConnector` instead, which is what vLLM's factory checks with `issubclass`. These twins keep the
class names, the capability (MRO) and the constructor shape of the suite's classes; the `vllm` target
loads them in place of the suite's module. They are only created, never run, so their methods do nothing.
"""

from __future__ import annotations

import inspect

from vllm.distributed.kv_transfer.kv_connector.v1 import base as _vllm_base
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiConnector

# Before 0.11.1 vLLM has no SupportsHMA (its factory checks nothing): a connector there has no way to declare
# HMA support, so the "declares HMA" twin is a plain connector on those releases.
_HMA_BASES: tuple[type, ...] = (_vllm_base.SupportsHMA,) if hasattr(_vllm_base, "SupportsHMA") else ()
# The base constructor takes kv_cache_config from 0.11.1; before, every connector has two arguments.
_BASE_TAKES_KV_CACHE_CONFIG = "kv_cache_config" in inspect.signature(KVConnectorBase_V1.__init__).parameters

MODULE_PATH = __name__
# The suite module these classes stand in for (the `vllm` target maps one path onto the other).
TWIN_OF = "suites.config.external_connectors"


class _InertConnector(KVConnectorBase_V1):
    """vLLM's connector interface with every abstract method doing nothing."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        return None

    def build_connector_meta(self, scheduler_output):
        return None

    def start_load_kv(self, forward_context, **kwargs):
        return None

    def wait_for_layer_load(self, layer_name):
        return None

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return None

    def wait_for_save(self):
        return None


class ExternalHMAConnector(_InertConnector, *_HMA_BASES):
    """An external connector that declares HMA support."""

    def request_finished_all_groups(self, request, block_ids):
        return False, None


class ExternalPlainConnector(_InertConnector):
    """An external connector without SupportsHMA."""


class LegacyTwoArgConnector(_InertConnector):
    """An external connector with the deprecated 2-argument constructor."""

    def __init__(self, vllm_config, role):  # noqa: D107 - the shape under test
        super().__init__(vllm_config, role, *((None,) if _BASE_TAKES_KV_CACHE_CONFIG else ()))


class LMCacheConnectorV1(ExternalHMAConnector):
    """A hand-patched LMCache connector that adds SupportsHMA under the built-in's registered name."""


class RenamedMultiConnector(MultiConnector):
    """A MultiConnector subclass under another name (vLLM matches MultiConnector by configured name)."""
