"""Text from outside made safe to print on a terminal: control characters and bidi overrides escaped.

A bounce's diagnostic, a report's subject or a signer's name is written by whoever sent it. Printed
raw, `ESC ] 0 ; ... BEL` retitles the operator's terminal, `ESC [ 2 J` wipes it, other sequences
move the cursor to forge lines, and U+202E turns the rest of a line around. Each such character
is shown instead as a visible escape (`\\x1b`, `\\u202e`); everything else is left as it was.
"""

from __future__ import annotations

# C0 (tab and line feed too: inside one field they would forge columns or lines), DEL, C1.
_CONTROLS = [*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0)]
# Bidi embeddings and overrides (U+202A-U+202E) and isolates (U+2066-U+2069), LRM, RLM and ALM.
_BIDI = [*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
_ESCAPES = {code: f"\\x{code:02x}" for code in _CONTROLS} | {code: f"\\u{code:04x}" for code in _BIDI}
_ESCAPES_KEEPING_LINES = {code: text for code, text in _ESCAPES.items() if code != 0x0A}


def printable(text: str) -> str:
    """`text` as one line safe for a terminal: every control and bidi character shown as an escape."""
    return text.translate(_ESCAPES)


def printable_lines(text: str) -> str:
    """Like `printable`, but line feeds kept (a message shown whole); a carriage return is escaped."""
    return text.translate(_ESCAPES_KEEPING_LINES)
