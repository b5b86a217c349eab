"""A plain-text version of an HTML body, for email that was enqueued with HTML only.

Inbox providers and spam filters expect a text/plain alternative; this one keeps the words, puts
block elements on their own lines and writes each link's address after its text. The standard
library's tokenizer reads the HTML in one pass, whatever it holds.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_BLOCKS = frozenset(
    [
        "p",
        "div",
        "br",
        "tr",
        "li",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "table",
        "ul",
        "ol",
        "hr",
        "blockquote",
    ]
)
_HIDDEN = frozenset({"script", "style", "head", "title"})
_SPACES = re.compile(r"[ \t\r\f\v]+")


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.hidden = 0
        self.links: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN:
            self.hidden += 1
        elif tag in _BLOCKS:
            self.out.append("\n\n" if tag == "p" else "\n")
        elif tag == "a":
            href = dict(attrs).get("href")
            self.links.append(href if href and href.startswith(("http://", "https://")) else None)
        elif tag == "td":
            self.out.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN:
            self.hidden = max(0, self.hidden - 1)
        elif tag in _BLOCKS:
            self.out.append("\n")
        elif tag == "a" and self.links:
            href = self.links.pop()
            if href:
                self.out.append(f" ({href})")

    def handle_data(self, data: str) -> None:
        if not self.hidden:
            self.out.append(_SPACES.sub(" ", data.replace("\n", " ")))


def text_from_html(html: str) -> str:
    """The words of `html` as plain text, paragraphs separated by one blank line."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    lines: list[str] = []
    for line in "".join(parser.out).split("\n"):
        line = line.strip()
        if line or (lines and lines[-1]):  # at most one blank line in a row
            lines.append(line)
    text = "\n".join(lines).strip("\n")
    return text + "\n" if text else ""
