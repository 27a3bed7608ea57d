"""Connector classes loaded by module path in the resolver's tests."""

from reference_impl.connector.base import SupportsHMA


class ExternalHMAConnector(SupportsHMA):
    """An out-of-tree connector that declares HMA support."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        self.role = role

    def request_finished_all_groups(self, request, block_ids):
        return False, None


class ExternalPlainConnector:
    """An out-of-tree connector without HMA support."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        self.role = role


class TwoArgConnector(SupportsHMA):
    """Uses the deprecated (vllm_config, role) constructor."""

    def __init__(self, vllm_config, role):
        self.role = role

    def request_finished_all_groups(self, request, block_ids):
        return False, None


class MultiConnector(SupportsHMA):
    """Stands in for vLLM's MultiConnector as a base class."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        self.role = role

    def request_finished_all_groups(self, request, block_ids):
        return False, None


class RenamedMultiConnector(MultiConnector):
    """A MultiConnector subclass registered under another name (spec 3.3)."""


# A module-path connector using a built-in name: seed looks in the registry first, 0.33 here first.
class LMCacheConnectorV1(SupportsHMA):
    """An external, HMA-capable class that shadows the built-in name."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        self.role = role

    def request_finished_all_groups(self, request, block_ids):
        return False, None
