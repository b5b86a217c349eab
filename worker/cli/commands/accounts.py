"""`mailroom accounts ...`: create, list, suspend, unsuspend, recover and activate user accounts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from worker.cli.argtypes import positive_count
from worker.cli.table import table
from worker.core.config import Settings

DESCRIPTION = """\
User accounts and their lifecycle emails (reference 01). An account starts provisioned; creating it
issues an activation token, and the worker's lifecycle producer mails its 5-digit code and a link
(MAILROOM_BASE_URL). Consuming the token activates the account. Suspending takes an account out of
service; unsuspending returns it to active, or to provisioned if it was never activated. Tokens
expire after MAILROOM_TOKEN_TTL_SECONDS (default 900).

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


def cmd_accounts(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch `mailroom accounts ACTION`."""
    from worker.core.db import connect, database_url
    from worker.producers import lifecycle

    with connect(database_url(settings)) as conn:
        if args.accounts_command == "create":
            account_id = lifecycle.create_account(
                conn, args.email, args.login, locale=args.locale, settings=settings
            )
            print(
                f"created account {account_id} ({args.login}), provisioned;"
                " its activation token is mailed by `mailroom worker`"
            )
            return 0
        if args.accounts_command == "list":
            accounts = lifecycle.list_accounts(conn, args.status, args.limit)
            if args.json:
                print(json.dumps([_as_json(a) for a in accounts], indent=2))
                return 0
            # Whole values, the address last: a row wider than the terminal wraps instead of losing text.
            rows = [[str(a.id), a.status, a.login, _when(a.status_changed_at), a.email] for a in accounts]
            print("\n".join(table(("ID", "STATUS", "LOGIN", "CHANGED", "EMAIL"), rows, right=frozenset({0}))))
            print(f"{len(accounts)} account(s)", file=sys.stderr)
            return 0
        if args.accounts_command in ("suspend", "unsuspend", "resend"):
            ids = [lifecycle.find_account(conn, who) for who in args.accounts]
            action = {
                "suspend": lifecycle.suspend_accounts,
                "unsuspend": lifecycle.unsuspend_accounts,
            }.get(args.accounts_command)
            if action is not None:
                result = action(conn, ids)
                verb = f"{args.accounts_command}ed"
            else:
                result = lifecycle.resend_activation(conn, ids, settings)
                verb = "issued a new activation token to"
            print(result.summary(verb, "account(s)"))
            return 1 if result.skipped else 0
        if args.accounts_command == "recover":
            account_id = lifecycle.find_account(conn, args.account)
            token_id = lifecycle.request_recovery(conn, account_id, settings)
            print(
                f"password recovery token {token_id} issued to account {account_id};"
                " it is mailed by `mailroom worker`"
            )
            return 0
        # activate
        done = lifecycle.consume_token(
            conn, secret=args.secret, code=args.code, email=args.email, action="activation"
        )
        print(f"account {done.account_id} is {done.account_status}")
        return 0


def _when(moment: Any) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "-"


def _as_json(account: Any) -> dict[str, Any]:
    return {
        key: (value.isoformat() if hasattr(value, "isoformat") else value)
        for key, value in vars(account).items()
    }


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom accounts`."""
    parser = sub.add_parser(
        "accounts",
        help="user accounts: create, list, suspend, unsuspend, recover, activate",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="accounts_command", required=True, metavar="ACTION")
    raw = argparse.RawDescriptionHelpFormatter
    create = actions.add_parser(
        "create",
        help="create a provisioned account (its activation email is queued)",
        description=CREATE,
        formatter_class=raw,
    )
    create.add_argument("email", help="the account's email address")
    create.add_argument("login", help="unique login name")
    create.add_argument("--locale", default="en", help="language of its emails, e.g. en, fr (default en)")
    lst = actions.add_parser("list", help="list accounts", description=LIST, formatter_class=raw)
    lst.add_argument("--status", choices=("provisioned", "active", "suspended"), help="only this status")
    lst.add_argument("--limit", type=positive_count, default=1000, help="at most this many (default 1000)")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    for name, text, described in (
        ("suspend", "suspend accounts", SUSPEND),
        ("unsuspend", "lift a suspension (never-activated accounts return to provisioned)", UNSUSPEND),
        ("resend", "issue a fresh activation token to provisioned accounts", RESEND),
    ):
        p = actions.add_parser(name, help=text, description=described, formatter_class=raw)
        p.add_argument("accounts", nargs="+", metavar="ACCOUNT", help="email address or login")
    recover = actions.add_parser(
        "recover",
        help="request password recovery for an active account",
        description=RECOVER,
        formatter_class=raw,
    )
    recover.add_argument("account", metavar="ACCOUNT", help="email address or login")
    activate = actions.add_parser(
        "activate",
        help="consume an activation token",
        description=ACTIVATE,
        formatter_class=raw,
    )
    activate.add_argument("--code", help="the 5-digit code from the email (needs --email)")
    activate.add_argument("--email", help="the account's email address")
    activate.add_argument("--secret", metavar="HEX", help="the token's secret from the link")
    parser.set_defaults(handler=_checked)


def _checked(args: argparse.Namespace, settings: Settings) -> int:
    if args.accounts_command == "activate":
        from worker.core.validation import ValidationError

        if (args.secret is None) == (args.code is None):
            raise ValidationError("activate", "give --secret HEX, or --code CODE with --email EMAIL")
        if args.code is not None and args.email is None:
            raise ValidationError("email", "--code needs --email")
    return cmd_accounts(args, settings)
