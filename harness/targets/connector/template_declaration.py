"""The template connector under test, declared (docs/vendor.md, "Your first hour"): copy this file beside your
copy of the template, rename, and run the suite on `--kv-connector mypkg.declare:MyConnectorUnderTest`.

The declaration says what the suite cannot see from the class: how the template's store lives (a dict in its
process: no other process reads it), how it loads asynchronously, and which extra-config key sets the size of the
blocks it stores. Its backdoors stay on the template class (`kvconform_*` methods, the older channel); a
declaration may implement them here instead, taking the connector first (`harness.ConnectorUnderTest`).
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
