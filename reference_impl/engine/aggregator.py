"""`KVOutputAggregator`: merges the workers' `KVConnectorOutput`s as vLLM 0.33 does.

An id is finished (sending or receiving) only once every worker reported it (`expected_count` workers);
a failed receive reaches the scheduler only together with its finished receive from all workers. A worker that
reports an id again while the other workers have yet to report it would be counted twice by vLLM's
aggregator (the transfer would look complete early): that is a `ConnectorReportError`.
"""

from __future__ import annotations

from collections import Counter

from reference_impl.connector.base import KVConnectorOutput


class ConnectorReportError(AssertionError):
    """A connector reported a transfer completion vLLM's scheduler (or its aggregator) cannot accept: a finished
    load for a request that is not waiting for one, a finished send for a request that holds no delayed blocks,
    an id the scheduler does not know, or one worker reporting the same completion twice."""


class KVOutputAggregator:
    """Stateful merge across steps (a worker may report an id in a later step than another)."""

    def __init__(self, expected_count: int):
        self.expected_count = expected_count
        self._sending: Counter[str] = Counter()
        self._recving: Counter[str] = Counter()
        self._failed: set[str] = set()
        # (kind, id) -> workers that reported it while it is pending (not yet reported by all)
        self._reported_by: dict[tuple[str, str], set[int]] = {}

    def _count(self, kind: str, counter: Counter, worker: int, ids) -> None:
        for req_id in set(ids or ()):
            seen = self._reported_by.setdefault((kind, req_id), set())
            if worker in seen:
                raise ConnectorReportError(
                    f"worker {worker} reported {req_id} in {kind} again before every worker had reported it once "
                    f"(vLLM's aggregator would count it twice and complete the transfer early)")
            seen.add(worker)
            counter[req_id] += 1

    def aggregate(self, outputs: list[KVConnectorOutput | None]) -> KVConnectorOutput:
        """One output for the scheduler from this step's worker outputs (in worker order)."""
        merged = KVConnectorOutput()
        for worker, out in enumerate(outputs):
            if out is None:
                continue
            self._count("finished_sending", self._sending, worker, out.finished_sending)
            self._count("finished_recving", self._recving, worker, out.finished_recving)
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
                self._reported_by.pop(("finished_sending", req_id), None)
        for req_id, count in list(self._recving.items()):
            if count >= self.expected_count:
                merged.finished_recving.add(req_id)
                del self._recving[req_id]
                self._reported_by.pop(("finished_recving", req_id), None)
                if req_id in self._failed:
                    merged.failed_recving.add(req_id)
                    self._failed.discard(req_id)
        return merged

    @property
    def pending(self) -> dict[str, int]:
        """Ids some but not all workers reported (for liveness checks)."""
        return {**{f"send:{k}": v for k, v in self._sending.items()}, **{f"recv:{k}": v for k, v in self._recving.items()}}
