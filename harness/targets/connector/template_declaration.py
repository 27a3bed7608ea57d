"""The template connector under test, declared (docs/vendor.md, "Your first hour"): copy this file beside your
copy of the template, rename, and run the suite on `--kv-connector mypkg.declare:MyConnectorUnderTest`.

The declaration says what the suite cannot see from the class: how the template's store lives (a dict in its
process: no other process reads it), how it loads asynchronously, and which extra-config key sets the size of the
blocks it stores. It also implements the template's optional backdoors (zarr's `StoreTests` style: the test side
reaches into the store, the product stays as shipped): each takes the connector instance (scheduler role) after
`self` and reads that instance's state, so a copy of the template with a bug in it (`kvconform mutate`, the
connectors of tests/connector/livelock.py) answers through the same backdoors from its own state.
"""

from __future__ import annotations

from harness import ConnectorUnderTest
from reference_impl.connector.template import TemplateConnector


class TemplateConnectorUnderTest(ConnectorUnderTest):
    """The template as the connector suite checks it (tests/connector/test_template_connector.py, `kvconform
    mutate`)."""

    connector = TemplateConnector
    # Its store is a dict in its process, so C36 (keys across processes) is "N/A" by the profile black-box.
    store_scope = "process"
    # With `load_async` it reports loads finished a step later: the checks of asynchronous loads use it.
    async_load_config = {"load_async": True}
    # The size of the blocks it stores (C40 runs it with a stored block 4x and 16x the GPU block).
    block_size_option = "chunk_size"

    # ---- optional: kvconform's backdoors (reference_impl/connector/backdoors.py) ------------------------------------
    # The suite decides every MUST check without them; they let it look inside for sharper evidence (C04, C07, C10,
    # C11, C31, C36) and are what C08 (a SHOULD) needs. Delete them if your connector cannot offer them.
    def kvconform_chunk_size(self, connector: TemplateConnector) -> int:
        """Tokens per stored object."""
        return connector.chunk_size

    def kvconform_evict(self, connector: TemplateConnector, request, group_id: int, chunk_index: int) -> None:
        """Remove one (chunk, group) object on every rank, as an eviction would (a group never stored: nothing)."""
        if group_id not in connector.groups:
            return
        chunk_hash = connector._hashes(request, (chunk_index + 1) * connector.chunk_size)[chunk_index]
        for rank in range(connector.world_size):
            connector.store.pop(connector._key(group_id, chunk_hash, rank), None)

    def kvconform_tracked_block_ids(self, connector: TemplateConnector, req_id: str) -> tuple[list[int], ...] | None:
        """The block tables tracked for `req_id`, per group."""
        state = connector._requests.get(req_id)
        return tuple(list(t) for t in state.tables) if state is not None and state.tables else None

    def kvconform_object_keys(self, connector: TemplateConnector, request) -> list[str]:
        """This rank's store keys of every full chunk of `request`, every group."""
        hashes = connector._hashes(request, len(request.all_token_ids))
        return [connector._key(gid, h) for h in hashes for gid in connector.groups]

    def kvconform_open_state(self, connector: TemplateConnector) -> dict[str, int]:
        """Per-request state: all 0 when no request is in flight."""
        return {"lookups": len(connector._lookups), "requests": len(connector._requests),
                "failed": len(connector._failed), "loads_to_report": len(connector._finished_loads)}
