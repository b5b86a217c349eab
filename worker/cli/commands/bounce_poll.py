"""`mailroom bounces poll`: fetch the DSNs and complaints of a bounce mailbox (IMAP or POP3) and take them in."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import click

from worker.cli.framework import Command, HostPort, number_option, with_settings

if TYPE_CHECKING:
    from worker.core.config import Settings

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


_MAILBOX = HostPort(port_required=False, lowest_port=1, example="mail.example.org:993")


@dataclass(frozen=True)
class PollOptions:
    """What the command line says about the mailbox and how often to poll it."""

    imap: tuple[str, int | None] | None
    pop3: tuple[str, int | None] | None
    user: str
    password_env: str | None
    password_file: str | None
    folder: str
    move_to: str | None
    starttls: bool
    insecure: bool
    cafile: str | None
    once: bool
    every: int | None
    max: int
    timeout: int

    def check(self) -> None:
        """One server, one password source, at most one security, one schedule: else exit 2."""
        pairs = (
            ("--imap", self.imap is not None, "--pop3", self.pop3 is not None, True),
            (
                "--password-env",
                self.password_env is not None,
                "--password-file",
                self.password_file is not None,
                True,
            ),
            ("--starttls", self.starttls, "--insecure", self.insecure, False),
            ("--once", self.once, "--every", self.every is not None, False),
        )
        for first, has_first, second, has_second, required in pairs:
            if has_first and has_second:
                raise click.UsageError(f"{first} and {second} cannot be given together")
            if required and not (has_first or has_second):
                raise click.UsageError(f"give {first} or {second}")


@click.command(
    "poll", cls=Command, help=POLL, short_help="fetch and process the messages of a bounce mailbox"
)
@click.option("--imap", type=_MAILBOX, help="an IMAP server")
@click.option("--pop3", type=_MAILBOX, help="a POP3 server")
@click.option("--user", required=True, metavar="USER", help="the mailbox's login")
@click.option("--password-env", metavar="VAR", help="environment variable holding the password")
@click.option("--password-file", metavar="FILE", help="file holding the password")
@click.option("--folder", default="INBOX", metavar="FOLDER", help="IMAP folder to read (default INBOX)")
@click.option("--move-to", metavar="FOLDER", help="IMAP: move processed messages there, not delete")
@click.option("--starttls", is_flag=True, help="plain port upgraded with STARTTLS/STLS")
@click.option("--insecure", is_flag=True, help="no TLS at all (127.0.0.1 and localhost only)")
@click.option("--cafile", metavar="FILE", help="verify the server against these certificates")
@click.option("--once", is_flag=True, help="poll once and exit (the default)")
@number_option("--every", metavar="SECONDS", help="poll every SECONDS until stopped")
@number_option("--max", "max_", default=100, help="messages per poll (default 100)")
@number_option("--timeout", default=30, metavar="SECONDS", help="network timeout (default 30)")
@with_settings
def poll(settings: Settings, /, max_: int, **options: Any) -> int:
    """Poll the bounce mailbox once, or every --every seconds."""
    given = PollOptions(max=max_, **options)
    given.check()
    return _poll(settings, given)


def _poll(settings: Settings, options: PollOptions) -> int:
    """Poll until done: once, or every --every seconds until SIGTERM or Ctrl-C."""
    import threading

    from worker.producers.bounces.mailbox import DatabaseIntake, MailboxError
    from worker.producers.bounces.mailbox import poll as poll_mailbox

    # The schema before anything else (another version: exit 4); a database that cannot be reached
    # yet is ridden out below like one that goes down later.
    down: _Unavailable | None = None
    intake: DatabaseIntake | None = None
    try:
        intake = _intake(settings)
    except _Unavailable as exc:
        down = exc
    mailbox = _mailbox(options)
    stop = threading.Event()
    if options.every is not None:
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
    where = f"{mailbox.protocol} {mailbox.host}:{mailbox.address[1]} {mailbox.folder}"
    try:
        while True:
            status = 0
            try:
                if down is not None:
                    raise down
                intake = intake or _intake(settings)  # checked again at each poll
                result = poll_mailbox(mailbox, intake)
                click.echo(f"bounces: {where}: {result.summary()}")
                if result.stopped:
                    raise _Unavailable(result.stopped)
            except _Unavailable as exc:
                click.echo(f"error: database unavailable, messages left for the next poll: {exc}", err=True)
                status = EX_TEMPFAIL
            except MailboxError as exc:
                click.echo(f"error: {exc}", err=True)
                status = 1
            finally:
                down = None
                if intake is not None:
                    intake.close()
            if options.every is None or stop.wait(options.every):
                return status
    except KeyboardInterrupt:
        return 0


class _Unavailable(Exception):
    """The database could not be reached: nothing taken from the mailbox."""


def _intake(settings: Settings) -> Any:
    """Ingest on the configured database, once its schema is checked.

    Not @with_database: a database that cannot be reached is ridden out (exit 75, or the next poll
    with --every); a schema missing or of another version still ends the command with exit 4."""
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


def _mailbox(options: PollOptions) -> Any:
    """The mailbox the options name, its password read from the environment or a file."""
    from worker.core.config import ConfigError
    from worker.producers.bounces.mailbox import Mailbox

    protocol: Literal["imap", "pop3"] = "imap" if options.imap else "pop3"
    address = options.imap or options.pop3
    assert address is not None  # PollOptions.check: one of them
    host, port = address
    if options.password_file:
        try:
            with open(options.password_file, encoding="utf-8") as handle:
                password = handle.read().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"cannot read {options.password_file}: {exc.strerror}") from None
    else:
        password = os.environ.get(options.password_env or "", "")
    if not password:
        source = options.password_file or f"${options.password_env}"
        raise ConfigError(f"no password in {source}")
    security: Literal["tls", "starttls", "none"] = (
        "none" if options.insecure else "starttls" if options.starttls else "tls"
    )
    return Mailbox(
        protocol=protocol,
        host=host,
        port=port,
        user=options.user,
        password=password,
        security=security,
        cafile=options.cafile,
        folder=options.folder,
        move_to=options.move_to,
        max_messages=options.max,
        timeout=options.timeout,
    )
