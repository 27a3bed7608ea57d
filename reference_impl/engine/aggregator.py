"""`KVOutputAggregator`: merges the workers' `KVConnectorOutput`s as vLLM 0.33 does.

An id is finished (sending or receiving) only once every worker reported it (`expected_count` workers);
a failed receive reaches the scheduler only together with its finished receive from all workers.
"""

from __future__ import annotations

from collections import Counter

from reference_impl.connector.base import KVConnectorOutput


class KVOutputAggregator:
    """Stateful merge across steps (a worker may report an id in a later step than another)."""

    def __init__(self, expected_count: int):
        self.expected_count = expected_count
        self._sending: Counter[str] = Counter()
        self._recving: Counter[str] = Counter()
        self._failed: set[str] = set()

    def aggregate(self, outputs: list[KVConnectorOutput | None]) -> KVConnectorOutput:
        """One output for the scheduler from this step's worker outputs."""
        merged = KVConnectorOutput()
        for out in outputs:
            if out is None:
                continue
            self._sending.update(set(out.finished_sending or ()))
            self._recving.update(set(out.finished_recving or ()))
            self._failed |= set(out.failed_recving or ())
            merged.invalid_block_ids |= set(out.invalid_block_ids or ())
            if out.kv_connector_stats is not None:
                merged.kv_connector_stats = out.kv_connector_stats if merged.kv_connector_stats is None \
                    else merged.kv_connector_stats.aggregate(out.kv_connector_stats)
            if out.kv_connector_worker_meta is not None:
                merged.kv_connector_worker_meta = out.kv_connector_worker_meta \
                    if merged.kv_connector_worker_meta is None \
                    else merged.kv_connector_worker_meta.aggregate(out.kv_connector_worker_meta)
        for req_id, count in list(self._sending.items()):
            if count >= self.expected_count:
                merged.finished_sending.add(req_id)
                del self._sending[req_id]
        for req_id, count in list(self._recving.items()):
            if count >= self.expected_count:
                merged.finished_recving.add(req_id)
                del self._recving[req_id]
                if req_id in self._failed:
                    merged.failed_recving.add(req_id)
                    self._failed.discard(req_id)
        return merged

    @property
    def pending(self) -> dict[str, int]:
        """Ids some but not all workers reported (for liveness checks)."""
        return {**{f"send:{k}": v for k, v in self._sending.items()}, **{f"recv:{k}": v for k, v in self._recving.items()}}
