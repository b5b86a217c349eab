"""Chain heads: how many signatures each document's chain holds and the link its newest one ends with.

The database keeps one head per document (`mailroom.signature_heads`, moved by a trigger in every
signing transaction), so a signature deleted behind its back leaves a head that says how many there
were. A head exported with `mailroom docs head` and kept outside the database catches even an attacker
who also rewrote the head table. Signatures are removed only by `remove_signatures`, which is audited.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.head_files import load_json_head
from worker.core.validation import ValidationError
from worker.producers.documents.chain import link_hash
from worker.producers.documents.records import check_doc_id, get_document

EXPORT_FORMAT = "mailroom-signature-heads/1"
_HASH = re.compile(r"^[0-9a-f]{64}$")
_EXPORTED_AT = re.compile(r"exported (\S+)")


@dataclass(frozen=True)
class ChainHead:
    """One document's chain head: its signature count and the link hash of its newest signature."""

    doc_id: str
    count: int
    last_hash: str | None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class ExportedHeads:
    """Heads read back from a file written by `mailroom docs head`."""

    exported_at: datetime | None
    heads: dict[str, ChainHead]


SELECT_HEADS = """
SELECT doc_id, count, last_hash, updated_at FROM mailroom.signature_heads
WHERE %(all)s OR doc_id = ANY(%(ids)s) ORDER BY doc_id
"""
SELECT_MAINTENANCE = """
SELECT id, at, actor, affected, detail ->> 'reason' AS reason FROM mailroom.audit_log
WHERE action = 'signatures.maintenance' AND target = %(doc_id)s AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)
ORDER BY id
"""
SELECT_NOW = "SELECT clock_timestamp() AS now"
CALL_MAINTENANCE = "SELECT mailroom.signature_maintenance(%s, %s, %s) AS removed"


def chain_heads(
    conn: psycopg.Connection[Any], doc_ids: Sequence[str] = ()
) -> tuple[list[ChainHead], datetime]:
    """The heads of `doc_ids` (default: every document), by document id, and the database's time of reading.

    An unknown document is a `DocumentNotFound`.
    """
    for doc_id in doc_ids:
        get_document(conn, doc_id)
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(SELECT_HEADS, {"all": not doc_ids, "ids": list(doc_ids)}).fetchall()
        now = cur.execute(SELECT_NOW).fetchone()
    assert now is not None
    heads = [ChainHead(r["doc_id"], r["count"], r["last_hash"], r["updated_at"]) for r in rows]
    return heads, now["now"]


def export_heads(heads: Iterable[ChainHead], exported_at: datetime) -> dict[str, Any]:
    """The JSON document `docs head --json` prints and `docs verify --head` reads."""
    return {
        "format": EXPORT_FORMAT,
        "exported_at": exported_at.astimezone(UTC).isoformat(),
        "heads": [{"doc_id": h.doc_id, "count": h.count, "last_hash": h.last_hash} for h in heads],
    }


def _head(doc_id: Any, count: Any, last_hash: Any) -> ChainHead:
    if not isinstance(doc_id, str) or not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise ValidationError("head", f"not a chain head: {doc_id!r} {count!r}")
    check_doc_id(doc_id)
    if last_hash in (None, "-") and count == 0:
        return ChainHead(doc_id, 0, None)
    if not isinstance(last_hash, str) or not _HASH.match(last_hash) or count == 0:
        raise ValidationError("head", f"{doc_id}: {last_hash!r} is not the last hash of {count} signature(s)")
    return ChainHead(doc_id, count, last_hash)


def _parse_text(text: str) -> ExportedHeads:
    heads: dict[str, ChainHead] = {}
    exported_at: datetime | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            found = _EXPORTED_AT.search(line)
            exported_at = datetime.fromisoformat(found.group(1)) if found else exported_at
            continue
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 3 or not parts[1].isdigit():
            raise ValidationError("head", f"line {number} is not `DOC COUNT LAST_HASH`: {line[:80]!r}")
        heads[parts[0]] = _head(parts[0], int(parts[1]), parts[2])
    return ExportedHeads(exported_at, heads)


def parse_exported_heads(text: str) -> ExportedHeads:
    """Read what `docs head` printed: its JSON (`--json`) or its text lines (`DOC COUNT LAST_HASH`)."""
    if not text.lstrip().startswith("{"):
        return _parse_text(text)
    data, exported_at = load_json_head(text, EXPORT_FORMAT, "mailroom docs head")
    items = data.get("heads")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ValidationError("head", f"not a head file written by `mailroom docs head` ({EXPORT_FORMAT})")
    heads = {str(i.get("doc_id")): _head(i.get("doc_id"), i.get("count"), i.get("last_hash")) for i in items}
    return ExportedHeads(exported_at, heads)


def positions_text(positions: Sequence[int]) -> str:
    """Positions as an operator reads them: `2`, `2, 5`, `1-3`."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def missing_positions(present: Iterable[int], count: int) -> tuple[int, ...]:
    """Positions 1..count that no stored signature holds."""
    have = set(present)
    return tuple(p for p in range(1, count + 1) if p not in have)


def describe_missing(missing: Sequence[int], count: int, since: str = "") -> str:
    """One line naming the missing positions, and whether they are the newest or all of them."""
    plural = "s" if len(missing) > 1 else ""
    text = f"signature position{plural} {positions_text(missing)} of {count} missing{since}"
    if len(missing) == count:
        return text + (" (every signature deleted)" if count > 1 else " (the only signature deleted)")
    return text + (" (the newest deleted)" if count in missing else "")


def head_findings(
    rows: Sequence[dict[str, Any]], head: ChainHead | None
) -> tuple[tuple[int, ...], list[str]]:
    """Check stored rows (chain order) against the database's head: missing positions, and other problems."""
    if head is None:
        return (), ["no chain head: the document's head row was deleted"]
    problems: list[str] = []
    for row in rows:
        if row["seq"] > head.count:
            problems.append(
                f"signature #{row['id']} at position {row['seq']} is beyond the chain head"
                f" ({head.count} signature(s)): the head was rewritten"
            )
    newest = next((r for r in rows if r["seq"] == head.count), None)
    if newest is not None and link_hash(newest["payload_hash"], newest["signature"]) != head.last_hash:
        problems.append(
            f"signature #{newest['id']} at position {head.count} is not the newest one the chain head records"
        )
    return missing_positions((r["seq"] for r in rows), head.count), problems


def export_findings(
    conn: psycopg.Connection[Any],
    rows: Sequence[dict[str, Any]],
    exported: ChainHead,
    exported_at: datetime | None,
) -> list[str]:
    """Check stored rows (chain order) against a head exported earlier; name removed positions and explain them.

    Positions come from the rows, and the exported last hash must still end position `count` of the
    chain, so renumbering the rows or rewriting the head table does not hide a removal.
    """
    if exported.count == 0:
        return []
    problems: list[str] = []
    missing = missing_positions((r["seq"] for r in rows), exported.count)
    if missing:
        problems.append(describe_missing(missing, exported.count, " since the exported head"))
    links = [link_hash(r["payload_hash"], r["signature"]) for r in rows]
    if exported.last_hash not in links:
        problems.append(
            f"the newest signature of the exported head (position {exported.count}) is no longer in the chain"
        )
    elif (found := links.index(exported.last_hash) + 1) != exported.count:
        problems.append(
            f"the newest signature of the exported head is now position {found} of the chain,"
            f" not {exported.count}: {exported.count - found} earlier signature(s) were removed"
        )
    if problems:
        problems.extend(_maintenance_notes(conn, exported.doc_id, exported_at))
    return problems


def _maintenance_notes(conn: psycopg.Connection[Any], doc_id: str, since: datetime | None) -> list[str]:
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(SELECT_MAINTENANCE, {"doc_id": doc_id, "since": since}).fetchall()
    return [
        f"audit #{r['id']}: signatures.maintenance by {r['actor']} at {r['at'].astimezone(UTC):%Y-%m-%d %H:%M:%S}Z"
        f" removed {r['affected']} signature(s): {r['reason']}"
        for r in rows
    ]


def remove_signatures(conn: psycopg.Connection[Any], doc_id: str, *, reason: str, actor: str) -> int:
    """Remove every signature of `doc_id` in the caller's transaction, audited, and reset its chain head.

    The only way signatures leave the database (a privacy erase, a test document); returns how many went.
    """
    get_document(conn, doc_id)
    if not reason.strip() or not actor.strip():
        raise ValidationError("reason", "signature maintenance needs a reason and an actor")
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(CALL_MAINTENANCE, (doc_id, reason, actor)).fetchone()
    assert row is not None
    return int(row["removed"])
