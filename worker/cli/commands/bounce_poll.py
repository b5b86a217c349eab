"""`mailroom bounces poll`: fetch the DSNs and complaints of a bounce mailbox (IMAP or POP3) and take them in."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, Literal

from worker.cli.argtypes import positive_count
from worker.core.config import ConfigError, Settings

EX_TEMPFAIL = 75  # sysexits.h: the database could not take a message; it stays in the mailbox

POLL = """\
Fetch the messages of a bounce mailbox -- where your relay or your MTA delivers the DSNs and
complaints sent to the return path -- over IMAP (--imap) or POP3 (--pop3), process each like
`bounces ingest`, and delete it only once it is recorded, recognised as seen before, ignored or
quarantined: POP3 DELE; IMAP moved to --move-to FOLDER when given, else flagged \\Deleted and
expunged. A message that could not be stored (the database down) stays in the mailbox for the next
poll, and the poll stops there. At most --max messages are taken per poll.

The connection uses TLS with the certificate verified against the system's authorities (or
--cafile): implicit TLS on port 993 (IMAP) or 995 (POP3) by default, --starttls on 143 or 110.
--insecure (no TLS) is accepted for 127.0.0.1 and localhost only. The password is read from the
environment variable --password-env or the file --password-file, never from the command line.
--once (the default) polls once, for cron or a systemd timer; --every SECONDS keeps polling until
interrupted (Ctrl-C, SIGTERM), riding out a mailbox or database that is down.

Exit status: 0 polled (the mailbox may be empty); 1 the mailbox could not be reached, secured,
logged into or read; 2 bad usage (no password in --password-env or --password-file); 75
(EX_TEMPFAIL) the database could not take a message: it stays in the mailbox for the next poll.

Examples:
  BOUNCE_PASSWORD=... mailroom bounces poll --imap mail.example.org --user bounces \\
      --password-env BOUNCE_PASSWORD --move-to Processed
  mailroom bounces poll --pop3 pop.example.org:995 --user bounces --password-file /etc/mailroom/pop
  mailroom bounces poll --imap mail.example.org:143 --starttls --user bounces \\
      --password-env BOUNCE_PASSWORD --every 300 --max 500
"""


def cmd_poll(args: argparse.Namespace, settings: Settings) -> int:
    """Poll the bounce mailbox once, or every --every seconds."""
    import threading

    from worker.producers.bounces.mailbox import DatabaseIntake, MailboxError, poll

    mailbox = _mailbox(args)
    stop = threading.Event()
    if args.every is not None:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    where = f"{mailbox.protocol} {mailbox.host}:{mailbox.address[1]} {mailbox.folder}"
    intake: DatabaseIntake | None = None
    try:
        while True:
            status = 0
            try:
                # Checked at each poll: a database down at start is ridden out like one down later.
                intake = intake or _intake(settings)
                result = poll(mailbox, intake)
                print(f"bounces: {where}: {result.summary()}", flush=True)
                if result.stopped:
                    raise _Unavailable(result.stopped)
            except _Unavailable as exc:
                print(f"error: database unavailable, messages left for the next poll: {exc}", file=sys.stderr)
                status = EX_TEMPFAIL
            except MailboxError as exc:
                print(f"error: {exc}", file=sys.stderr, flush=True)
                status = 1
            finally:
                if intake is not None:
                    intake.close()
            if args.every is None or stop.wait(args.every):
                return status
    except KeyboardInterrupt:
        return 0


class _Unavailable(Exception):
    """The database could not be reached: nothing taken from the mailbox."""


def _intake(settings: Settings) -> Any:
    """Ingest on the configured database, once its schema is checked."""
    import psycopg

    from worker.core.db import checked_url
    from worker.core.return_path import bounce_key
    from worker.producers.bounces.mailbox import DatabaseIntake

    try:
        return DatabaseIntake(
            checked_url(settings), bounce_key(settings), bounce_domain=settings.bounce_domain
        )
    except psycopg.Error as exc:
        raise _Unavailable(str(exc).splitlines()[0]) from None


def _mailbox(args: argparse.Namespace) -> Any:
    """The mailbox the options name, its password read from the environment or a file."""
    from worker.producers.bounces.mailbox import Mailbox

    protocol: Literal["imap", "pop3"] = "imap" if args.imap else "pop3"
    host, port = args.imap or args.pop3
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as handle:
                password = handle.read().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"cannot read {args.password_file}: {exc.strerror}") from None
    else:
        password = os.environ.get(args.password_env, "")
    if not password:
        source = args.password_file or f"${args.password_env}"
        raise ConfigError(f"no password in {source}")
    security: Literal["tls", "starttls", "none"] = (
        "none" if args.insecure else "starttls" if args.starttls else "tls"
    )
    return Mailbox(
        protocol=protocol,
        host=host,
        port=port,
        user=args.user,
        password=password,
        security=security,
        cafile=args.cafile,
        folder=args.folder,
        move_to=args.move_to,
        max_messages=args.max,
        timeout=args.timeout,
    )


def _host_port(text: str) -> tuple[str, int | None]:
    host, colon, port = text.rpartition(":")
    if not colon or "]" in port:  # no port, or a bare [IPv6] address
        return text.strip("[]"), None
    if not host.strip("[]") or not port.isdigit() or not 0 < int(port) <= 65535:
        raise argparse.ArgumentTypeError(
            f"expected HOST or HOST:PORT, e.g. mail.example.org:993, not {text!r}"
        )
    return host.strip("[]"), int(port)


def add_poll(actions: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom bounces poll`."""
    poll = actions.add_parser(
        "poll",
        help="fetch and process the messages of a bounce mailbox",
        description=POLL,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = poll.add_mutually_exclusive_group(required=True)
    where.add_argument("--imap", type=_host_port, metavar="HOST[:PORT]", help="an IMAP server")
    where.add_argument("--pop3", type=_host_port, metavar="HOST[:PORT]", help="a POP3 server")
    poll.add_argument("--user", required=True, metavar="USER", help="the mailbox's login")
    secret = poll.add_mutually_exclusive_group(required=True)
    secret.add_argument("--password-env", metavar="VAR", help="environment variable holding the password")
    secret.add_argument("--password-file", metavar="FILE", help="file holding the password")
    poll.add_argument(
        "--folder", default="INBOX", metavar="FOLDER", help="IMAP folder to read (default INBOX)"
    )
    poll.add_argument("--move-to", metavar="FOLDER", help="IMAP: move processed messages there, not delete")
    tls = poll.add_mutually_exclusive_group()
    tls.add_argument("--starttls", action="store_true", help="plain port upgraded with STARTTLS/STLS")
    tls.add_argument("--insecure", action="store_true", help="no TLS at all (127.0.0.1 and localhost only)")
    poll.add_argument("--cafile", metavar="FILE", help="verify the server against these certificates")
    when = poll.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="poll once and exit (the default)")
    when.add_argument(
        "--every", type=positive_count, metavar="SECONDS", help="poll every SECONDS until stopped"
    )
    poll.add_argument(
        "--max", type=positive_count, default=100, metavar="N", help="messages per poll (default 100)"
    )
    poll.add_argument(
        "--timeout", type=positive_count, default=30, metavar="SECONDS", help="network timeout (default 30)"
    )
    poll.set_defaults(handler=cmd_poll)
