"""`mailroom bounces ingest|receive|poll|list|quarantine`: take in DSNs and complaints sent to VERP return paths."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC
from typing import TYPE_CHECKING

import click

from worker.cli.commands.bounce_list import list_bounces
from worker.cli.commands.bounce_poll import poll
from worker.cli.framework import (
    Command,
    Database,
    Group,
    HostPort,
    json_option,
    max_connections_option,
    number_option,
    with_database,
    with_settings,
)
from worker.cli.metrics_option import metrics_listen_option, serve_metrics

if TYPE_CHECKING:
    from worker.core.config import Settings
    from worker.producers.bounces.receiver import SenderDomains

EX_TEMPFAIL = 75  # sysexits.h: Postfix, Exim and Sendmail keep the message and retry the pipe later
TEN_MIB = 10 * 1024 * 1024
INGEST = """\
Process one message -- a delivery status notification (RFC 3464), a complaint (RFC 5965 ARF) or
a plain-text bounce -- read from FILE, or from standard input when FILE is - or missing, as an MTA
pipe delivers it. The email is found by the VERP token of the address the report was sent to
(--envelope-recipient, else $ORIGINAL_RECIPIENT or $RECIPIENT as Postfix's local and pipe
delivery set them, else X-Original-To, Delivered-To and To) or, for an email sent without a VERP
return path, by the original's signed Message-ID; it acts only for the recipient its token names.
A permanent failure turns the email `bounced` and puts the address on the bounce list (hard); a
transient one records a soft bounce; a complaint suppresses the address at once and notifies the
console. A report that cannot be read or trusted (a forged token, no known email, another
recipient than its token names, over the parser's budget, refused by the database) is kept in the
quarantine: `mailroom bounces quarantine`. The same report again changes nothing.

Exit status: 0 the message was recorded, recognised as seen before, ignored (a success report) or
quarantined -- so an MTA never bounces a bounce; 2 bad usage (no such FILE); 75 (EX_TEMPFAIL) the
database cannot be reached: the MTA keeps the message and tries again.

Examples:
  mailroom bounces ingest dsn.eml
  mailroom bounces ingest --envelope-recipient "$RECIPIENT" - < dsn.eml
  # /etc/aliases on the MX of the bounce domain (with recipient_delimiter = +):
  bounces: "|/usr/local/bin/mailroom bounces ingest"
"""

RECEIVE = """\
Run an SMTP server that takes bounces and complaints for the bounce domain(s) -- point the bounce
domain's MX record at it (port 25, or a port your MTA forwards to). Mail for any other domain is
refused (550 5.7.1 relay denied): it is never an open relay. Messages larger than --max-bytes are
refused (advertised with SIZE); a client sending more than --rate messages a minute (bursts of
--burst) is told to try later (450). Each message is processed like `bounces ingest` and answered
one neutral 250 once taken in (recorded, duplicate, ignored or quarantined alike: the reply tells a
prober nothing), 451 when the database cannot take it (the sender retries). A client network (an
IPv4 address or IPv6 /64) holding --max-connections-per-client connections is refused 421 at
connect; a session idle for MAILROOM_RECEIVER_TIMEOUT_SECONDS (60), sending more than
MAILROOM_RECEIVER_MAX_NON_MAIL_COMMANDS (10) of one of NOOP, RSET, EHLO... or more than
MAILROOM_RECEIVER_MAX_MESSAGES_PER_SESSION (20) messages is closed (421). It runs until
interrupted (Ctrl-C, SIGTERM).

The domains are --domain (repeatable), else MAILROOM_BOUNCE_DOMAIN and every sender account's own
bounce domain (`mailroom senders edit NAME --bounce-domain DOMAIN`), read again every 30 s so a
sender added meanwhile is served. Return paths are checked with MAILROOM_SECRET_KEY: run the
receiver with the same key as the workers. --metrics-listen serves Prometheus metrics (reports by
kind and outcome), /healthz and /readyz on a port of its own, never the SMTP one.

Exit status: 0 stopped; 2 bad usage (no bounce domain, bad --listen or --metrics-listen, address
in use).

Examples:
  MAILROOM_BOUNCE_DOMAIN=bounces.example.org mailroom bounces receive --listen 0.0.0.0:25
  mailroom bounces receive --listen 127.0.0.1:2526 --domain bounces.example.org --max-bytes 5000000
  mailroom bounces receive --listen 0.0.0.0:25 --metrics-listen 127.0.0.1:9466
"""

BOUNCES = """\
Take in the delivery status notifications (RFC 3464) and complaints (RFC 5965 ARF) that relays and
mailbox providers send to each email's VERP return path (MAILROOM_BOUNCE_DOMAIN): from an MTA pipe
or a file (ingest), as an SMTP server for the bounce domain (receive), from a mailbox over IMAP or
POP3 (poll); list what was recorded (list) and what could not be used (quarantine). A permanent
failure turns the email bounced and lists the address; a complaint suppresses it at once and goes
into the administrators' digest (MAILROOM_ADMIN_EMAILS, sent by the worker). Nothing here sends
email.

Examples:
  mailroom bounces receive --listen 0.0.0.0:25
  mailroom bounces ingest dsn.eml
  mailroom bounces poll --imap mail.example.org --user bounces --password-env BOUNCE_PW
  mailroom bounces list --kind complaint
  mailroom bounces quarantine --json
"""

QUARANTINE = """\
List the messages the bounce intake kept because it could not read them or could not trust them
(no valid return-path token, no email of Mailroom named, a forged token), newest first: id, when
(UTC), size, the envelope recipient (masked) and why. Each is stored once, its first 64 KiB kept;
the quarantine is bounded (MAILROOM_QUARANTINE_MAX_BYTES, _CLIENT_DAILY_MAX, _RETENTION_DAYS).
--show ID writes the kept bytes of one message to standard output: unchanged into a file or a
pipe; on a terminal with control characters shown as escapes (\\x1b), as the list shows them.

Exit status: 0 listed; 1 --show names no quarantined message.

Examples:
  mailroom bounces quarantine
  mailroom bounces quarantine --json | jq '.[].reason'
  mailroom bounces quarantine --show 12 > message.eml
"""


@click.group(cls=Group, help=BOUNCES)
def bounces() -> None:
    """`mailroom bounces`: its actions below."""


@bounces.command(
    "ingest", cls=Command, help=INGEST, short_help="process one message from a file or an MTA pipe"
)
@click.argument("file", default="-", required=False, metavar="[FILE]")
@click.option("--envelope-recipient", metavar="ADDRESS", help="the address the MTA delivered it to")
@number_option("--max-bytes", default=TEN_MIB, help="read at most N bytes (default 10 MiB)")
@with_settings
def ingest(settings: Settings, file: str, envelope_recipient: str | None, max_bytes: int) -> int:
    """Process one message from a file or standard input."""
    import psycopg

    from worker.core.db import checked_url
    from worker.core.return_path import bounce_key
    from worker.core.terminal import printable
    from worker.producers.bounces.intake import ingest as ingest_report
    from worker.producers.bounces.intake import keep_in_quarantine

    envelope = envelope_recipient or os.environ.get("ORIGINAL_RECIPIENT") or os.environ.get("RECIPIENT")
    recipients = [envelope] if envelope else []
    key = bounce_key(settings)
    try:
        # The schema first, but not by @with_database: a database that cannot be reached must
        # exit 75 so the MTA keeps the message, not 3 (a missing schema still exits 4).
        url = checked_url(settings)
        raw = _read(file, max_bytes)
        with psycopg.connect(url, autocommit=True) as conn:
            if len(raw) > max_bytes:
                reason = f"larger than --max-bytes {max_bytes}"
                outcome = keep_in_quarantine(conn, raw, reason, recipients, client="pipe")
            else:
                domain = settings.bounce_domain
                outcome = ingest_report(conn, raw, key, recipients, client="pipe", bounce_domain=domain)
    except psycopg.Error as exc:
        click.echo(f"error: message not stored, try again later: {str(exc).splitlines()[0]}", err=True)
        return EX_TEMPFAIL
    click.echo(printable(f"bounces: {outcome.verdict}: {outcome.detail}"))
    return 0


def _read(path: str, max_bytes: int) -> bytes:
    """The message, at most `max_bytes` + 1 (a longer one is quarantined cut, never read whole)."""
    from worker.core.config import ConfigError

    if path == "-":
        return sys.stdin.buffer.read(max_bytes + 1)
    try:
        with open(path, "rb") as handle:
            return handle.read(max_bytes + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None


@bounces.command("receive", cls=Command, help=RECEIVE, short_help="run the SMTP server for the bounce domain")
@click.option(
    "--listen",
    type=HostPort(port_required=True, lowest_port=0, example="0.0.0.0:25"),
    required=True,
    help="address to listen on",
)
@click.option("--domain", "domains", multiple=True, metavar="DOMAIN", help="a bounce domain (repeatable)")
@number_option("--max-bytes", default=TEN_MIB, help="largest message (default 10 MiB)")
@number_option("--rate", default=60, help="messages a minute per client (default 60)")
@number_option("--burst", default=20, help="messages at once per client (default 20)")
@max_connections_option("MAILROOM_RECEIVER_MAX_CONNECTIONS_PER_CLIENT", 20)
@metrics_listen_option(9466)
@with_database
def receive(
    db: Database,
    listen: tuple[str, int],
    domains: tuple[str, ...],
    max_bytes: int,
    rate: int,
    burst: int,
    max_connections_per_client: int | None,
    metrics_listen: tuple[str, int] | None,
) -> int:
    """Serve until interrupted."""
    import asyncio
    import contextlib
    import signal
    from dataclasses import replace

    from worker.core.return_path import bounce_key
    from worker.producers.bounces.counting import counted
    from worker.producers.bounces.receiver import (
        BounceHandler,
        BounceServer,
        RateLimiter,
        ReceiverLimits,
        database_processor,
    )

    settings = db.settings
    given, sender_domains = _bounce_domains(db, domains)
    host, port = listen
    listener = serve_metrics(metrics_listen, listen, db.url, settings, "bounce-receiver")
    handler = BounceHandler(
        counted(database_processor(db.url, bounce_key(settings), settings.bounce_domain)),
        given,
        RateLimiter(rate, burst, clients=settings.receiver_rate_clients),
        sender_domains,
    )
    limits = ReceiverLimits.from_settings(settings)
    if max_connections_per_client is not None:
        limits = replace(limits, connections_per_client=max_connections_per_client)
    server = BounceServer(handler, host, port, max_bytes=max_bytes, limits=limits)

    async def serve() -> None:
        bound = await server.start()
        served = given | (sender_domains.domains if sender_domains else frozenset())
        more = " and sender accounts' bounce domains added later" if sender_domains else ""
        click.echo(f"bounces: receiving for {', '.join(sorted(served))}{more} on {host}:{bound}")
        stop = asyncio.Event()
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows: Ctrl-C only
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        try:
            await stop.wait()
        finally:
            await server.close()
            if listener is not None:
                listener.close()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


def _bounce_domains(db: Database, domains: tuple[str, ...]) -> tuple[frozenset[str], SenderDomains | None]:
    """The domains --domain names; without it MAILROOM_BOUNCE_DOMAIN and every sender account's own."""
    import asyncio

    from worker.core.config import ConfigError
    from worker.producers.bounces.receiver import SenderDomains, database_sender_domains

    given = frozenset(d.strip().lower().rstrip(".") for d in (domains or [db.settings.bounce_domain or ""]))
    given = frozenset(d for d in given if d)
    sender_domains = None if domains else SenderDomains(database_sender_domains(db.url))
    if not given and not (sender_domains and asyncio.run(sender_domains.get())):
        raise ConfigError(
            "no bounce domain: set MAILROOM_BOUNCE_DOMAIN, a sender's --bounce-domain, or pass --domain"
        )
    return given, sender_domains


bounces.add_command(poll)
bounces.add_command(list_bounces)


@bounces.command(
    "quarantine", cls=Command, help=QUARANTINE, short_help="list the messages that could not be used"
)
@number_option("--limit", default=50, help="show at most N (default 50)")
@number_option("--show", metavar="ID", help="write the kept bytes of message ID")
@json_option
@with_database
def quarantine(db: Database, limit: int, show: int | None, as_json: bool) -> int:
    """List the quarantine, or write one message's bytes."""
    from worker.core.db import connect
    from worker.core.masking import mask_address
    from worker.core.terminal import printable, printable_lines
    from worker.producers.bounces.quarantine import list_quarantine, quarantined_message

    with connect(db.url) as conn:
        if show is not None:
            raw = quarantined_message(conn, show)
            if raw is None:
                click.echo(f"no quarantined message {show}", err=True)
                return 1
            if sys.stdout.isatty():  # its sender wrote it: no escape sequence reaches the terminal
                sys.stdout.write(printable_lines(raw.decode("utf-8", errors="replace")))
            else:
                sys.stdout.buffer.write(raw)
            return 0
        rows = list_quarantine(conn, limit)
    items = [
        {
            "id": r["id"],
            "received_at": r["received_at"].astimezone(UTC).isoformat(),
            "size": r["raw_size"],
            "kept": r["kept"],
            "envelope_recipient": mask_address(r["envelope_recipient"]) if r["envelope_recipient"] else None,
            "reason": r["reason"],
        }
        for r in rows
    ]
    if as_json:
        click.echo(json.dumps(items, indent=2))
        return 0
    if not items:
        click.echo("the bounce quarantine is empty")
    for item in items:
        click.echo(
            f"{item['id']:>6}  {item['received_at'][:19].replace('T', ' ')}  {item['size']:>8} B  "
            f"{printable(item['envelope_recipient'] or '-')}  {printable(item['reason'])}"
        )
    return 0
