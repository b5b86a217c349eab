"""The suppression list as CSV: export it, and import one (from another provider, say) whole or not at all.

Export writes `address,kind,reason,since`. Addresses and reasons are outsiders' text (a reason
quotes whatever a relay or a DSN said), so no spreadsheet may run any of it as a formula, however it
splits the file: a spreadsheet set to another separator (`;` in much of Europe, tab, `|`) starts
cells in the middle of a field. So wherever a cell could start — the field's start, or just after
a `,` `;` `|` tab or line break inside it, spaces and double quotes after either skipped — an
apostrophe goes before a character that would begin a formula (= + - @, a tab or a carriage
return) or before an apostrophe already there (`safe_cell`). Import takes exactly those apostrophes
off and gets the text back (`unescape_cell`).

Import reads a header line, then one address a line. It finds the address column by name (address,
email, email address, recipient), takes kind and reason when present (other columns are ignored, as
providers' exports have many), checks every line first and writes nothing when any line is bad,
naming each by its line number. Importing the same file again changes nothing.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC
from typing import IO, Any

import psycopg
from psycopg.rows import tuple_row

from worker.core.masking import mask_addresses_in
from worker.core.validation import ValidationError
from worker.ops import audit
from worker.ops.suppressions import MAX_REASON, check_reason, normalise, note

EXPORT_COLUMNS = ("address", "kind", "reason", "since")
# Cells a spreadsheet treats as a formula (OWASP, CSV injection), and the escape itself.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")
# Where a spreadsheet may start a cell: at the field's start, or after a character some spreadsheet
# splits on; spaces (an import that trims them) and double quotes (a quoted cell) are skipped.
# `_ESCAPE` finds such a place before a risky character; `_ESCAPED` one with our apostrophe after it.
_CELL_START = r'(?:\A|[,;|\t\r\n])[ "]*'
_RISKY = "[" + re.escape("".join(FORMULA_STARTS)) + "]"
_ESCAPE = re.compile(f"{_CELL_START}(?={_RISKY})")
_ESCAPED = re.compile(f"({_CELL_START})'(?={_RISKY})")
# The longest cell taken: a line is one address and a short reason. Longer cells up to the reader's
# limit are bad lines like any other; past it (or past MAX_LINE bytes) the file is not read further.
MAX_CELL = 4096
READER_LIMIT = 64 * 1024
MAX_LINE = 1024 * 1024
MAX_ERRORS_SHOWN = 20

ADDRESS_COLUMNS = ("address", "email", "email address", "email_address", "recipient", "e-mail")
KIND_COLUMNS = ("kind", "type", "reason type", "suppression type")
REASON_COLUMNS = ("reason", "description", "details", "comment")
# Other providers' words for the kinds; a soft bounce is a hold, not a suppression: never imported.
KIND_WORDS = {
    "": "manual",
    "manual": "manual",
    "manually added": "manual",
    "hard": "hard",
    "bounce": "hard",
    "bounces": "hard",
    "hard bounce": "hard",
    "hard_bounce": "hard",
    "hardbounce": "hard",
    "invalid": "hard",
    "complaint": "complaint",
    "spam": "complaint",
    "spam report": "complaint",
    "spam_report": "complaint",
    "spamreport": "complaint",
    "spam complaint": "complaint",
    "unsubscribe": "unsubscribe",
    "unsubscribed": "unsubscribe",
    "global_unsubscribe": "unsubscribe",
    "global unsubscribe": "unsubscribe",
}

EXPORT = """
SELECT address, kind, reason, since FROM mailroom.suppressions
WHERE %(kind)s::text IS NULL OR kind = %(kind)s
ORDER BY address, kind
"""

STAGE = (
    "CREATE TEMPORARY TABLE mailroom_suppression_import (line integer, address text, kind text, reason text)"
)
STAGE_COPY = "COPY mailroom_suppression_import (line, address, kind, reason) FROM STDIN"
# The first line of an address wins; a listing already there (other than a soft hold) is left alone.
IMPORT_BOUNCES = """
INSERT INTO mailroom.bounce_list (email, bounce_type, reason)
SELECT DISTINCT ON (address) address, kind, reason FROM mailroom_suppression_import
WHERE kind <> 'unsubscribe' ORDER BY address, line
ON CONFLICT (email) DO UPDATE
SET bounce_type = EXCLUDED.bounce_type, reason = EXCLUDED.reason, last_bounced_at = now()
WHERE mailroom.bounce_list.bounce_type = 'soft'
"""
IMPORT_UNSUBSCRIBES = """
INSERT INTO mailroom.unsubscribe_list (email, reason, source)
SELECT DISTINCT ON (address) address, reason, 'import' FROM mailroom_suppression_import
WHERE kind = 'unsubscribe' ORDER BY address, line
ON CONFLICT (email) DO NOTHING
"""
DROP_STAGE = "DROP TABLE mailroom_suppression_import"


@dataclass
class ImportResult:
    """What an import did, or why it did nothing (`errors`: line number and message)."""

    lines: int = 0
    added: int = 0
    errors: list[tuple[int, str]] = field(default_factory=list)
    error_count: int = 0

    @property
    def unchanged(self) -> int:
        """Lines whose address was already suppressed (or repeated in the file)."""
        return self.lines - self.added


def safe_cell(text: str | None) -> str:
    """A field no spreadsheet runs as a formula, however it splits it into cells: wherever a cell
    could start (see the module's docstring), a risky character gets an apostrophe before it."""
    if not text:
        return ""
    return _ESCAPE.sub(lambda found: found.group() + "'", text)


def unescape_cell(text: str) -> str:
    """What `safe_cell` was given: each apostrophe it put before a risky character taken off."""
    return _ESCAPED.sub(r"\1", text)


def export_csv(conn: psycopg.Connection[Any], out: IO[str], kind: str | None = None) -> int:
    """Write the list (or one kind) as CSV to `out`; the number of addresses written."""
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(EXPORT_COLUMNS)
    count = 0
    # server-side: any size, little memory
    with conn.cursor(name="mailroom_suppression_export", row_factory=tuple_row) as cur:
        cur.execute(EXPORT, {"kind": kind})
        for address, row_kind, reason, since in cur:
            since_text = since.astimezone(UTC).isoformat(timespec="seconds") if since else ""
            writer.writerow((safe_cell(address), row_kind, safe_cell(reason), since_text))
            count += 1
    return count


def _column(header: list[str], names: tuple[str, ...]) -> int | None:
    wanted = [h.strip().lower() for h in header]
    for name in names:
        if name in wanted:
            return wanted.index(name)
    return None


def _rows(handle: Iterable[str], result: ImportResult) -> Iterator[tuple[int, str, str, str | None]]:
    """Each data line as (line number, address, kind, reason), checked; errors go to `result`."""
    reader = csv.reader(handle, strict=True)
    try:
        header = next(reader, None)
    except (csv.Error, UnicodeDecodeError) as exc:
        _fail(result, 1, _why(exc))
        return
    if not header:
        _fail(result, 1, "the file is empty: a header line (address,kind,reason) is expected")
        return
    address_at = _column(header, ADDRESS_COLUMNS)
    if address_at is None:
        _fail(result, 1, "no address column: name one address or email in the header line")
        return
    kind_at, reason_at = _column(header, KIND_COLUMNS), _column(header, REASON_COLUMNS)
    while True:
        line = reader.line_num + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            _fail(result, line, _why(exc))
            return  # the reader cannot go on past a broken quote or undecodable bytes
        line = reader.line_num
        if not any(c.strip() for c in cells):
            continue  # a blank line
        result.lines += 1
        checked = _check(cells, address_at, kind_at, reason_at)
        if isinstance(checked, str):
            _fail(result, line, checked)
        else:
            yield (line, *checked)


def _check(
    cells: list[str], address_at: int, kind_at: int | None, reason_at: int | None
) -> tuple[str, str, str | None] | str:
    """(address, kind, reason) of one line, or what is wrong with it."""
    if any(len(c) > MAX_CELL for c in cells):
        return f"a cell longer than {MAX_CELL} characters"
    if address_at >= len(cells):
        return "no address on this line"
    try:
        address = normalise(unescape_cell(cells[address_at]))
    except ValidationError as exc:
        return exc.message if exc.field == "address" else str(exc)
    word = cells[kind_at].strip().lower() if kind_at is not None and kind_at < len(cells) else ""
    kind = KIND_WORDS.get(unescape_cell(word))
    if kind is None:
        return f"unknown kind {word[:40]!r}: hard, complaint, unsubscribe or manual (a soft bounce is not imported)"
    reason = unescape_cell(cells[reason_at]) if reason_at is not None and reason_at < len(cells) else ""
    reason = " ".join(reason.split())  # a provider's multi-line note becomes one line
    if reason:
        try:
            reason = check_reason(reason[:MAX_REASON])
        except ValidationError as exc:
            return f"reason: {exc.message}"
    return address, kind, reason or None


def _why(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text (save the file as UTF-8 CSV)"
    return f"not readable as CSV: {exc}"


def _fail(result: ImportResult, line: int, message: str) -> None:
    result.error_count += 1
    if len(result.errors) < MAX_ERRORS_SHOWN:
        result.errors.append((line, message))


def import_csv(
    conn: psycopg.Connection[Any],
    handle: Iterable[str],
    actor: str,
    *,
    source_name: str = "-",
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Check every line of `handle` and, when all are good, suppress each address in `conn`'s transaction.

    Lines are staged as they are read (memory stays small whatever the file's size); any bad line
    means nothing is written (the caller rolls back). One audit row (`suppression.import`) records
    the import. The caller owns the transaction and commits only when `errors` is empty.
    """
    result = ImportResult()
    previous_limit = csv.field_size_limit(READER_LIMIT)
    try:
        conn.execute(STAGE)
        with conn.cursor().copy(STAGE_COPY) as copy:
            for line, address, kind, reason in _rows(handle, result):
                if not result.error_count:
                    copy.write_row((line, address, kind, reason))
                if progress is not None and result.lines % 10_000 == 0:
                    progress(result.lines)
    finally:
        csv.field_size_limit(previous_limit)
    if progress is not None:
        progress(result.lines)
    if result.error_count:
        return result
    note(conn, "import", actor, None)
    with conn.cursor() as cur:
        cur.execute(IMPORT_BOUNCES)
        result.added = max(cur.rowcount, 0)
        cur.execute(IMPORT_UNSUBSCRIBES)
        result.added += max(cur.rowcount, 0)
        cur.execute(DROP_STAGE)
    detail = {"file": mask_addresses_in(source_name)[:200], "lines": result.lines, "added": result.added}
    audit.record(conn, "suppression.import", actor, None, result.added, detail)
    return result


def text_lines(raw: IO[bytes]) -> Iterator[str]:
    """The lines of a byte stream as UTF-8 text (a spreadsheet's byte-order mark dropped), one at a time.

    Decoded line by line, so bytes that are not UTF-8 are reported on their own line; a line longer
    than MAX_LINE bytes stops the reading (csv.Error) instead of filling memory.
    """
    first = True
    while chunk := raw.readline(MAX_LINE + 1):
        if len(chunk) > MAX_LINE:
            raise csv.Error(f"a line longer than {MAX_LINE} bytes")
        if first:
            chunk, first = chunk.removeprefix(b"\xef\xbb\xbf"), False
        yield chunk.decode("utf-8")
