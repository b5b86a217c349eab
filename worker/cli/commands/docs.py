"""`mailroom docs add|expect|sign|status|verify|head|remove-signatures|remind|checksum`: signed document acknowledgements."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from worker.cli.commands import docs_help as help_text
from worker.core.config import Settings
from worker.core.terminal import printable
from worker.ops.audit import cli_actor

_BIG_FILE = 64 << 20


RAW = argparse.RawDescriptionHelpFormatter


def _url(settings: Settings) -> str:
    from worker.core.db import database_url

    return database_url(settings)


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S %Z")


def _progress(path: Path) -> Callable[[int], None] | None:
    size = path.stat().st_size if path.is_file() else 0
    if size < _BIG_FILE:
        return None
    step = max(size // 10, 1)
    marks = iter(range(step, size + step, step))
    next_mark = [next(marks)]

    def report(done: int) -> None:
        if done >= next_mark[0]:
            print(f"checksum: {done * 100 // size}% of {path.name}", file=sys.stderr, flush=True)
            next_mark[0] = next(marks, size + 1)

    return report


def cmd_add(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs add DOC`."""
    from worker.core.db import connect
    from worker.producers.documents.records import file_checksum
    from worker.producers.documents.signatures import add_document

    checksum = args.checksum
    if args.file is not None:
        path = Path(args.file)
        checksum = file_checksum(path, args.algorithm or "SHA-256", _progress(path))
    with connect(_url(settings)) as conn:
        doc = add_document(
            conn,
            args.doc_id,
            title=args.title,
            url=args.url,
            checksum=checksum,
            checksum_algorithm=(args.algorithm or "SHA-256") if checksum else args.algorithm,
            description=args.description,
            created_by=args.by,
        )
    checksum_text = f", {doc.checksum_algorithm} {doc.checksum}" if doc.checksum else ""
    print(f"added document {doc.doc_id}{checksum_text}")
    return 0


def cmd_expect(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs expect DOC EMAIL`."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import expect_signer

    with connect(_url(settings)) as conn:
        new = expect_signer(
            conn,
            args.doc_id,
            args.email,
            name=args.name,
            locale=args.locale,
            added_by=args.by,
            notes=args.notes,
            settings=settings,
        )
    print(f"{'expecting' if new else 'updated'} {args.email.strip().lower()} on {args.doc_id}")
    return 0


def cmd_sign(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs sign DOC EMAIL`."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import sign_document

    with connect(_url(settings)) as conn:
        signature = sign_document(conn, args.doc_id, args.email, name=args.name, settings=settings)
    print(
        f"signature #{signature.id}: {signature.signer_email} signed {signature.doc_id}"
        f" at {_when(signature.signed_at)} (payload SHA-256 {signature.payload_hash})"
    )
    return 0


def _signer_json(state: Any) -> dict[str, Any]:
    return {
        "email": state.email,
        "name": state.name,
        "signed_at": state.signed_at.isoformat() if state.signed_at else None,
        "reminders": state.reminders,
        "last_reminded_at": state.last_reminded_at.isoformat() if state.last_reminded_at else None,
    }


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs status DOC`."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import document_status

    with connect(_url(settings)) as conn:
        status = document_status(conn, args.doc_id)
    pct = status.completion_pct
    if args.json:
        print(
            json.dumps(
                {
                    "doc_id": status.document.doc_id,
                    "title": status.document.title,
                    "expected": len(status.expected),
                    "signed": status.signed,
                    "completion_pct": pct,
                    "missing": [_signer_json(s) for s in status.missing],
                    "unexpected": [_signer_json(s) for s in status.unexpected],
                    "signers": [_signer_json(s) for s in status.expected],
                },
                indent=2,
            )
        )
        return 0
    doc = status.document
    title = printable(doc.title or "(untitled)")
    print(f"{doc.doc_id}: {title}" + (f"  {printable(doc.url)}" if doc.url else ""))
    print(
        f"expected {len(status.expected)}  signed {status.signed}  "
        f"completion {'n/a' if pct is None else f'{pct:.2f}%'}  unexpected {len(status.unexpected)}"
    )
    for title, rows in (("missing", status.missing), ("unexpected", status.unexpected)):
        if rows:
            print(f"{title}:")
        for s in rows:
            extra = (
                f"signed {_when(s.signed_at)}"
                if s.signed_at
                else f"{s.reminders} reminder(s), last {_when(s.last_reminded_at)}"
            )
            print(f"  {printable(s.email):<40} {printable(s.name):<24} {extra}")  # a signer typed the name
    return 0


def _report_json(report: Any) -> dict[str, Any]:
    head = report.head
    return {
        "doc_id": report.doc_id,
        "checked": report.checked,
        "ok": report.ok,
        "key": report.key_fingerprint,
        "head": None if head is None else {"count": head.count, "last_hash": head.last_hash},
        "missing_positions": list(report.missing),
        "problems": report.problems(),
        "broken": [{"id": b.id, "signer": b.signer_email, "reasons": b.reasons} for b in report.broken],
    }


def cmd_verify(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs verify [DOC] [--head FILE]`: exit status 1 when anything is broken or removed."""
    from worker.core.db import connect
    from worker.producers.documents.heads import ExportedHeads, parse_exported_heads
    from worker.producers.documents.signatures import all_doc_ids, verify_chain

    exported = ExportedHeads(None, {})
    if args.head is not None:
        exported = parse_exported_heads(Path(args.head).read_text(encoding="utf-8"))
    with connect(_url(settings)) as conn:
        doc_ids = [args.doc_id] if args.doc_id else all_doc_ids(conn)
        reports = [
            verify_chain(
                conn,
                doc_id,
                settings=settings,
                exported=exported.heads.get(doc_id),
                exported_at=exported.exported_at,
            )
            for doc_id in doc_ids
        ]
    # A document the exported head names that is gone altogether (its signatures went with it).
    gone = [h for d, h in sorted(exported.heads.items()) if d not in doc_ids and not args.doc_id]
    gone_lines = [
        f"{h.doc_id}: BROKEN: document missing since the exported head ({h.count} signature(s))" for h in gone
    ]
    if args.json:
        out = [_report_json(r) for r in reports]
        out += [{"doc_id": h.doc_id, "ok": False, "problems": ["document missing"]} for h in gone]
        print(json.dumps(out, indent=2))
    else:
        for report in reports:
            print(report.summary())
            for line in report.problems()[1:]:
                print(f"  also {line}")
        for line in gone_lines:
            print(line)
        if not reports and not gone:
            print("no documents")
    return 0 if all(r.ok for r in reports) and not gone else 1


def cmd_head(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs head [DOC...]`: print chain heads for keeping outside the database."""
    from datetime import UTC

    from worker.core.db import connect
    from worker.producers.documents.heads import chain_heads, export_heads

    with connect(_url(settings)) as conn:
        heads, exported_at = chain_heads(conn, args.doc_ids)
    if args.json:
        print(json.dumps(export_heads(heads, exported_at), indent=2))
    else:
        print(f"# mailroom signature heads, exported {exported_at.astimezone(UTC).isoformat()}")
        print("# check later with: mailroom docs verify --head FILE")
        for head in heads:
            print(f"{head.doc_id} {head.count} {head.last_hash or '-'}")
    missing = sorted(set(args.doc_ids) - {h.doc_id for h in heads})
    for doc_id in missing:
        print(f"error: {doc_id} has no chain head (run `mailroom docs verify {doc_id}`)", file=sys.stderr)
    return 1 if missing else 0


def cmd_remove_signatures(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs remove-signatures DOC --reason TEXT`: the audited way signatures leave the database."""
    from worker.core.config import ConfigError
    from worker.core.db import connect
    from worker.producers.documents.signatures import remove_signatures

    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError("removing signatures cannot be undone: add --yes to confirm")
        answer = input(
            f"Remove every signature of {args.doc_id}? This cannot be undone. Type 'remove' to confirm: "
        )
        if answer.strip() != "remove":
            print("nothing changed", file=sys.stderr)
            return 1
    with connect(_url(settings)) as conn:
        removed = remove_signatures(conn, args.doc_id, reason=args.reason, actor=args.by)
    print(
        f"{args.doc_id}: removed {removed} signature(s); chain head reset; audited as signatures.maintenance"
    )
    return 0


def cmd_remind(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs remind DOC`: exit status 1 when a signer was skipped."""
    from datetime import timedelta

    from worker.core.db import connect
    from worker.producers.documents.signatures import reminder_candidates, send_reminders

    interval = None if args.interval is None else timedelta(seconds=args.interval)
    with connect(_url(settings)) as conn:
        if args.dry_run:
            count = reminder_candidates(conn, args.doc_id, interval=interval, settings=settings)
            print(f"{args.doc_id}: {count} reminder(s) would be queued")
            return 0
        result = send_reminders(conn, args.doc_id, interval=interval, requested_by=args.by, settings=settings)
    print(result.summary())
    return 1 if result.skipped else 0


def cmd_checksum(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom docs checksum DOC --file PATH`: exit status 1 when the file does not match."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import verify_checksum

    path = Path(args.file)
    with connect(_url(settings)) as conn:
        result = verify_checksum(conn, args.doc_id, path, verified_by=args.by, progress=_progress(path))
    if result.is_valid:
        print(f"{args.doc_id}: {path} matches ({result.algorithm} {result.calculated_checksum})")
        return 0
    print(f"{args.doc_id}: {path} does NOT match: {result.error_message}")
    return 1


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom docs` and its actions."""
    docs = sub.add_parser(
        "docs",
        help="documents to acknowledge: signers, Ed25519 signatures, reminders, checksums",
        description=help_text.DOCS,
        formatter_class=RAW,
    )
    d_sub = docs.add_subparsers(dest="docs_command", required=True, metavar="ACTION")
    _add_and_expect(d_sub)
    _sign_and_status(d_sub)
    _verify(d_sub)
    _remind_and_checksum(d_sub)


def _add_and_expect(d_sub: argparse._SubParsersAction[Any]) -> None:
    """Add `docs add` and `docs expect`."""
    add = d_sub.add_parser(
        "add",
        help="add a document",
        description=help_text.ADD,
        formatter_class=RAW,
    )
    add.add_argument("doc_id", metavar="DOC", help="document id: letters, digits, _ . : - (max 128)")
    add.add_argument("--title", default="", help="title shown in reminders")
    add.add_argument("--url", default="", help="http(s) link to the document, included in reminders")
    add.add_argument("--description", default="", help="longer description")
    chk = add.add_mutually_exclusive_group()
    chk.add_argument("--checksum", help="hex digest of the document's file")
    chk.add_argument("--file", help="compute the checksum of this file")
    add.add_argument(
        "--algorithm", choices=("SHA-256", "SHA-512"), help="checksum algorithm (default SHA-256)"
    )
    add.add_argument("--by", default=cli_actor(), help="who adds it (default: your user name)")
    add.set_defaults(handler=cmd_add)

    exp = d_sub.add_parser(
        "expect",
        help="add an expected signer (or update their name and locale)",
        description=help_text.EXPECT,
        formatter_class=RAW,
    )
    exp.add_argument("doc_id", metavar="DOC")
    exp.add_argument("email", metavar="EMAIL")
    exp.add_argument("--name", default="", help="the signer's name, used in reminders")
    exp.add_argument("--locale", help="the signer's language (default MAILROOM_DEFAULT_LOCALE)")
    exp.add_argument("--notes", help="free-form notes")
    exp.add_argument("--by", default=cli_actor(), help="who adds the signer (default: your user name)")
    exp.set_defaults(handler=cmd_expect)


def _sign_and_status(d_sub: argparse._SubParsersAction[Any]) -> None:
    """Add `docs sign` and `docs status`."""
    sign = d_sub.add_parser(
        "sign",
        help="record EMAIL's signature of DOC",
        description=help_text.SIGN,
        formatter_class=RAW,
    )
    sign.add_argument("doc_id", metavar="DOC")
    sign.add_argument("email", metavar="EMAIL")
    sign.add_argument("--name", help="signer name (default: the expected signer's name)")
    sign.set_defaults(handler=cmd_sign)

    st = d_sub.add_parser(
        "status",
        help="expected, signed, completion, missing and unexpected signers",
        description=help_text.STATUS,
        formatter_class=RAW,
    )
    st.add_argument("doc_id", metavar="DOC")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(handler=cmd_status)


def _verify(d_sub: argparse._SubParsersAction[Any]) -> None:
    """Add `docs verify` and `docs head`."""
    vf = d_sub.add_parser(
        "verify",
        help="check every signature, the chain and its head; name the first broken row or missing position",
        description=help_text.VERIFY,
        formatter_class=RAW,
    )
    vf.add_argument("doc_id", metavar="DOC", nargs="?", help="one document (default: every document)")
    vf.add_argument(
        "--head", metavar="FILE", help="heads exported earlier by `mailroom docs head` (text or --json)"
    )
    vf.add_argument("--json", action="store_true", help="machine-readable output")
    vf.set_defaults(handler=cmd_verify)

    hd = d_sub.add_parser(
        "head",
        help="print each document's chain head (signature count, last hash) to keep outside the database",
        description=help_text.HEAD,
        formatter_class=RAW,
    )
    hd.add_argument("doc_ids", metavar="DOC", nargs="*", help="documents (default: every document)")
    hd.add_argument("--json", action="store_true", help="JSON, as `docs verify --head` reads it")
    hd.set_defaults(handler=cmd_head)

    rs = d_sub.add_parser(
        "remove-signatures",
        help="remove every signature of DOC (audited; the only way signatures are removed)",
        description=help_text.REMOVE_SIGNATURES,
        formatter_class=RAW,
    )
    rs.add_argument("doc_id", metavar="DOC")
    rs.add_argument("--reason", required=True, help="why (kept in the audit row)")
    rs.add_argument("--by", default=cli_actor(), help="who removes them (default: your user name)")
    rs.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rs.set_defaults(handler=cmd_remove_signatures)


def _remind_and_checksum(d_sub: argparse._SubParsersAction[Any]) -> None:
    """Add `docs remind` and `docs checksum`."""
    rm = d_sub.add_parser(
        "remind",
        help="email a reminder to every expected signer who has not signed",
        description=help_text.REMIND,
        formatter_class=RAW,
    )
    rm.add_argument("doc_id", metavar="DOC")
    rm.add_argument("--dry-run", action="store_true", help="only say how many reminders would be queued")
    rm.add_argument(
        "--interval", type=float, help="seconds between reminders to one signer (overrides setting)"
    )
    rm.add_argument("--by", default=cli_actor(), help="who sends the reminders (default: your user name)")
    rm.set_defaults(handler=cmd_remind)

    ck = d_sub.add_parser(
        "checksum",
        help="check a file against the document's stored checksum and record the verification",
        description=help_text.CHECKSUM,
        formatter_class=RAW,
    )
    ck.add_argument("doc_id", metavar="DOC")
    ck.add_argument("--file", required=True, metavar="PATH", help="the file to check")
    ck.add_argument("--by", default=cli_actor(), help="who verifies (default: your user name)")
    ck.set_defaults(handler=cmd_checksum)
