"""The audit trail's hash chain: its head, the head exported outside the database, and a streaming verify.

Every audit row carries its position (`seq`), the previous row's hash and its own hash over a canonical
encoding of its content, all set by a trigger in the database (migrations/versions/0008/40_audit.sql).
Verifying recomputes each hash here, trusting no function in the database, walks the rows in chain order
through a server-side cursor (memory stays bounded however long the trail is) and names the first row that
was edited, removed or inserted out of chain. A head exported with `mailroom audit head` and kept where the
database's writers cannot reach also catches the newest rows' removal and a chain rewritten from some row on.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import IsolationLevel
from psycopg.rows import dict_row

from worker.core.head_files import load_json_head
from worker.core.validation import ValidationError

EXPORT_FORMAT = "mailroom-audit-head/1"
ENCODING_TAG = "mailroom-audit/1,"
PROGRESS_EVERY = 10_000  # rows between two progress reports
FETCH_ROWS = 2_000  # rows per round trip of the server-side cursor
MAX_PROBLEMS = 20  # a rewritten trail breaks at every row; the first ones say enough

_HASH = re.compile(r"^[0-9a-f]{64}$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

SELECT_HEAD = """
SELECT seq, last_id, last_hash, pruned_seq, pruned_hash, updated_at, clock_timestamp() AS now
FROM mailroom.audit_chain WHERE only_row
"""
# detail as jsonb's own text: the exact text the trigger hashed.
SELECT_ROWS = """
SELECT seq, id, at, db_role, actor, action, target, affected, detail::text AS detail_text, prev_hash, row_hash
FROM mailroom.audit_log ORDER BY seq, id
"""
CALL_PRUNE = "SELECT mailroom.audit_prune(%s, %s, %s) AS removed"
# Applications' rows wait in mailroom.audit_pending (their writer takes no lock) until the next audit
# write or this chains them, under the head's lock, oldest first.
COUNT_PENDING = "SELECT count(*) AS pending FROM mailroom.audit_pending"
LINK_PENDING = "SELECT mailroom.audit_link_pending(%s) AS linked"
LINK_BATCH = 1_000  # waiting rows chained per transaction


@dataclass(frozen=True)
class ChainHead:
    """The newest position of the audit chain, its row and hash; and how far retention pruned it."""

    seq: int
    last_id: int | None
    last_hash: str | None
    pruned_seq: int = 0
    pruned_hash: str | None = None


@dataclass(frozen=True)
class ExportedHead:
    """A head read back from a file written by `mailroom audit head`."""

    exported_at: datetime | None
    head: ChainHead


@dataclass(frozen=True)
class Problem:
    """One break in the chain: where (position, row id when there is one), what kind, and a sentence."""

    seq: int | None
    id: int | None
    kind: str
    text: str


@dataclass
class Report:
    """What `verify_chain` found: rows checked, the positions walked, the database's head and the problems."""

    head: ChainHead | None
    checked: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    last_hash: str | None = None
    problems: list[Problem] = field(default_factory=list)
    more_problems: int = 0
    pending: int = 0  # applications' rows waiting to be chained (not a problem: chained later)

    @property
    def ok(self) -> bool:
        """True when the chain is intact."""
        return not self.problems

    def add(self, seq: int | None, row_id: int | None, kind: str, text: str) -> None:
        """Note one problem (the first MAX_PROBLEMS are kept, the rest counted)."""
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(Problem(seq, row_id, kind, text))
        else:
            self.more_problems += 1


def _field(value: str | None) -> str:
    """One netstring of the canonical encoding: `<UTF-8 byte length>:<text>,`, NULL as `-,`."""
    if value is None:
        return "-,"
    return f"{len(value.encode('utf-8'))}:{value},"


def epoch_microseconds(moment: datetime) -> int:
    """Microseconds since the Unix epoch, exactly (the encoding's form of `at`)."""
    return (moment - _EPOCH) // _MICROSECOND


def canonical_text(row: dict[str, Any]) -> str:
    """The text an audit row's hash covers, as mailroom.audit_row_hash builds it."""
    values = (
        str(row["seq"]),
        str(row["id"]),
        str(epoch_microseconds(row["at"])),
        row["db_role"],
        row["actor"],
        row["action"],
        row["target"],
        str(row["affected"]),
        row["detail_text"],
        row["prev_hash"],
    )
    return ENCODING_TAG + "".join(_field(v) for v in values)


def row_hash(row: dict[str, Any]) -> str:
    """SHA-256 (hex) of an audit row's canonical encoding."""
    return hashlib.sha256(canonical_text(row).encode("utf-8")).hexdigest()


def read_head(conn: psycopg.Connection[Any]) -> tuple[ChainHead | None, datetime]:
    """The database's chain head (None when its row is gone) and the database's time of reading."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SELECT_HEAD).fetchone()
        if row is None:
            now = cur.execute("SELECT clock_timestamp() AS now").fetchone()
            assert now is not None
            return None, now["now"]
    head = ChainHead(row["seq"], row["last_id"], row["last_hash"], row["pruned_seq"], row["pruned_hash"])
    return head, row["now"]


def export_head(head: ChainHead, exported_at: datetime) -> dict[str, Any]:
    """The JSON document `audit head --json` prints and `audit verify --head` reads."""
    return {
        "format": EXPORT_FORMAT,
        "exported_at": exported_at.astimezone(UTC).isoformat(),
        "seq": head.seq,
        "last_id": head.last_id,
        "last_hash": head.last_hash,
        "pruned_seq": head.pruned_seq,
    }


def head_text(head: ChainHead, exported_at: datetime) -> str:
    """The text form `audit head` prints: two comment lines and `SEQ LAST_ID LAST_HASH`."""
    return (
        f"# mailroom audit chain head, exported {exported_at.astimezone(UTC).isoformat()}\n"
        "# check later with: mailroom audit verify --head FILE\n"
        f"{head.seq} {head.last_id if head.last_id is not None else '-'} {head.last_hash or '-'}\n"
    )


def _head(seq: Any, last_id: Any, last_hash: Any) -> ChainHead:
    refused = ValidationError("head", f"not an audit chain head: {seq!r} {last_id!r} {last_hash!r}")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise refused
    if seq == 0 and last_hash in (None, "-") and last_id in (None, "-"):
        return ChainHead(0, None, None)
    if not isinstance(last_id, int) or isinstance(last_id, bool) or last_id < 1 or seq == 0:
        raise refused
    if not isinstance(last_hash, str) or not _HASH.match(last_hash):
        raise refused
    return ChainHead(seq, last_id, last_hash)


def _parse_text(text: str) -> ExportedHead:
    exported_at: datetime | None = None
    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            found = re.search(r"exported (\S+)", line)
            if found:
                try:
                    exported_at = datetime.fromisoformat(found.group(1))
                except ValueError:
                    raise ValidationError("head", f"not a time: {found.group(1)[:40]!r}") from None
        elif line.strip():
            lines.append(line.split())
    if len(lines) != 1 or len(lines[0]) != 3 or not lines[0][0].isdigit():
        raise ValidationError(
            "head", "not an audit head written by `mailroom audit head` (SEQ LAST_ID LAST_HASH)"
        )
    seq, last_id, last_hash = lines[0]
    return ExportedHead(
        exported_at, _head(int(seq), int(last_id) if last_id.isdigit() else last_id, last_hash)
    )


def parse_exported_head(text: str) -> ExportedHead:
    """Read what `audit head` printed or wrote: its JSON (`--json`) or its text form."""
    if not text.lstrip().startswith("{"):
        return _parse_text(text)
    data, exported_at = load_json_head(text, EXPORT_FORMAT, "mailroom audit head")
    return ExportedHead(exported_at, _head(data.get("seq"), data.get("last_id"), data.get("last_hash")))


def _rows(conn: psycopg.Connection[Any]) -> Iterator[dict[str, Any]]:
    """Every audit row in chain order, fetched FETCH_ROWS at a time through a server-side cursor."""
    with conn.cursor(name="mailroom_audit_verify", row_factory=dict_row) as cur:
        cur.itersize = FETCH_ROWS
        cur.execute(SELECT_ROWS)
        yield from cur


def _positions(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


class _Walk:
    """The state of one pass over the chain: what the next row must be, and the last prune the chain records."""

    def __init__(self, report: Report, head: ChainHead, exported: ChainHead | None) -> None:
        self.report, self.exported = report, exported
        self.expected_seq = head.pruned_seq + 1
        self.expected_prev = head.pruned_hash
        self.previous_id: int | None = None
        self.prune: dict[str, Any] | None = None
        self.exported_seen = False

    def step(self, row: dict[str, Any]) -> None:
        """Check one row against the row before it, its own hash and the exported head."""
        report, seq, row_id = self.report, row["seq"], row["id"]
        after = (
            f"after row #{self.previous_id}" if self.previous_id is not None else "at the start of the chain"
        )
        if seq > self.expected_seq:
            report.add(
                self.expected_seq,
                None,
                "removed",
                f"chain position(s) {_positions(self.expected_seq, seq - 1)} missing {after}:"
                f" {seq - self.expected_seq} row(s) removed before row #{row_id} (position {seq})",
            )
        elif seq < self.expected_seq:
            report.add(
                seq,
                row_id,
                "out_of_chain",
                f"row #{row_id} repeats chain position {seq}: inserted out of chain",
            )
        elif row["prev_hash"] != self.expected_prev:
            # In its place but linked to another row: written outside the chain trigger, or the row
            # before it was rewritten with a hash of its own.
            report.add(
                seq,
                row_id,
                "out_of_chain",
                f"row #{row_id} (position {seq}) does not link to the row before it {after}:"
                " inserted out of chain, or the row before it was rewritten",
            )
        if row_hash(row) != row["row_hash"]:
            report.add(
                seq,
                row_id,
                "edited",
                f"row #{row_id} (position {seq}, {row['action']}) was edited: its content no longer matches its hash",
            )
        if self.exported is not None and seq == self.exported.seq:
            self.exported_seen = True
            if row["row_hash"] != self.exported.last_hash or row_id != self.exported.last_id:
                report.add(
                    seq,
                    row_id,
                    "rewritten",
                    f"row #{row_id} at position {seq} is not the row the exported head recorded"
                    f" (#{self.exported.last_id}): the chain was rewritten from there or earlier",
                )
        if row["action"] == "audit.prune":
            self.prune = json.loads(row["detail_text"])
        # The stored hash carries the chain on, so one edited row is named once, not with every row after it.
        self.expected_seq = max(seq + 1, self.expected_seq)
        self.expected_prev, self.previous_id = row["row_hash"], row_id
        report.checked += 1
        report.first_seq = seq if report.first_seq is None else report.first_seq
        report.last_seq, report.last_hash = seq, row["row_hash"]


def _check_anchor(report: Report, head: ChainHead, prune: dict[str, Any] | None) -> None:
    """The head's pruned anchor must be the one the newest `audit.prune` row of the chain recorded."""
    recorded = (0, None) if prune is None else (prune.get("through_seq"), prune.get("through_hash"))
    if (head.pruned_seq, head.pruned_hash) != recorded:
        report.add(
            head.pruned_seq,
            None,
            "anchor",
            f"the chain head says positions up to {head.pruned_seq} were pruned, but the newest audit.prune row"
            f" records {recorded[0]}: the oldest rows were removed outside mailroom.audit_prune",
        )


def _check_head(report: Report, head: ChainHead) -> None:
    """The walk must end at the database's head."""
    last = report.last_seq if report.last_seq is not None else head.pruned_seq
    if last < head.seq:
        report.add(
            last + 1,
            None,
            "removed",
            f"chain position(s) {_positions(last + 1, head.seq)} missing: the newest {head.seq - last} row(s)"
            f" (up to #{head.last_id}) were removed",
        )
    elif last > head.seq:
        report.add(
            last,
            None,
            "head",
            f"the chain goes on to position {last}, past its head ({head.seq}): the head was rewritten",
        )
    elif head.seq > head.pruned_seq and report.last_hash != head.last_hash:
        report.add(
            last, None, "head", f"the newest row (position {last}) is not the one the chain head records"
        )


def _check_exported(report: Report, head: ChainHead, exported: ChainHead, seen: bool) -> None:
    """A head exported earlier must still be in the chain: not ahead of it, not replaced."""
    last = report.last_seq if report.last_seq is not None else head.pruned_seq
    if exported.seq > last:
        report.add(
            last + 1,
            None,
            "removed",
            f"the exported head is ahead of the database: chain position(s) {_positions(last + 1, exported.seq)}"
            f" (up to #{exported.last_id}) were removed (the newest rows deleted)",
        )
    elif exported.seq == head.pruned_seq and exported.seq > 0 and exported.last_hash != head.pruned_hash:
        report.add(
            exported.seq, exported.last_id, "rewritten", "the exported head's row is not the pruned anchor"
        )
    elif exported.seq > head.pruned_seq and not seen:
        report.add(
            exported.seq,
            exported.last_id,
            "removed",
            f"the exported head's row (position {exported.seq}) is gone",
        )


def verify_chain(
    conn: psycopg.Connection[Any],
    exported: ChainHead | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Walk the whole chain in one consistent snapshot; `on_progress(checked, total)` every PROGRESS_EVERY rows.

    Runs in a read-only REPEATABLE READ transaction of its own (the head and the rows are read at one moment).
    """
    conn.commit()
    saved = conn.isolation_level, conn.read_only
    conn.isolation_level, conn.read_only = IsolationLevel.REPEATABLE_READ, True
    try:
        with conn.transaction():
            return _verify(conn, exported, on_progress)
    finally:
        conn.isolation_level, conn.read_only = saved


def _verify(
    conn: psycopg.Connection[Any], exported: ChainHead | None, on_progress: Callable[[int, int], None] | None
) -> Report:
    head, _ = read_head(conn)
    if head is None:
        report = Report(None)
        report.add(None, None, "head", "the chain head row is gone (mailroom.audit_chain was emptied)")
        head = ChainHead(0, None, None)
    else:
        report = Report(head)
    walk = _Walk(report, head, exported)
    with conn.cursor(row_factory=dict_row) as cur:
        counted = cur.execute(COUNT_PENDING).fetchone()
    report.pending = int(counted["pending"]) if counted else 0
    total = max(head.seq - head.pruned_seq, 0)
    for row in _rows(conn):
        walk.step(row)
        if on_progress is not None and report.checked % PROGRESS_EVERY == 0:
            on_progress(report.checked, total)
    if report.head is not None:
        _check_anchor(report, head, walk.prune)
        _check_head(report, head)
    if exported is not None:
        _check_exported(report, head, exported, walk.exported_seen)
    return report


def prune(conn: psycopg.Connection[Any], before: datetime, *, reason: str, actor: str) -> int:
    """Remove the audit rows written before `before` (the chain's oldest stretch) in the caller's transaction.

    Audited as `audit.prune`, which records the anchor that keeps the rest verifiable; returns how many went.
    """
    if not reason.strip() or not actor.strip():
        raise ValidationError("reason", "pruning the audit trail needs a reason and an actor")
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(CALL_PRUNE, (before, reason, actor)).fetchone()
    assert row is not None
    return int(row["removed"])


def link_pending(conn: psycopg.Connection[Any], batch: int = LINK_BATCH) -> int:
    """Chain the applications' audit rows waiting in mailroom.audit_pending, `batch` per transaction; how many.

    Each transaction holds the chain head until it commits (waiting 5 s at most for it, else 55P03 naming
    who holds it); on a connection already in a transaction, the head is held to that one's end.
    """
    linked = 0
    while True:
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(LINK_PENDING, (batch,)).fetchone()
        done = int(row["linked"]) if row else 0
        linked += done
        if done < batch:
            return linked
