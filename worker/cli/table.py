"""Plain-text tables for list commands: every value printed whole, columns as wide as their widest value.

Cells often hold text from outside (a bounce's diagnostic, an address, a name): each is passed
through `printable`, so no control sequence in it reaches the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

from worker.core.terminal import printable


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], right: frozenset[int] = frozenset()
) -> list[str]:
    """The lines of a table; columns in `right` are right-aligned. Nothing is cut: a long row wraps on the terminal."""
    headers = [printable(h) for h in headers]
    rows = [[printable(cell) for cell in r] for r in rows]
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    last = len(headers) - 1

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else (cell if i == last else cell.ljust(widths[i]))
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers), *(line(r) for r in rows)]
