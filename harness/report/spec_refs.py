"""Links from spec references to `docs/rules.md`: section references and message ids.

The section references the oracle cites (§2.2, "connector spec section 4.2") and the message ids the targets
give their warnings and errors (W-B1, E-F, ...: `reference_impl.config.outcome`; the ids are declared
in `reference_impl.vocabulary.MESSAGES`) become links to that page.
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

_REFERENCE = re.compile(
    r"(?P<section>§\d+(?:\.\d+)?)"
    r"|(?P<connector>connector spec section 4\.2)"
    r"|\b(?P<message>(?:[EW]-[A-Z0-9]+(?:-[A-Z0-9]+)*))\b"
)


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
