"""Message ids and spec references: texts get the id docs/rules.md describes, and every link resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.report.spec_refs import anchor, link_references, message_id
from reference_impl.vocabulary import MESSAGES

REPO = Path(__file__).resolve().parents[2]
DOCS = (REPO / "docs" / "rules.md").read_text(encoding="utf-8")
ANCHORS = set(re.findall(r'<a id="([^"]+)"></a>', DOCS))


# Texts copied from config-rules.md §1.3, §2.4, §3.4 and the errors of suites/config/tables/messages.toml.
@pytest.mark.parametrize(("text", "error_type", "ident"), [
    ("Turning off hybrid kv cache manager because `--kv-transfer-config` is set. This will reduce the performance "
     "of vLLM ... defined in kv_connector/v1/base.py.", None, "W-A1"),
    ("Turning off hybrid kv cache manager because `--kv-transfer-config` is set. ... defined in "
     "kv_connector/v1/base.py and use --no-disable-hybrid-kv-cache-manager to start vLLM.", None, "W-B1"),
    ("Turning off hybrid kv cache manager because connector NixlConnector does not subclass `SupportsHMA`.", None,
     "W-22"),
    ("Turning off hybrid kv cache manager because `--kv-transfer-config` selects a KV connector that does not "
     "support it.", None, "W-C1"),
    ("There is a latency regression when using chunked local attention with the hybrid KV cache manager.", None, "W-C"),
    ("Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. Consider omitting "
     "the --no-disable-hybrid-kv-cache-manager flag to let vLLM decide automatically.", "ValueError", "E-B"),
    ("Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. Consider omitting "
     "the --enable-hybrid-kv-cache-manager flag to let vLLM decide automatically.", "ValueError", "E-C"),
    ("Connector ExampleConnector does not support HMA but HMA is enabled. Please set "
     "`--disable-hybrid-kv-cache-manager`.", "ValueError", "E-F"),
    ("HiSparse requires the hybrid KV cache manager; remove --disable-hybrid-kv-cache-manager ...", "ValueError", "E-H"),
    ("", "AssertionError", "E-MULTI-NO-CONNECTORS"),
    ("Class OffloadingConnector not found in suites.config.external_connectors", "AttributeError", "E-CLASS-NOT-FOUND"),
    ("No module named 'lmcache'", "ModuleNotFoundError", "E-NO-LMCACHE"),
    # vLLM 0.34.0's texts (suites/config/tables/messages.toml)
    ("The current platform does not support HiSparse.", "ValueError", "E-HISPARSE-PLATFORM"),
    ("HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib; to combine it ...", "ValueError",
     "E-HISPARSE-NEEDS-CONNECTOR"),
    ("Only one HiSparseConnector may be configured", "ValueError", "E-HISPARSE-TWO"),
    ("HiSparseConnector requires host_pool_gib", "ValueError", "E-HISPARSE-NO-HOST-POOL"),
    ("HiSparseConnector host_pool_gib must be positive", "ValueError", "E-HISPARSE-HOST-POOL-NOT-POSITIVE"),
    ("Invalid NixlConnector transfer_mode: 'sideways'", "ValueError", "E-NIXL-TRANSFER-MODE"),
    ("Unknown speculative method 'x'. Built-in methods: ['eagle']; registered custom methods: [].", "ValueError",
     "E-UNKNOWN-SPECULATIVE-METHOD"),
    ("Unsupported connector type: FooConnector", "ValueError", "E-UNSUPPORTED-CONNECTOR"),
    ("something else entirely", "ValueError", None),
    ("", "ValueError", None),
])
def test_message_ids(text, error_type, ident):
    assert message_id(text, error_type) == ident


def test_every_reference_the_oracle_cites_has_a_place_in_the_docs():
    cited = set()
    for path in [*(REPO / "suites" / "config" / "tables").glob("*.toml"), *(REPO / "suites" / "config").glob("*.py")]:
        cited |= set(re.findall(r"§\d+(?:\.\d+)?", path.read_text(encoding="utf-8")))
    cited |= {*MESSAGES, "connector spec section 4.2"}
    assert "§2.2" in cited and "§8.3" in cited
    missing = sorted(ref for ref in cited if anchor(ref) not in ANCHORS)
    assert not missing, f"docs/rules.md has no anchor for {missing}"


def test_links_in_markdown_and_unknown_ids_stay_text():
    text = "§2.2: explicit enable raises E-B (see connector spec section 4.2); E-ZZZ is no id"
    linked = link_references(text, lambda label, href: f"[{label}]({href})", lambda plain: plain)
    assert linked == ("[§2.2](../docs/rules.md#s2-2): explicit enable raises [E-B](../docs/rules.md#e-b) (see "
                      "[connector spec section 4.2](../docs/rules.md#connector-checks)); E-ZZZ is no id")
