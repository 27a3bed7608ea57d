"""The optional white-box methods a connector may offer the connector suite, as a typed Protocol.

Every method is optional, and the suite never needs one to decide a check from behaviour alone: a
connector that offers one lets the suite look inside instead of probing (`kvconform_*` names, so they never
clash with vLLM's hooks). `--kv-connector-backdoors off` hides them all. Which checks each one sharpens or
needs: each check's record in `harness/connector_checks.py` (`backdoor`) and docs/connector-checks.md.

    class MyConnectorUnderTest(ConnectorUnderTest):     # the declaration (harness.ConnectorUnderTest): preferred,
        connector = MyConnector                         # the product stays as shipped
        def kvconform_chunk_size(self, connector) -> int:
            return connector._chunk_tokens

    class MyConnector(KVConnectorBase_V1):              # or on the connector itself (the older channel)
        def kvconform_chunk_size(self) -> int:
            return self._chunk_tokens

Implemented on a declaration, each method takes the connector instance after `self`; the declaration's method wins
over the connector's.

A connector offering all of them satisfies `isinstance(connector, KVConformBackdoors)`; the suite asks for
each method on its own (`suites.connector.context.CheckContext.optional_backdoor`). `Request` is vLLM's
(or the mini engine's) request object.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

BACKDOOR_PREFIX = "kvconform_"


@runtime_checkable
class KVConformBackdoors(Protocol):
    """The backdoors, scheduler role unless said otherwise; implement any subset."""

    def kvconform_chunk_size(self) -> int:
        """Tokens per stored object: lookups hit in multiples of it (else the suite probes the granularity)."""

    def kvconform_evict(self, request: Any, group_id: int, chunk_index: int) -> None:
        """Remove the stored object of chunk `chunk_index` of group `group_id` of `request`'s tokens (every
        rank), as a cache eviction would: the suite then checks that lookups stop at the hole."""

    def kvconform_tracked_block_ids(self, req_id: str) -> tuple[list[int], ...] | None:
        """The block ids, per KV cache group, the connector tracks for `req_id` (None: not tracked)."""

    def kvconform_object_keys(self, request: Any) -> list[str]:
        """The store keys of every (chunk, group) object of `request`'s full chunks on this rank (keys must
        not depend on the process: the suite compares them across processes)."""

    def kvconform_open_state(self) -> dict[str, int]:
        """Sizes of the connector's per-request maps and pins, by name; all 0 when no request is in flight
        (the suite checks for leaks after requests finish, abort or fail)."""


#: The method names a connector may offer, in the Protocol's order.
BACKDOOR_METHODS: tuple[str, ...] = tuple(name for name in vars(KVConformBackdoors)
                                          if name.startswith(BACKDOOR_PREFIX))
