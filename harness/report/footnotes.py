"""Auto-numbered, de-duplicated notes shared by the Markdown and HTML renderers (one numbering per section)."""

from __future__ import annotations


class Footnotes:
    """Numbers each distinct note text once, in order of first reference."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}
        self._pending: list[tuple[int, str]] = []

    def number(self, text: str) -> int:
        """The note's number, assigning the next one on first use."""
        number = self._numbers.get(text)
        if number is None:
            number = self._numbers[text] = len(self._numbers) + 1
            self._pending.append((number, text))
        return number

    def take_new(self) -> list[tuple[int, str]]:
        """The notes numbered since the last call (their definitions go after the current section)."""
        pending, self._pending = self._pending, []
        return pending
