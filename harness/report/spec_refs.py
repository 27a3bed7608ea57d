"""Message ids for vLLM's texts, and links from spec references to `docs/rules.md`.

Every warning and error the report shows is labelled with its id (W-B1, E-F, ...; the ids are declared in
`reference_impl.vocabulary.MESSAGES`) when it is one of the messages `docs/rules.md` describes; the labels and
the section references the oracle cites (§2.2, "connector spec section 4.2") become links to that page. The
patterns below are short distinctive fragments of each text (reviewed against config-rules.md §1.3, §2.4, §3.4
and the errors of §3.3/§10).
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path
from typing import Callable

from reference_impl.vocabulary import MESSAGES

DOCS_PAGE = "../docs/rules.md"  # relative to reports/, where the report files live
_RULES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "rules.md"  # the checkout's page, when there is one

# (id, pattern) in the order they are tried; the first match wins.
_MESSAGE_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple((ident, re.compile(pattern, re.S)) for ident, pattern in (
    ("W-B1", r"because `--kv-transfer-config` is set\..*--no-disable-hybrid-kv-cache-manager to start"),
    ("W-A1", r"because `--kv-transfer-config` is set\."),
    ("W-22", r"because connector \S+ does not subclass `SupportsHMA`"),
    ("W-C1", r"because `--kv-transfer-config` selects a KV connector that does not support it"),
    ("W-C", r"latency regression when using chunked local attention"),
    ("W-U", r"Hybrid KV cache manager is disabled for this hybrid model"),
    ("E-B", r"explicitly enabled but is not supported.*--no-disable-hybrid-kv-cache-manager"),
    ("E-C", r"explicitly enabled but is not supported.*--enable-hybrid-kv-cache-manager"),
    ("E-F", r"does not support HMA but HMA is enabled"),
    ("E-H", r"HiSparse requires the hybrid KV cache manager"),
    ("E-HISPARSE-CUDA", r"HiSparse currently requires NVIDIA CUDA"),
    ("E-HISPARSE-PLATFORM", r"The current platform does not support HiSparse"),
    ("E-HISPARSE-NEEDS-CONNECTOR", r"HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib"),
    ("E-HISPARSE-TWO", r"Only one HiSparseConnector may be configured"),
    ("E-HISPARSE-NO-HOST-POOL", r"HiSparseConnector requires host_pool_gib"),
    ("E-HISPARSE-HOST-POOL-NOT-POSITIVE", r"HiSparseConnector host_pool_gib must be positive"),
    ("E-NIXL-TRANSFER-MODE", r"Invalid NixlConnector transfer_mode: "),
    ("E-UNKNOWN-SPECULATIVE-METHOD", r"Unknown speculative method .*registered custom methods"),
    ("E-MULTI-ASSERT", r"HMA should not be enabled unless all sub-connectors support it"),
    ("E-KV-ROLE", r"Please specify kv_role when kv_connector is set"),
    ("E-KV-DISAGG-ROLE", r"Please specify kv_disagg_role when kv_connector is set"),
    ("E-V1-CONNECTOR-UNDER-V0", r"Attempting to initialize a V1 Connector, but found envs\.VLLM_USE_V1=False"),
    ("E-TWO-ARG", r"uses deprecated 2-argument constructor signature"),
    ("E-HIDDEN-STATES-CHUNKED-PREFILL", r"ExampleHiddenStatesConnector does not support chunked prefill"),
    ("E-OFFLOAD-NO-SIZE", r"You must set kv_offloading_size when kv_offloading_backend is set"),
    ("E-NO-LMCACHE", r"No module named 'lmcache'"),
    ("E-NO-MOONCAKE", r"Please install mooncake"),
    ("E-UNSUPPORTED-CONNECTOR", r"Unsupported connector type: "),
    ("E-CLASS-NOT-FOUND", r"Class \S+ not found in \S+"),
))
EMPTY_ASSERTION_ID = "E-MULTI-NO-CONNECTORS"  # a bare `assert` raises an AssertionError without a message

_REFERENCE = re.compile(
    r"(?P<section>§\d+(?:\.\d+)?)"
    r"|(?P<connector>connector spec section 4\.2)"
    r"|\b(?P<message>(?:[EW]-[A-Z0-9]+(?:-[A-Z0-9]+)*))\b"
)
#: Every id the report labels a text with (each declared in `reference_impl.vocabulary.MESSAGES`).
REPORTED_IDS = frozenset(ident for ident, _ in _MESSAGE_PATTERNS) | {EMPTY_ASSERTION_ID}


def message_id(text: str, error_type: str | None = None) -> str | None:
    """The id of a warning or error text, or None when it is none of the described messages."""
    if not text.strip():
        return EMPTY_ASSERTION_ID if error_type == "AssertionError" else None
    for ident, pattern in _MESSAGE_PATTERNS:
        if pattern.search(text):
            return ident
    return None


def anchor(reference: str) -> str | None:
    """The anchor in docs/rules.md for '§2.2', 'E-F' or the connector checks; None for an unknown id."""
    if reference.startswith("§"):
        chapter, _, part = reference[1:].rstrip(".").partition(".")
        # "§2.2" is a subsection of chapter 2, "§8.3" the 3rd item of chapter 8: each has its own row
        return f"s{chapter}-{part}" if part else f"s{chapter}"
    if reference.startswith("connector spec"):
        return "connector-checks"
    return reference.lower() if reference in MESSAGES else None


def link_references(text: str, link: Callable[[str, str], str], plain: Callable[[str], str]) -> str:
    """`text` with each spec reference passed through `link(label, href)` and the rest through `plain`."""
    out, position = [], 0
    for match in _REFERENCE.finditer(text):
        target = anchor(match.group(0))
        if target is None:
            continue
        out.append(plain(text[position:match.start()]))
        out.append(link(match.group(0), f"{DOCS_PAGE}#{target}"))
        position = match.end()
    out.append(plain(text[position:]))
    return "".join(out)


def relink_docs_page(text: str, output_dir: Path, *, html_text: bool = False) -> str:
    """`text` (a rendered report page) with its links to docs/rules.md made relative to `output_dir`.

    The pages link `DOCS_PAGE`, which is right only for the checkout's own reports/ folder; a report written
    elsewhere (`--output-dir`) would link a page that is not there. When the checkout's docs/rules.md exists,
    the links point at it from `output_dir`; otherwise (kvconform installed without its docs) they are kept."""
    if not _RULES_PAGE.is_file():
        return text
    href = Path(os.path.relpath(_RULES_PAGE, Path(output_dir).resolve())).as_posix()
    if href == DOCS_PAGE:
        return text
    return text.replace(f"{DOCS_PAGE}#", f"{html.escape(href) if html_text else href}#")
