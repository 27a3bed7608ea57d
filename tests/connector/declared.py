"""Declarations of connectors under test for tests/connector/test_declaration.py: the template declared with its
backdoors on the declaration (its class offers none), the class bare, and declarations with a bad field."""

from __future__ import annotations

from harness import ConnectorUnderTest
from reference_impl.connector.template import TemplateConnector


class WithoutBackdoors(TemplateConnector):
    """The template with its `kvconform_*` backdoors deleted: the product offers none."""

    kvconform_chunk_size = kvconform_evict = kvconform_tracked_block_ids = None
    kvconform_object_keys = kvconform_open_state = None


class TemplateDeclared(ConnectorUnderTest):
    """`WithoutBackdoors` declared as the template's own declaration declares it, with the backdoors implemented on
    the declaration (zarr-style: the test class reaches into the store, the product stays as shipped). Each backdoor
    runs the template's method on the instance, so its answers are the template's, and counts its calls."""

    connector = WithoutBackdoors
    name = "TemplateDeclared"
    store_scope = "process"
    async_load_config = {"load_async": True}
    block_size_option = "chunk_size"

    def kvconform_chunk_size(self, connector) -> int:
        return TemplateConnector.kvconform_chunk_size(connector)

    def kvconform_evict(self, connector, request, group_id: int, chunk_index: int) -> None:
        print(f"kvconform_evict on the declaration: group {group_id} chunk {chunk_index}")
        TemplateConnector.kvconform_evict(connector, request, group_id, chunk_index)

    def kvconform_tracked_block_ids(self, connector, req_id: str):
        return TemplateConnector.kvconform_tracked_block_ids(connector, req_id)

    def kvconform_object_keys(self, connector, request) -> list[str]:
        return TemplateConnector.kvconform_object_keys(connector, request)

    def kvconform_open_state(self, connector) -> dict[str, int]:
        return TemplateConnector.kvconform_open_state(connector)


class BadKind(ConnectorUnderTest):
    """A kind that is none of the accepted ones."""

    connector = TemplateConnector
    kind = "cache"


class TypoField(ConnectorUnderTest):
    """A misspelt field: it would otherwise be ignored silently."""

    connector = TemplateConnector
    store_scop = "process"


class NoConnector(ConnectorUnderTest):
    """A declaration that names no connector class."""

    connector = "reference_impl.connector.template:TemplateConnector"
