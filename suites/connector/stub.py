"""A minimal HMA connector that records its calls: the second child in the MultiConnector check (C33)."""

from __future__ import annotations

from reference_impl.connector.base import KVConnectorBase_V1, KVConnectorMetadata, SupportsHMA

RECORDED: dict[str, list] = {}


class RecordingHMAConnector(KVConnectorBase_V1, SupportsHMA):
    """Never hits, stores nothing; logs finish hooks under `kv_connector_extra_config["log"]`."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.log = RECORDED.setdefault(vllm_config.kv_transfer_config.kv_connector_extra_config["log"], [])

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        pass

    def build_connector_meta(self, scheduler_output):
        return KVConnectorMetadata()

    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        pass

    def request_finished_all_groups(self, request, block_ids):
        self.log.append(("request_finished_all_groups", request.request_id))
        return False, {"recording_stub": True}

    def request_finished(self, request, block_ids):
        self.log.append(("request_finished", request.request_id))
        return False, None
