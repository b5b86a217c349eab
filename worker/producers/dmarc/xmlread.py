"""The report's XML read in one streaming expat pass: refused at the first thing wrong, its fields handed on as text.

The text must be UTF-8 and carry no declaration (`<!DOCTYPE`, `<!ENTITY`, `<!ELEMENT`, `<!ATTLIST`...,
whatever its case): expat runs with no DTD and no external entities, so nothing is expanded or
fetched. Its root must be `feedback`; records, elements and depth are counted against the `Limits`
as they start. Only the fields a stored report needs are kept, each cut at `FIELD_CHARS`: the
header's (`report_metadata`, the first `policy_published`), handed to `header` when the policy ends,
and each record's, handed to `record` when the record ends. Nothing else is built (no tree, no
dictionary of the document), so a report costs time in proportion to its bytes and memory in
proportion to one record; and since the policy comes before the records, a report the callers
refuse on its header costs the header alone.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from xml.parsers import expat

from worker.producers.dmarc.limits import Limits, ReportRefused

# `<!` then a letter: a markup declaration. Comments (`<!--`) and CDATA (`<![CDATA[`) pass.
DECLARATION = re.compile(r"<!\s*[A-Za-z]")
OVERLAP = 64  # characters of one piece looked at again with the next (a declaration cut in two)
FIELD_CHARS = 1024  # characters kept of one field: more than any field may hold, so a longer one is refused

HEADER, RECORD, RESULT = 0, 1, 2  # where a field's text goes: the header, the record, its DKIM or SPF result


class Node:
    """An element the reader knows, by its path: its children, and what it is (a field to keep, a record, ...)."""

    __slots__ = ("children", "field", "kind", "where")

    def __init__(
        self, children: dict[str, Node] | None = None, field: str = "", where: int = HEADER, kind: str = ""
    ) -> None:
        self.children = children or {}
        self.field, self.where, self.kind = field, where, kind


def _fields(where: int, *names: str, **renamed: str) -> dict[str, Node]:
    return {name: Node(field=renamed.get(name, name), where=where) for name in (*names, *renamed)}


IGNORED = Node()  # an element the reader does not know, and everything in it
_RESULT = _fields(RESULT, "domain", "result", "selector", "scope")
_IDENTIFIERS = _fields(RECORD, "header_from", "envelope_from")
DOCUMENT = Node(
    {
        "feedback": Node(
            {
                "report_metadata": Node(
                    {
                        **_fields(HEADER, "org_name", "email", "report_id"),
                        "date_range": Node(_fields(HEADER, "begin", "end")),
                    }
                ),
                "policy_published": Node(
                    _fields(HEADER, "domain", "p", "sp", "pct", "adkim", "aspf"), kind="policy"
                ),
                "record": Node(
                    {
                        "row": Node(
                            {
                                **_fields(RECORD, "source_ip", "count"),
                                "policy_evaluated": Node(_fields(RECORD, "disposition", "dkim", "spf")),
                            }
                        ),
                        "identifiers": Node(_IDENTIFIERS),
                        "identities": Node(_IDENTIFIERS),  # an older spelling some reporters still send
                        "auth_results": Node(
                            {"dkim": Node(_RESULT, kind="dkim"), "spf": Node(_RESULT, kind="spf")}
                        ),
                    },
                    kind="record",
                ),
            }
        )
    }
)


@dataclass
class RawRecord:
    """One record's fields as text, and its DKIM and SPF results (at most `Limits.auth_results` of each)."""

    fields: dict[str, str] = field(default_factory=dict)
    auth: dict[str, list[dict[str, str]]] = field(default_factory=lambda: {"dkim": [], "spf": []})


Header = Callable[[dict[str, str]], None]
Record = Callable[[RawRecord], None]


class _Reader:
    """expat handlers: the limits counted, the known fields kept; a refusal is raised from inside the parse."""

    def __init__(self, limits: Limits, header: Header, record: Record) -> None:
        self.limits = limits
        self.max_elements, self.max_depth = limits.elements, limits.depth + 1  # the document level counts one
        self.on_header, self.on_record = header, record
        self.parser: Any = None
        self.stack: list[Node] = [DOCUMENT]  # the open elements, as the reader knows them
        self.elements = self.records = 0
        self.header: dict[str, str] = {}
        self.header_done = False
        self.current = RawRecord()  # the record being read
        self.result: dict[str, str] | None = None  # its DKIM or SPF result being read (None: past the cap)
        self.capture: Node | None = None  # the field whose text is being kept
        self.target: dict[str, str] | None = None  # where it goes (None: a result past the cap)
        self.text = ""

    def start(self, name: str, _attributes: Any) -> None:
        self.elements += 1
        if self.elements > self.max_elements:
            raise ReportRefused(f"more than {self.limits.elements} XML elements")
        stack = self.stack
        node = stack[-1].children.get(name, IGNORED)
        if node is IGNORED and len(stack) == 1:
            raise ReportRefused(
                f"not a DMARC aggregate report: the root element is <{name[:40]}>, not <feedback>"
            )
        stack.append(node)
        if len(stack) > self.max_depth:
            raise ReportRefused(f"XML nested more than {self.limits.depth} deep")
        if node.field:
            where = node.where
            self.target = (
                self.current.fields if where == RECORD else self.result if where == RESULT else self.header
            )
            self.capture, self.text = node, ""
            self.parser.CharacterDataHandler = self.characters
        elif node.kind:
            self._begin(node.kind)

    def _begin(self, kind: str) -> None:
        if kind == "record":
            if not self.header_done:
                raise ReportRefused("the report's <policy_published> does not come before its records")
            self.records += 1
            if self.records > self.limits.records:
                raise ReportRefused(f"more than {self.limits.records} records")
            self.current = RawRecord()
        elif kind in ("dkim", "spf"):
            results = self.current.auth[kind]
            self.result = {} if len(results) < self.limits.auth_results else None  # past the cap: not kept
            if self.result is not None:
                results.append(self.result)

    def end(self, _name: str) -> None:
        node = self.stack.pop()
        if node is self.capture:
            self.capture = self.parser.CharacterDataHandler = None
            if self.target is not None:
                self.target.setdefault(node.field, self.text[: FIELD_CHARS + 1])
        elif node.kind == "record":
            self.on_record(self.current)
        elif node.kind == "policy" and not self.header_done:
            self.header_done = True
            self.on_header(self.header)

    def characters(self, data: str) -> None:
        if len(self.text) <= FIELD_CHARS:  # past it the field is refused as too long: no need to keep more
            self.text += data


def _refuse_declaration(*_args: Any) -> Any:
    raise ReportRefused("a DOCTYPE or ENTITY declaration is refused (entities could expand or fetch)")


def _parser(reader: _Reader) -> Any:
    # The encoding is fixed to UTF-8 whatever the XML declaration says: the bytes are checked as such.
    parser = expat.ParserCreate(encoding="utf-8")
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.StartDoctypeDeclHandler = _refuse_declaration
    parser.EntityDeclHandler = _refuse_declaration
    parser.ExternalEntityRefHandler = _refuse_declaration
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.buffer_text = True  # the text of a field in one call; none is asked for outside a kept field
    reader.parser = parser
    return parser


def read_xml(pieces: Iterable[bytes], limits: Limits, header: Header, record: Record) -> int:
    """Read the report's XML, calling `header` once and `record` for each record; the number of records.

    Any refusal (`ReportRefused`, from here or from a callback) stops the reading: no further piece is
    asked for."""
    reader = _Reader(limits, header, record)
    parser = _parser(reader)
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    tail = ""
    read = 0
    try:
        for piece in pieces:
            try:
                text = decoder.decode(piece)
            except UnicodeDecodeError as exc:
                raise ReportRefused(f"the XML is not UTF-8 (byte {read + exc.start})") from None
            read += len(piece)
            seen = tail + text
            if DECLARATION.search(seen):
                _refuse_declaration()
            tail = seen[-OVERLAP:]
            parser.Parse(piece, False)
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            raise ReportRefused(f"the XML is not UTF-8 (it ends inside a character, byte {read})") from None
        parser.Parse(b"", True)
    except expat.ExpatError as exc:
        reason = expat.ErrorString(exc.code) if exc.code else str(exc)
        raise ReportRefused(f"malformed XML at line {exc.lineno}, column {exc.offset}: {reason}") from None
    if not reader.header_done:
        raise ReportRefused("the report has no <policy_published>")
    if reader.records == 0:
        raise ReportRefused("the report has no <record>")
    return reader.records
