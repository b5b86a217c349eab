"""`mailroom senders check`: the DNS of each sender's domains (SPF, DKIM, DMARC, MX) and TLS at its relay."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from worker.cli.framework import Command, Database, json_option, with_database

if TYPE_CHECKING:
    from worker.ops.dns_checks import SenderCheck

CHECK = """\
Check in DNS whether a sender account's mail can land: for its From domain and its return-path
(bounce) domain, an SPF record that is valid, within the 10-lookup limit and authorises the
relay's addresses; the DKIM key published at SELECTOR._domainkey.DOMAIN and matching the stored
private key; a DMARC record, its policy and whether DKIM or the return path aligns with the From
domain; an MX for the return-path domain; and whether the relay offers TLS (STARTTLS in its EHLO
reply, or TLS at once on an implicit-TLS port). Each finding is stored: `mailroom health` warns
about it (and fails when DKIM does not verify), `senders list` and the console's Senders screen
show it. The worker runs the same check at every maintenance run. Resolvers:
MAILROOM_DNS_SERVERS (the system's when unset); DNS that does not answer within
MAILROOM_DNS_TIMEOUT_SECONDS is a finding, not an error. Reserved example domains (example.com,
.test, ...) are not checked. --no-relay skips the connection to the relay (DNS only).
Exit status 0 when nothing worse than information was found, 1 when a warning or a problem was (or
there is no such account).

Examples:
  mailroom senders check
  mailroom senders check transactional-1
  MAILROOM_DNS_SERVERS=1.1.1.1,8.8.8.8 mailroom senders check --json | jq '.[].standing'"""

MARK = {"ok": "ok", "info": "info", "warning": "WARNING", "problem": "PROBLEM"}


@click.command(
    "check", cls=Command, help=CHECK, short_help="check senders' SPF, DKIM, DMARC, MX and relay TLS"
)
@click.argument("name", required=False)
@click.option("--no-relay", is_flag=True, help="do not connect to the relay (DNS only)")
@json_option
@with_database
def check(db: Database, name: str | None, no_relay: bool, as_json: bool) -> int:
    """`mailroom senders check [NAME] [--no-relay] [--json]`."""
    from worker.core.db import connect
    from worker.ops.dns_checks import run_checks

    with connect(db.url, autocommit=True) as conn:
        try:
            checks = run_checks(conn, db.settings, name, relay=not no_relay)
        except LookupError as exc:
            click.echo(f"error: {str(exc).strip(chr(34))}", err=True)
            return 1
    if as_json:
        click.echo(json.dumps([c.as_dict() for c in checks], indent=2))
    else:
        for c in checks:
            print_check(c)
    if not checks:
        click.echo("no sender accounts to check", err=True)
    worst = {f.severity for c in checks for f in c.findings}
    return 1 if worst & {"warning", "problem"} else 0


def print_check(check: SenderCheck, *, only_bad: bool = False) -> None:
    """One sender's findings for people: a title line, then one line per finding (worst first)."""
    order = {"problem": 0, "warning": 1, "info": 2, "ok": 3}
    findings = sorted(check.findings, key=lambda f: order.get(f.severity, 4))
    if only_bad:
        findings = [f for f in findings if f.severity in ("warning", "problem")]
    click.echo(f"{check.sender}: {check.standing} (checked {check.checked_at:%Y-%m-%d %H:%M:%S %Z})")
    for f in findings:
        click.echo(f"  {MARK.get(f.severity, f.severity):<7} {f.code}: {f.detail}")
