"""`mailroom accounts ...`: create, list, suspend, unsuspend, recover and activate user accounts."""

from __future__ import annotations

import json
from typing import Any

import click

from worker.cli.framework import Command, Database, Group, json_option, number_option, with_database

DESCRIPTION = """\
User accounts and the emails of their lifecycle (activation and password recovery). An account
starts provisioned; creating it issues an activation token, and the worker's lifecycle producer
mails its 5-digit code and a link (MAILROOM_BASE_URL). Consuming the token activates the account.
Suspending takes an account out of service; unsuspending returns it to active, or to provisioned
if it was never activated. Tokens expire after MAILROOM_TOKEN_TTL_SECONDS (default 900).

Examples:
  mailroom accounts create ada@example.com ada
  mailroom accounts list --status provisioned
  mailroom accounts activate --code 48213 --email ada@example.com"""

CREATE = """\
Create a user account, provisioned, and issue its activation token in the same transaction; the
worker's lifecycle producer then mails the 5-digit code and link. Other accounts are left alone.
Exit status 0 when created, 2 when the address or login is invalid or already taken.

Example:
  mailroom accounts create ada@example.com ada --locale fr"""

LIST = """\
List accounts, oldest first, with status, login, email address and when the status last changed.
Logins and addresses are printed whole: a row wider than the terminal wraps, or use --json.
The count goes to standard error, so standard output holds only the table. Changes nothing.
Exit status 0.

Examples:
  mailroom accounts list
  mailroom accounts list --status suspended --json | jq -r '.[].email'"""

SUSPEND = """\
Suspend accounts (by email address or login): they are taken out of service and get no lifecycle
email. Accounts already suspended are left alone and listed. Exit status 1 when any was skipped.

Example:
  mailroom accounts suspend ada@example.com grace"""

UNSUSPEND = """\
Lift a suspension: the account returns to active, or to provisioned if it was never activated.
Accounts that are not suspended are left alone and listed. Exit status 1 when any was skipped.

Example:
  mailroom accounts unsuspend ada"""

RESEND = """\
Issue a fresh activation token to provisioned accounts (older unused tokens stop working); the
worker mails it. Active or suspended accounts are left alone and listed. Exit status 1 when any
was skipped.

Example:
  mailroom accounts resend ada@example.com"""

RECOVER = """\
Request password recovery for an active account: a recovery token is issued and the worker mails
it. The account's status is left as it is. Exit status 0, 2 when the account is not active.

Example:
  mailroom accounts recover ada@example.com"""

ACTIVATE = """\
Activate an account with the 5-digit code and its email address, or with the token's secret
(64 hex digits, from the link). Expired, used or another account's tokens are refused and change
nothing. Exit status 0 when activated, 2 when the token is refused.

Examples:
  mailroom accounts activate --code 48213 --email ada@example.com
  mailroom accounts activate --secret 9f2c...e1"""

ACCOUNTS = click.argument("accounts", nargs=-1, required=True, metavar="ACCOUNT...")


@click.group(cls=Group, help=DESCRIPTION)
def accounts() -> None:
    """`mailroom accounts ACTION`."""


@accounts.command(
    "create",
    cls=Command,
    help=CREATE,
    short_help="create a provisioned account (its activation email is queued)",
)
@click.argument("email")
@click.argument("login")
@click.option("--locale", default="en", help="language of its emails, e.g. en, fr (default en)")
@with_database
def create(db: Database, email: str, login: str, locale: str) -> int:
    """`mailroom accounts create EMAIL LOGIN [--locale L]`."""
    from worker.core.db import connect
    from worker.producers import lifecycle

    with connect(db.url) as conn:
        account_id = lifecycle.create_account(conn, email, login, locale=locale, settings=db.settings)
    click.echo(
        f"created account {account_id} ({login}), provisioned;"
        " its activation token is mailed by `mailroom worker`"
    )
    return 0


@accounts.command("list", cls=Command, help=LIST, short_help="list accounts")
@click.option("--status", type=click.Choice(("provisioned", "active", "suspended")), help="only this status")
@number_option("--limit", default=1000, help="at most this many (default 1000)")
@json_option
@with_database
def list_accounts(db: Database, status: str | None, limit: int, as_json: bool) -> int:
    """`mailroom accounts list [--status S] [--limit N] [--json]`."""
    from worker.cli.table import table
    from worker.core.db import connect
    from worker.producers import lifecycle

    with connect(db.url) as conn:
        found = lifecycle.list_accounts(conn, status, limit)
    if as_json:
        click.echo(json.dumps([_as_json(a) for a in found], indent=2))
        return 0
    # Whole values, the address last: a row wider than the terminal wraps instead of losing text.
    rows = [[str(a.id), a.status, a.login, _when(a.status_changed_at), a.email] for a in found]
    click.echo("\n".join(table(("ID", "STATUS", "LOGIN", "CHANGED", "EMAIL"), rows, right=frozenset({0}))))
    click.echo(f"{len(found)} account(s)", err=True)
    return 0


@accounts.command("suspend", cls=Command, help=SUSPEND, short_help="suspend accounts")
@ACCOUNTS
@with_database
def suspend(db: Database, accounts: tuple[str, ...]) -> int:
    """`mailroom accounts suspend ACCOUNT...`."""
    return _change(db, "suspend", accounts)


@accounts.command(
    "unsuspend",
    cls=Command,
    help=UNSUSPEND,
    short_help="lift a suspension (never-activated accounts return to provisioned)",
)
@ACCOUNTS
@with_database
def unsuspend(db: Database, accounts: tuple[str, ...]) -> int:
    """`mailroom accounts unsuspend ACCOUNT...`."""
    return _change(db, "unsuspend", accounts)


@accounts.command(
    "resend",
    cls=Command,
    help=RESEND,
    short_help="issue a fresh activation token to provisioned accounts",
)
@ACCOUNTS
@with_database
def resend(db: Database, accounts: tuple[str, ...]) -> int:
    """`mailroom accounts resend ACCOUNT...`."""
    return _change(db, "resend", accounts)


def _change(db: Database, action: str, who: tuple[str, ...]) -> int:
    """Suspend, unsuspend or resend to accounts by email or login; exit status 1 when any was skipped."""
    from worker.core.db import connect
    from worker.producers import lifecycle

    with connect(db.url) as conn:
        ids = [lifecycle.find_account(conn, one) for one in who]
        if action == "suspend":
            result, verb = lifecycle.suspend_accounts(conn, ids), "suspended"
        elif action == "unsuspend":
            result, verb = lifecycle.unsuspend_accounts(conn, ids), "unsuspended"
        else:
            result = lifecycle.resend_activation(conn, ids, db.settings)
            verb = "issued a new activation token to"
    click.echo(result.summary(verb, "account(s)"))
    return 1 if result.skipped else 0


@accounts.command(
    "recover",
    cls=Command,
    help=RECOVER,
    short_help="request password recovery for an active account",
)
@click.argument("account", metavar="ACCOUNT")
@with_database
def recover(db: Database, account: str) -> int:
    """`mailroom accounts recover ACCOUNT`."""
    from worker.core.db import connect
    from worker.producers import lifecycle

    with connect(db.url) as conn:
        account_id = lifecycle.find_account(conn, account)
        token_id = lifecycle.request_recovery(conn, account_id, db.settings)
    click.echo(
        f"password recovery token {token_id} issued to account {account_id}; it is mailed by `mailroom worker`"
    )
    return 0


@accounts.command("activate", cls=Command, help=ACTIVATE, short_help="consume an activation token")
@click.option("--code", help="the 5-digit code from the email (needs --email)")
@click.option("--email", help="the account's email address")
@click.option("--secret", metavar="HEX", help="the token's secret from the link")
@with_database
def activate(db: Database, code: str | None, email: str | None, secret: str | None) -> int:
    """`mailroom accounts activate --code CODE --email EMAIL | --secret HEX`."""
    from worker.core.db import connect
    from worker.core.validation import ValidationError
    from worker.producers import lifecycle

    if (secret is None) == (code is None):
        raise ValidationError("activate", "give --secret HEX, or --code CODE with --email EMAIL")
    if code is not None and email is None:
        raise ValidationError("email", "--code needs --email")
    with connect(db.url) as conn:
        done = lifecycle.consume_token(conn, secret=secret, code=code, email=email, action="activation")
    click.echo(f"account {done.account_id} is {done.account_status}")
    return 0


def _when(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "-"


def _as_json(account: Any) -> dict[str, Any]:
    return {
        key: (value.isoformat() if hasattr(value, "isoformat") else value)
        for key, value in vars(account).items()
    }
