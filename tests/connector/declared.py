"""Declarations of connectors under test for tests/connector/test_declaration.py: the template class as shipped
(no backdoor: they live on its declaration), the template with its backdoors on the product class (the older channel,
still accepted), declared and bare, and declarations with a bad field."""

from __future__ import annotations

from harness import ConnectorUnderTest
from harness.targets.connector.template_declaration import TemplateConnectorUnderTest
from reference_impl.connector.template import TemplateConnector

_TEMPLATE_BACKDOORS = TemplateConnectorUnderTest()


class ShippedTemplate(TemplateConnector):
    """The template class as shipped (no backdoor), under a name of its own, so one run can hold it beside the
    template's declaration."""


class ClassBackdoors(TemplateConnector):
    """The template as a vendor wrote it before declarations: the `kvconform_*` backdoors on the connector class
    (self is the connector). Each answers as the template's declaration does, so its verdicts are the template's."""

    def kvconform_chunk_size(self) -> int:
        return _TEMPLATE_BACKDOORS.kvconform_chunk_size(self)

    def kvconform_evict(self, request, group_id: int, chunk_index: int) -> None:
        print(f"kvconform_evict on the connector class: group {group_id} chunk {chunk_index}")
        _TEMPLATE_BACKDOORS.kvconform_evict(self, request, group_id, chunk_index)

    def kvconform_tracked_block_ids(self, req_id: str):
        return _TEMPLATE_BACKDOORS.kvconform_tracked_block_ids(self, req_id)

    def kvconform_object_keys(self, request) -> list[str]:
        return _TEMPLATE_BACKDOORS.kvconform_object_keys(self, request)

    def kvconform_open_state(self) -> dict[str, int]:
        return _TEMPLATE_BACKDOORS.kvconform_open_state(self)


class ClassBackdoorsDeclared(TemplateConnectorUnderTest):
    """`ClassBackdoors` under the template's declaration with the declaration's backdoors taken away: the class's
    are used."""

    connector = ClassBackdoors
    name = "ClassBackdoorsDeclared"
    kvconform_chunk_size = kvconform_evict = kvconform_tracked_block_ids = None
    kvconform_object_keys = kvconform_open_state = None


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
