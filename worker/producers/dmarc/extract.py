"""The report's XML out of what arrived (plain XML, gzip (.xml.gz), zip, or an email carrying one), in pieces.

Every step is bounded: the input's size is checked before anything is decompressed; gzip and zip are
inflated a piece at a time, and the reader stops asking for pieces as soon as it has refused the
report (a stranger's report is refused on its header, before its records are even inflated), so a
bomb of a few KiB that would inflate to gibibytes costs at most the cap, and a refused report far
less; a zip may hold a few entries and exactly one file; an archive inside an archive is refused, as
is an email inside a report. The email parser runs under the bounce intake's structural budget.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Iterator
from email import message_from_bytes, policy
from email.message import Message

from worker.producers.bounces.budget import DEFAULT_BUDGET, OverBudget, check_parts, check_structure
from worker.producers.dmarc.limits import DEFAULT_LIMITS, Limits, ReportRefused

ZIP_MAGIC = b"PK\x03\x04"
GZIP_MAGIC = b"\x1f\x8b"
REPORT_TYPES = frozenset(
    {
        "application/zip",
        "application/x-zip-compressed",
        "application/gzip",
        "application/x-gzip",
        "application/xml",
        "text/xml",
        "application/octet-stream",
    }
)
REPORT_SUFFIXES = (".zip", ".gz", ".xml")
PIECE = 64 * 1024  # bytes of XML inflated (or handed on) at a time
PEEK = 1024  # bytes of an archive's content looked at to tell what it holds


def report_pieces(data: bytes, limits: Limits = DEFAULT_LIMITS) -> Iterator[bytes]:
    """The XML of the one report in `data`, piece by piece; `ReportRefused` (when a piece is asked for)
    saying why there is none to read."""
    if len(data) > limits.input_bytes:
        raise ReportRefused(f"input of {len(data)} bytes is over the {limits.input_bytes}-byte cap")
    kind = _kind(data)
    if kind == "email":
        data, kind = _from_email(data, limits)
    yield from _unpack(data, kind, limits)


def report_xml(data: bytes, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The whole XML of the one report in `data` (what `report_pieces` yields, joined)."""
    return b"".join(report_pieces(data, limits))


def _kind(data: bytes) -> str:
    if data.startswith(ZIP_MAGIC):
        return "zip"
    if data.startswith(GZIP_MAGIC):
        return "gzip"
    if data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<") or data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "xml"  # UTF-16 (by its byte order mark) too, to be refused as not UTF-8 by name
    return "email"


def _unpack(data: bytes, kind: str, limits: Limits) -> Iterator[bytes]:
    """XML as it is, or the XML inside one level of gzip or zip, piece by piece."""
    if kind == "xml":
        if len(data) > limits.xml_bytes:
            raise ReportRefused(f"XML of {len(data)} bytes is over the {limits.xml_bytes}-byte cap")
        for at in range(0, len(data), PIECE):
            yield data[at : at + PIECE]
        return
    pieces = _gunzip(data, limits) if kind == "gzip" else _unzip(data, limits)
    head = b""
    for piece in pieces:
        head += piece
        if len(head) >= PEEK:
            break
    inner = _kind(head)
    if inner in ("zip", "gzip"):
        raise ReportRefused(f"an archive inside the {kind} archive is refused (nested archives)")
    if inner != "xml":
        raise ReportRefused(f"the {kind} archive holds no XML")
    yield head
    yield from pieces


def _gunzip(data: bytes, limits: Limits) -> Iterator[bytes]:
    """Inflate one gzip member a piece at a time, refusing past the cap; trailing data is refused."""
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
    inflated = 0
    pending = data
    try:
        while True:
            piece = inflater.decompress(pending, PIECE)  # never more than PIECE bytes out at once
            inflated += len(piece)
            if inflated > limits.xml_bytes:
                raise ReportRefused(f"gzip inflates past the {limits.xml_bytes}-byte cap (a gzip bomb?)")
            if piece:
                yield piece
            pending = inflater.unconsumed_tail
            if inflater.eof or not (pending or piece):
                break
    except zlib.error as exc:
        raise ReportRefused(f"corrupt gzip data: {exc}") from None
    if not inflater.eof:
        raise ReportRefused("truncated gzip data")
    if inflater.unused_data.strip(b"\x00"):
        raise ReportRefused("data after the end of the gzip stream (a second member is refused)")


def _unzip(data: bytes, limits: Limits) -> Iterator[bytes]:
    """The one file of a zip, inflated a piece at a time up to the cap; several files, encryption or a
    nested archive are refused."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entry = _the_entry(archive, limits)
            inflated = 0
            with archive.open(entry) as member:
                while piece := member.read(PIECE):
                    inflated += len(piece)
                    if inflated > limits.xml_bytes:
                        raise ReportRefused(
                            f"zip entry inflates past the {limits.xml_bytes}-byte cap (a zip bomb?)"
                        )
                    yield piece
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, zlib.error) as exc:
        raise ReportRefused(f"corrupt zip data: {exc}") from None
    except RuntimeError as exc:  # zipfile: a password is needed, or similar
        raise ReportRefused(f"unreadable zip entry: {exc}") from None


def _the_entry(archive: zipfile.ZipFile, limits: Limits) -> zipfile.ZipInfo:
    """The zip's one file, if it is one a report may be: few entries, not encrypted, deflate, under the cap."""
    entries = archive.infolist()
    if len(entries) > limits.zip_members:
        raise ReportRefused(f"zip of {len(entries)} entries (at most {limits.zip_members})")
    files = [e for e in entries if not e.is_dir()]
    if len(files) != 1:
        raise ReportRefused(f"zip holds {len(files)} files; a report zip holds one")
    entry = files[0]
    if entry.flag_bits & 0x1:
        raise ReportRefused("encrypted zip entries are refused")
    if entry.filename.lower().endswith((".zip", ".gz", ".tgz", ".7z", ".rar", ".bz2", ".xz")):
        raise ReportRefused(f"an archive inside the zip archive is refused: {entry.filename!r}")
    # Only deflate stops inflating at the cap: zipfile reads a bzip2 or LZMA entry whole and
    # inflates all of it first (185 bytes of bzip2 became 8 MiB). Reporters use deflate.
    if entry.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ReportRefused(
            f"zip compression method {entry.compress_type} is refused (stored or deflate only)"
        )
    if entry.file_size > limits.xml_bytes:
        raise ReportRefused(
            f"zip entry says it holds {entry.file_size} bytes, past the {limits.xml_bytes}-byte cap"
        )
    return entry


def _from_email(data: bytes, limits: Limits) -> tuple[bytes, str]:
    """The one report attachment of an email (zip, gzip or XML; a multipart or a single-part message), and its kind."""
    try:
        check_structure(data, DEFAULT_BUDGET)
        msg = message_from_bytes(data, policy=policy.compat32)
        check_parts(msg, DEFAULT_BUDGET)
    except OverBudget as exc:
        raise ReportRefused(f"email over budget: {exc}") from None
    if not msg.keys():
        raise ReportRefused("neither XML, gzip, zip nor an email")
    found: list[tuple[bytes, str]] = []
    for part in msg.walk():
        if part.is_multipart():
            continue
        payload = _attachment(part)
        if payload is None:
            continue
        kind = _kind(payload)
        if kind == "email":
            continue  # a text part (the provider's note) or something else: not the report
        found.append((payload, kind))
        if len(found) > limits.attachments:
            break
    if not found:
        raise ReportRefused("the email carries no report attachment (zip, gzip or XML)")
    if len(found) > 1:
        raise ReportRefused(f"the email carries {len(found)} report attachments; one report per email")
    return found[0]


def _attachment(part: Message) -> bytes | None:
    """A part's decoded bytes when it may be a report: of a report's type or named like one."""
    content_type = part.get_content_type().lower()
    name = (part.get_filename() or "").lower()
    if content_type not in REPORT_TYPES and not name.endswith(REPORT_SUFFIXES):
        return None
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) and payload else None
