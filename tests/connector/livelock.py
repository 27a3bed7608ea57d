"""Connectors that livelock the engine: nothing raises and nothing hangs, yet a request never finishes.

Each is the template connector (`reference_impl.connector.template`, as a vendor would start from it) with one
liveness mistake, run black box: the engine keeps stepping, and the suite's progress watchdog must fail the check
in seconds, naming the hook, where each check used to spin until the per-check time limit. `SlowAsyncConnector` is
the correct connector the watchdog must leave alone: its asynchronous loads take several steps and some wall time.
`BlockingFinishConnector` is the contrast: a real hang, which still costs the per-check time limit.
"""

from __future__ import annotations

import time

from reference_impl.connector.base import KVConnectorTransferResults
from reference_impl.connector.groups import FULL
from reference_impl.connector.template import TemplateConnector


class _Livelock(TemplateConnector):
    """The template, keyed apart (its class name in the model name): one run may hold several of these, and
    what one stores must not answer another's lookups."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self.model = f"{self.model}/{type(self).__name__}"

    def update_connector_output(self, connector_output) -> None:
        """The template's, on releases whose KVConnectorOutput has no failed_recving too (vLLM before 0.18)."""
        self._failed |= set(getattr(connector_output, "failed_recving", None) or ())


class RetriedFailingLoadConnector(_Livelock):
    """Every load fails (the backend's reads are broken), and the lookup forgets it: the recomputed request is
    offered the same hit again, whose load fails again, for ever (vLLM's recompute policy asks the connector again
    after each failure). Stuck state: a load that failed K times."""

    def update_connector_output(self, connector_output) -> None:
        """Forgets failed loads (the bug: the next lookup offers the same load)."""

    def start_load_kv(self, forward_context, **kwargs) -> None:
        meta = self._connector_metadata
        for req_id in getattr(meta, "loads", {}):
            self._failed_loads.add(req_id)
            self._finished_loads.add(req_id)


class WindowBlindRetryConnector(_Livelock):
    """Its hit counts only full-attention groups (sliding-window and Mamba objects taken as present, the bug of
    FullAttentionHitConnector), and it forgets failed loads: a hit whose window or state was never stored fails to
    load, and the same hit is offered again after each failure (issue 35: the suite spun past seven minutes on
    such a connector instead of failing C07/C09)."""

    def _stored(self, group, chunk_hash) -> bool:
        return super()._stored(group, chunk_hash) if group.kind == FULL else True

    def update_connector_output(self, connector_output) -> None:
        """Forgets failed loads."""


class SilentGetFinishedConnector(_Livelock):
    """Loads asynchronously and never reports a finished load (`get_transfer_results` drops them): the request
    waits for remote KVs that never arrive."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self.load_async = True

    def get_transfer_results(self, finished_req_ids):
        self._finished_loads, self._failed_loads = set(), set()
        return KVConnectorTransferResults(finished_recving=set(), failed_recving=set())


class NeverReadyLookupConnector(_Livelock):
    """Answers every lookup of a prompt it has stored with None ("not known yet"), for ever: the request is asked
    again every step and never admitted."""

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        hit, load_async = super().get_num_new_matched_tokens(request, num_computed_tokens)
        return (None, False) if hit else (hit, load_async)


class UnreportedSendConnector(_Livelock):
    """Delays every finished request's free (a send in flight) and never reports it sent: the finished request's
    blocks are held for ever."""

    def request_finished_all_groups(self, request, block_ids):
        super().request_finished_all_groups(request, block_ids)
        return True, None


class SlowAsyncConnector(_Livelock):
    """Correct and slow: every load is asynchronous and reported finished only after `load_steps` calls of
    `get_transfer_results` and `load_seconds` of wall time (a backend on another machine). No watchdog may
    take it for a livelock."""

    load_steps, load_seconds = 40, 0.3

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self.load_async = True
        self._pending: dict[str, list] = {}  # req_id -> [polls left, ready at, failed]

    def get_transfer_results(self, finished_req_ids):
        ready_at = time.monotonic() + self.load_seconds
        for req_id in self._finished_loads:
            self._pending[req_id] = [self.load_steps, ready_at, req_id in self._failed_loads]
        self._finished_loads, self._failed_loads = set(), set()
        done, failed = set(), set()
        for req_id, entry in list(self._pending.items()):
            entry[0] -= 1
            if entry[0] <= 0 and time.monotonic() >= entry[1]:
                done.add(req_id)
                if entry[2]:
                    failed.add(req_id)
                del self._pending[req_id]
        return KVConnectorTransferResults(finished_recving=done, failed_recving=failed)


class SlowerThanTheStepBoundConnector(SlowAsyncConnector):
    """Correct, with loads that take more steps than the watchdog's step bound (150 > NO_PROGRESS_STEPS) and a
    second of wall time: only the wall-time bound may judge such a wait."""

    load_steps, load_seconds = 150, 1.0



class BlockingFinishConnector(_Livelock):
    """Not a livelock but a real hang: the finish hook blocks for ever (a backend call without a timeout). The
    check runs out of time naming the hook, and its teardown, which aborts what is left, must not block too."""

    def request_finished_all_groups(self, request, block_ids):
        while True:
            time.sleep(0.05)
