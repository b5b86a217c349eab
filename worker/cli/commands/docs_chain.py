"""`mailroom docs sign|verify|head|remove-signatures`: signatures and the hash chain of each document."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from worker.cli.framework import Command, Database, confirmed_by_typing, json_option, with_database

SIGN = """\
Sign DOC for EMAIL with Mailroom's Ed25519 key, chained to the document's previous signature. One
signature per signer and document; a signer who was not expected may still sign (`status` lists
them as unexpected). Other signatures are left alone.
Exit status 0, 2 when the document is unknown or EMAIL has signed it already.

Example:
  mailroom docs sign policy-2026 ada@example.com"""

VERIFY = """\
Check each signature's canonical payload, its SHA-256, its Ed25519 signature and its link to the
previous signature, and that every position the document's chain head records is there (a deleted
signature, the newest or any other, is named by its position). With --head FILE, also check against
heads exported earlier by `docs head`, which catches removals even if the head table was rewritten
too. Changes nothing. Exit status 0 when all is intact, 1 when anything is broken or missing.

Examples:
  mailroom docs verify
  mailroom docs verify policy-2026 --head heads-2026-11-25.json"""

HEAD = """\
Print the chain head of each document (default: all): its signature count and the hash the newest
signature ends the chain with. Keep the output somewhere the database's writers cannot reach (a
ticket, another host, a printout) and check later with `docs verify --head FILE`. Changes nothing.
Exit status 0, 1 when a document named is unknown.

Example:
  mailroom docs head --json > heads-2026-11-25.json"""

REMOVE_SIGNATURES = """\
Remove every signature of DOC (a privacy erase, a test document) through
mailroom.signature_maintenance(): one `signatures.maintenance` audit row with the reason, and the
chain head reset to an empty chain, in one transaction. The document and its expected signers are
left alone. Heads exported earlier will report the removal and name the audit row; export them again
afterwards. Asks on a terminal unless --yes; without a terminal --yes is required.
Exit status 0 when removed, 1 when not confirmed, 2 without --yes off a terminal.

Example:
  mailroom docs remove-signatures nda-7 --reason "test document" --yes"""

DOC = click.argument("doc_id", metavar="DOC")


def by_option(who: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """`--by`: who the change is recorded for, the OS user unless given."""
    return click.option("--by", default=_os_user, help=f"who {who} (default: your user name)")


def _os_user() -> str:
    from worker.ops.audit import cli_actor

    return cli_actor()


def when(moment: datetime | None) -> str:
    """A moment as the docs commands print it, `-` for none."""
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S %Z")


@click.command("sign", cls=Command, help=SIGN, short_help="record EMAIL's signature of DOC")
@DOC
@click.argument("email", metavar="EMAIL")
@click.option("--name", help="signer name (default: the expected signer's name)")
@with_database
def sign(db: Database, doc_id: str, email: str, name: str | None) -> int:
    """`mailroom docs sign DOC EMAIL`."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import sign_document

    with connect(db.url) as conn:
        signature = sign_document(conn, doc_id, email, name=name, settings=db.settings)
    click.echo(
        f"signature #{signature.id}: {signature.signer_email} signed {signature.doc_id}"
        f" at {when(signature.signed_at)} (payload SHA-256 {signature.payload_hash})"
    )
    return 0


@click.command(
    "verify",
    cls=Command,
    help=VERIFY,
    short_help="check every signature, the chain and its head; name the first broken row or missing position",
)
@click.argument("doc_id", metavar="DOC", required=False)
@click.option(
    "--head",
    "head_file",
    metavar="FILE",
    help="heads exported earlier by `mailroom docs head` (text or --json)",
)
@json_option
@with_database
def verify(db: Database, doc_id: str | None, head_file: str | None, as_json: bool) -> int:
    """`mailroom docs verify [DOC] [--head FILE]`: exit status 1 when anything is broken or removed."""
    from worker.core.db import connect
    from worker.producers.documents.heads import ExportedHeads, parse_exported_heads
    from worker.producers.documents.signatures import all_doc_ids, verify_chain

    exported = ExportedHeads(None, {})
    if head_file is not None:
        exported = parse_exported_heads(Path(head_file).read_text(encoding="utf-8"))
    with connect(db.url) as conn:
        doc_ids = [doc_id] if doc_id else all_doc_ids(conn)
        reports = [
            verify_chain(
                conn,
                one,
                settings=db.settings,
                exported=exported.heads.get(one),
                exported_at=exported.exported_at,
            )
            for one in doc_ids
        ]
    # A document the exported head names that is gone altogether (its signatures went with it).
    gone = [h for d, h in sorted(exported.heads.items()) if d not in doc_ids and not doc_id]
    if as_json:
        out = [_report_json(r) for r in reports]
        out += [{"doc_id": h.doc_id, "ok": False, "problems": ["document missing"]} for h in gone]
        click.echo(json.dumps(out, indent=2))
    else:
        for report in reports:
            click.echo(report.summary())
            for line in report.problems()[1:]:
                click.echo(f"  also {line}")
        for h in gone:
            click.echo(
                f"{h.doc_id}: BROKEN: document missing since the exported head ({h.count} signature(s))"
            )
        if not reports and not gone:
            click.echo("no documents")
    return 0 if all(r.ok for r in reports) and not gone else 1


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


@click.command(
    "head",
    cls=Command,
    help=HEAD,
    short_help="print each document's chain head (signature count, last hash) to keep outside the database",
)
@click.argument("doc_ids", metavar="DOC...", nargs=-1)
@click.option("--json", "as_json", is_flag=True, help="JSON, as `docs verify --head` reads it")
@with_database
def head(db: Database, doc_ids: tuple[str, ...], as_json: bool) -> int:
    """`mailroom docs head [DOC...]`: print chain heads for keeping outside the database."""
    from datetime import UTC

    from worker.core.db import connect
    from worker.producers.documents.heads import chain_heads, export_heads

    with connect(db.url) as conn:
        heads, exported_at = chain_heads(conn, list(doc_ids))
    if as_json:
        click.echo(json.dumps(export_heads(heads, exported_at), indent=2))
    else:
        click.echo(f"# mailroom signature heads, exported {exported_at.astimezone(UTC).isoformat()}")
        click.echo("# check later with: mailroom docs verify --head FILE")
        for found in heads:
            click.echo(f"{found.doc_id} {found.count} {found.last_hash or '-'}")
    missing = sorted(set(doc_ids) - {h.doc_id for h in heads})
    for one in missing:
        click.echo(f"error: {one} has no chain head (run `mailroom docs verify {one}`)", err=True)
    return 1 if missing else 0


@click.command(
    "remove-signatures",
    cls=Command,
    help=REMOVE_SIGNATURES,
    short_help="remove every signature of DOC (audited; the only way signatures are removed)",
)
@DOC
@click.option("--reason", required=True, help="why (kept in the audit row)")
@by_option("removes them")
@click.option("--yes", is_flag=True, help="do not ask for confirmation")
@with_database
def remove_signatures(db: Database, doc_id: str, reason: str, by: str, yes: bool) -> int:
    """`mailroom docs remove-signatures DOC --reason TEXT`: the audited way signatures leave the database."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import remove_signatures as remove_all

    question = f"Remove every signature of {doc_id}? This cannot be undone. Type 'remove' to confirm"
    refusal = "removing signatures cannot be undone: add --yes to confirm"
    if not yes and not confirmed_by_typing(question, "remove", refusal=refusal):
        return 1
    with connect(db.url) as conn:
        removed = remove_all(conn, doc_id, reason=reason, actor=by)
    click.echo(
        f"{doc_id}: removed {removed} signature(s); chain head reset; audited as signatures.maintenance"
    )
    return 0
