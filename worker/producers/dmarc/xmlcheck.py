"""The report's XML checked before parsedmarc reads it: UTF-8, no DTD or entity, a `<feedback>` of bounded shape.

parsedmarc reads the XML with xmltodict over expat (entities off, any DOCTYPE aborts the parse) but
falls back to lxml's recovering parser on malformed XML, which would store half a report. So the
text is refused here first: any declaration (`<!DOCTYPE`, `<!ENTITY`, `<!ELEMENT`, `<!ATTLIST`...),
whatever its case or encoding, since the text must be UTF-8; then one expat pass (no DTD, no
external entities: nothing is fetched) checks it is well formed, its root is `feedback`, and counts
its records, elements and depth against the `Limits`. The pass also reads the report's period, whose
span is checked before parsedmarc could cut a long period into one bucket per day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from xml.parsers import expat

from worker.producers.dmarc.limits import DEFAULT_LIMITS, Limits, ReportRefused

# `<!` then a letter: a markup declaration. Comments (`<!--`) and CDATA (`<![CDATA[`) pass.
DECLARATION = re.compile(r"<!\s*[A-Za-z]")
BOM = "\ufeff"


@dataclass(frozen=True)
class Shape:
    """What the check learnt: the decoded text, how many records, and the period's bounds as given."""

    text: str
    records: int
    begin: str | None
    end: str | None


class _Walk:
    """expat handlers counting what the limits bound; a refusal is raised from inside the parse."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.path: list[str] = []
        self.elements = 0
        self.records = 0
        self.texts: dict[str, list[str]] = {"begin": [], "end": []}

    def start(self, name: str, _attributes: Any) -> None:
        if not self.path and name != "feedback":
            raise ReportRefused(
                f"not a DMARC aggregate report: the root element is <{name[:40]}>, not <feedback>"
            )
        self.path.append(name)
        self.elements += 1
        if len(self.path) > self.limits.depth:
            raise ReportRefused(f"XML nested more than {self.limits.depth} deep")
        if self.elements > self.limits.elements:
            raise ReportRefused(f"more than {self.limits.elements} XML elements")
        if len(self.path) == 2 and name == "record":
            self.records += 1
            if self.records > self.limits.records:
                raise ReportRefused(f"more than {self.limits.records} records")

    def end(self, _name: str) -> None:
        self.path.pop()

    def text(self, data: str) -> None:
        if self.path[-3:-1] == ["report_metadata", "date_range"] and self.path[-1] in self.texts:
            parts = self.texts[self.path[-1]]
            if sum(map(len, parts)) < 64:
                parts.append(data)


def _refuse_declaration(*_args: Any) -> Any:
    raise ReportRefused("a DOCTYPE or ENTITY declaration is refused (entities could expand or fetch)")


def check_xml(xml: bytes, limits: Limits = DEFAULT_LIMITS) -> Shape:
    """Refuse what parsedmarc should never see; the decoded text and the report's shape otherwise."""
    try:
        text = xml.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportRefused(f"the XML is not UTF-8 (byte {exc.start})") from None
    text = text.removeprefix(BOM)
    if DECLARATION.search(text):
        _refuse_declaration()
    walk = _Walk(limits)
    # The encoding is fixed to UTF-8 whatever the XML declaration says: the text was decoded as such.
    parser = expat.ParserCreate(encoding="utf-8")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse_declaration
    parser.EntityDeclHandler = _refuse_declaration
    parser.ExternalEntityRefHandler = _refuse_declaration
    parser.StartElementHandler = walk.start
    parser.EndElementHandler = walk.end
    parser.CharacterDataHandler = walk.text
    try:
        parser.Parse(text.encode("utf-8"), True)
    except expat.ExpatError as exc:
        reason = expat.ErrorString(exc.code) if exc.code else str(exc)
        raise ReportRefused(f"malformed XML at line {exc.lineno}, column {exc.offset}: {reason}") from None
    if walk.records == 0:
        raise ReportRefused("the report has no <record>")
    begin, end = ("".join(walk.texts[k]).strip() or None for k in ("begin", "end"))
    return Shape(text, walk.records, begin, end)
