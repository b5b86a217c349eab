"""`mailroom docs`: documents to acknowledge, their signers, reminders and checksums (signatures: `docs_chain`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from worker.cli.commands.docs_chain import DOC, by_option, head, remove_signatures, sign, verify, when
from worker.cli.framework import Command, Database, Group, json_option, with_database

_BIG_FILE = 64 << 20

DOCS = """\
Signed document acknowledgements: who is expected to acknowledge a document, who did and when, and
reminders to the rest. Mailroom signs each acknowledgement with its Ed25519 key
(MAILROOM_SIGNING_KEY, else $MAILROOM_HOME/signing.key, created on first use with mode 0600) and
chains the signatures of a document so that any edit of a stored one is detected by `verify`.

Examples:
  mailroom docs add policy-2026 --title "Security policy" --file policy.pdf
  mailroom docs expect policy-2026 ada@example.com --name "Ada Lovelace" --locale fr
  mailroom docs remind policy-2026
  mailroom docs verify"""

ADD = """\
Add a document. Give its checksum as hex (--checksum) or let Mailroom compute it (--file); the file
itself is not stored. A document that exists already is refused and left alone. With
--require-login its signing page takes a signature only after an OpenID Connect login whose
verified email is the signer's (MAILROOM_OIDC_*); the link alone is not enough.
Exit status 0, 2 when the id, link or checksum is invalid or the document exists.

Examples:
  mailroom docs add policy-2026 --title "Security policy" --file policy.pdf
  mailroom docs add board-minutes --file minutes.pdf --require-login
  mailroom docs add nda-7 --checksum 9f86d081884c7d65... --url https://intra.example.com/nda-7"""

EXPECT = """\
Expect EMAIL to sign DOC (or update that signer's name and locale). Reminders go out in the
signer's locale (en, fr, es, de, it; a regional form such as fr-CA falls back to its language).
Signatures already given are left alone. Exit status 0, 2 when the document or address is invalid.

Example:
  mailroom docs expect policy-2026 ada@example.com --name "Ada Lovelace" --locale fr"""

STATUS = """\
Show DOC's expected signers, who signed and when, its completion, who is missing and who signed
without being expected. Changes nothing. Exit status 0, 2 when the document is unknown.

Examples:
  mailroom docs status policy-2026
  mailroom docs status policy-2026 --json | jq .missing"""

REMIND = """\
Enqueue one reminder per expected signer who has not signed, in their locale, and log it; its
outcome (sent, failed, bounced, ...) is recorded once delivered. A signer reminded within the
interval (MAILROOM_REMINDER_INTERVAL_SECONDS, default one day; failed or cancelled reminders do not
count) or on the bounce list is skipped with the reason. Signers who signed are left alone.
Exit status 0, 1 when a signer was skipped.

Examples:
  mailroom docs remind policy-2026 --dry-run
  mailroom docs remind policy-2026"""

CHECKSUM = """\
Hash PATH with the document's algorithm and record a verification row: valid, or not with the
reason. The document's stored checksum is left as it is.
Exit status 0 when the file matches, 1 when it does not.

Example:
  mailroom docs checksum policy-2026 --file policy.pdf"""


@click.group(cls=Group, help=DOCS)
def docs() -> None:
    """`mailroom docs ACTION`."""


@docs.command("add", cls=Command, help=ADD, short_help="add a document")
@click.argument("doc_id", metavar="DOC")
@click.option("--title", default="", help="title shown in reminders")
@click.option("--url", default="", help="http(s) link to the document, included in reminders")
@click.option("--description", default="", help="longer description")
@click.option("--checksum", help="hex digest of the document's file")
@click.option("--file", "file_name", metavar="FILE", help="compute the checksum of this file")
@click.option(
    "--algorithm", type=click.Choice(("SHA-256", "SHA-512")), help="checksum algorithm (default SHA-256)"
)
@click.option("--require-login", is_flag=True, help="signers must log in with OpenID Connect to sign")
@by_option("adds it")
@with_database
def add(
    db: Database,
    doc_id: str,
    title: str,
    url: str,
    description: str,
    checksum: str | None,
    file_name: str | None,
    algorithm: str | None,
    require_login: bool,
    by: str,
) -> int:
    """`mailroom docs add DOC [--checksum HEX | --file FILE]`."""
    from worker.core.db import connect
    from worker.producers.documents.records import file_checksum
    from worker.producers.documents.signatures import add_document

    if checksum is not None and file_name is not None:
        raise click.UsageError("give --checksum or --file, not both")
    if file_name is not None:
        path = Path(file_name)
        checksum = file_checksum(path, algorithm or "SHA-256", _progress(path))
    with connect(db.url) as conn:
        doc = add_document(
            conn,
            doc_id,
            title=title,
            url=url,
            checksum=checksum,
            checksum_algorithm=(algorithm or "SHA-256") if checksum else algorithm,
            description=description,
            created_by=by,
            require_login=require_login,
        )
    checksum_text = f", {doc.checksum_algorithm} {doc.checksum}" if doc.checksum else ""
    login_text = "; signers must log in to sign" if require_login else ""
    click.echo(f"added document {doc.doc_id}{checksum_text}{login_text}")
    return 0


@docs.command(
    "expect",
    cls=Command,
    help=EXPECT,
    short_help="add an expected signer (or update their name and locale)",
)
@DOC
@click.argument("email", metavar="EMAIL")
@click.option("--name", default="", help="the signer's name, used in reminders")
@click.option("--locale", help="the signer's language (default MAILROOM_DEFAULT_LOCALE)")
@click.option("--notes", help="free-form notes")
@by_option("adds the signer")
@with_database
def expect(
    db: Database, doc_id: str, email: str, name: str, locale: str | None, notes: str | None, by: str
) -> int:
    """`mailroom docs expect DOC EMAIL`."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import expect_signer

    with connect(db.url) as conn:
        new = expect_signer(
            conn, doc_id, email, name=name, locale=locale, added_by=by, notes=notes, settings=db.settings
        )
    click.echo(f"{'expecting' if new else 'updated'} {email.strip().lower()} on {doc_id}")
    return 0


docs.add_command(sign)


@docs.command(
    "status",
    cls=Command,
    help=STATUS,
    short_help="expected, signed, completion, missing and unexpected signers",
)
@DOC
@json_option
@with_database
def status(db: Database, doc_id: str, as_json: bool) -> int:
    """`mailroom docs status DOC`."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import document_status

    with connect(db.url) as conn:
        found = document_status(conn, doc_id)
    if as_json:
        click.echo(json.dumps(_status_json(found), indent=2))
        return 0
    _print_status(found)
    return 0


def _status_json(status: Any) -> dict[str, Any]:
    return {
        "doc_id": status.document.doc_id,
        "title": status.document.title,
        "expected": len(status.expected),
        "signed": status.signed,
        "completion_pct": status.completion_pct,
        "missing": [_signer_json(s) for s in status.missing],
        "unexpected": [_signer_json(s) for s in status.unexpected],
        "signers": [_signer_json(s) for s in status.expected],
    }


def _signer_json(state: Any) -> dict[str, Any]:
    return {
        "email": state.email,
        "name": state.name,
        "signed_at": state.signed_at.isoformat() if state.signed_at else None,
        "reminders": state.reminders,
        "last_reminded_at": state.last_reminded_at.isoformat() if state.last_reminded_at else None,
    }


def _print_status(status: Any) -> None:
    from worker.core.terminal import printable

    doc, pct = status.document, status.completion_pct
    title = printable(doc.title or "(untitled)")
    click.echo(f"{doc.doc_id}: {title}" + (f"  {printable(doc.url)}" if doc.url else ""))
    click.echo(
        f"expected {len(status.expected)}  signed {status.signed}  "
        f"completion {'n/a' if pct is None else f'{pct:.2f}%'}  unexpected {len(status.unexpected)}"
    )
    for heading, rows in (("missing", status.missing), ("unexpected", status.unexpected)):
        if rows:
            click.echo(f"{heading}:")
        for s in rows:
            extra = (
                f"signed {when(s.signed_at)}"
                if s.signed_at
                else f"{s.reminders} reminder(s), last {when(s.last_reminded_at)}"
            )
            click.echo(
                f"  {printable(s.email):<40} {printable(s.name):<24} {extra}"
            )  # a signer typed the name


docs.add_command(verify)
docs.add_command(head)
docs.add_command(remove_signatures)


LINKS = """\
Print each expected signer's own link to the signing page (MAILROOM_BASE_URL/s/TOKEN), for sending
through another channel; reminders carry the same kind of link. A link is valid for
MAILROOM_SIGNING_LINK_DAYS (30) from now, for the document's current checksum only (a new checksum
supersedes it), and only for that signer; it needs MAILROOM_SECRET_KEY. Changes nothing.
Exit status 0, 2 when the document is unknown or no secret key is set.

Examples:
  mailroom docs links policy-2026
  mailroom docs links policy-2026 --json | jq -r '.[] | select(.signed_at == null) | .url'"""


@docs.command("links", cls=Command, help=LINKS, short_help="print each expected signer's signing link")
@DOC
@json_option
@with_database
def links(db: Database, doc_id: str, as_json: bool) -> int:
    """`mailroom docs links DOC`."""
    from worker.core.db import connect
    from worker.core.terminal import printable
    from worker.producers.documents.signing_links import signer_links

    with connect(db.url) as conn:
        found = signer_links(conn, doc_id, db.settings)
    if as_json:
        rows = [
            {"email": link.email, "name": link.name, "url": link.url, "expires_at": link.expires_at.isoformat(),
             "signed_at": link.signed_at.isoformat() if link.signed_at else None}
            for link in found
        ]  # fmt: skip
        click.echo(json.dumps(rows, indent=2))
        return 0
    for link in found:
        state = f"signed {when(link.signed_at)}" if link.signed_at else f"valid until {when(link.expires_at)}"
        click.echo(f"{printable(link.email):<40} {state}\n  {link.url}")  # a signer typed the address
    return 0


@docs.command(
    "remind",
    cls=Command,
    help=REMIND,
    short_help="email a reminder to every expected signer who has not signed",
)
@DOC
@click.option("--dry-run", is_flag=True, help="only say how many reminders would be queued")
@click.option("--interval", type=float, help="seconds between reminders to one signer (overrides setting)")
@by_option("sends the reminders")
@with_database
def remind(db: Database, doc_id: str, dry_run: bool, interval: float | None, by: str) -> int:
    """`mailroom docs remind DOC`: exit status 1 when a signer was skipped."""
    from datetime import timedelta

    from worker.core.db import connect
    from worker.producers.documents.signatures import reminder_candidates, send_reminders

    every = None if interval is None else timedelta(seconds=interval)
    with connect(db.url) as conn:
        if dry_run:
            count = reminder_candidates(conn, doc_id, interval=every, settings=db.settings)
            click.echo(f"{doc_id}: {count} reminder(s) would be queued")
            return 0
        result = send_reminders(conn, doc_id, interval=every, requested_by=by, settings=db.settings)
    click.echo(result.summary())
    return 1 if result.skipped else 0


@docs.command(
    "checksum",
    cls=Command,
    help=CHECKSUM,
    short_help="check a file against the document's stored checksum and record the verification",
)
@DOC
@click.option("--file", "file_name", required=True, metavar="PATH", help="the file to check")
@by_option("verifies")
@with_database
def checksum(db: Database, doc_id: str, file_name: str, by: str) -> int:
    """`mailroom docs checksum DOC --file PATH`: exit status 1 when the file does not match."""
    from worker.core.db import connect
    from worker.producers.documents.signatures import verify_checksum

    path = Path(file_name)
    with connect(db.url) as conn:
        result = verify_checksum(conn, doc_id, path, verified_by=by, progress=_progress(path))
    if result.is_valid:
        click.echo(f"{doc_id}: {path} matches ({result.algorithm} {result.calculated_checksum})")
        return 0
    click.echo(f"{doc_id}: {path} does NOT match: {result.error_message}")
    return 1


def _progress(path: Path) -> Callable[[int], None] | None:
    """Progress on standard error while a big file is hashed; None for a small one."""
    size = path.stat().st_size if path.is_file() else 0
    if size < _BIG_FILE:
        return None
    step = max(size // 10, 1)
    marks = iter(range(step, size + step, step))
    next_mark = [next(marks)]

    def report(done: int) -> None:
        if done >= next_mark[0]:
            click.echo(f"checksum: {done * 100 // size}% of {path.name}", err=True)
            next_mark[0] = next(marks, size + 1)

    return report
