"""`mailroom senders`: add, edit, list, pause, resume, suspend and remove sender accounts."""

from __future__ import annotations

import argparse
import getpass
import json
import pathlib
import sys
from typing import Any

from worker.cli.commands import senders_help as help_text
from worker.cli.commands.sender_input import (
    add_settings_arguments,
    ask,
    doubtful_choices,
    interactive,
    password_from,
    password_given,
    plaintext_login_warning,
    settings_changes,
)
from worker.cli.commands.sender_oauth import (
    add_auth_arguments,
    auth_changes,
    complete_oauth_add,
    oauth_secret_given,
    oauth_secrets_from,
)
from worker.cli.table import table
from worker.core.config import ConfigError, Settings

RAW = argparse.RawDescriptionHelpFormatter

AUTH_OF = "SELECT auth_type FROM mailroom.sender_accounts WHERE name = %s"
SETTINGS_OF = """
SELECT smtp_host, smtp_port, smtp_security, smtp_username, allow_plaintext_login
FROM mailroom.sender_accounts WHERE id = %s
"""


def _url(settings: Settings) -> str:
    from worker.core.db import checked_url

    return checked_url(settings)


def cmd_senders(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch `mailroom senders ACTION`."""
    handler = {"add": _add, "edit": _edit, "list": _list, "remove": _remove}.get(args.senders_command)
    return (handler or _set_status)(args, settings)


def _add(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.ops.sender_auth import OAuthSecrets
    from worker.ops.senders import SenderSpec, add_sender

    box = secret_box(settings)  # before any prompt: a missing key is said before a password is typed
    oauth = None
    if args.auth == "oauth2":
        oauth = OAuthSecrets(*complete_oauth_add(args, interactive()))
    elif oauth_secret_given(args):
        raise ConfigError("OAuth2 secrets are for an oauth2 sender: add --auth oauth2")
    password = _complete_add(args)
    login = args.auth == "password"
    warnings = doubtful_choices(args.host, args.port, args.security, password, check_login=login)
    warnings += plaintext_login_warning(args.host, args.security, args.username, args.allow_plaintext_login)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    spec = SenderSpec(
        name=args.name,
        from_email=args.from_email,
        from_name=args.from_name,
        smtp_host=args.host,
        smtp_port=args.port,
        smtp_security=args.security,
        smtp_username=args.username,
        daily_limit=args.daily_limit,
        warmup_stage=args.warmup_stage,
        warmup_limit=args.warmup_limit,
        send_delay_ms=args.send_delay_ms,
        max_connections=args.max_connections,
        dkim_domain=args.dkim_domain,
        dkim_selector=args.dkim_selector,
        connect_timeout_seconds=args.connect_timeout,
        command_timeout_seconds=args.command_timeout,
        data_timeout_seconds=args.data_timeout,
        allow_plaintext_login=args.allow_plaintext_login,
        **auth_changes(args),
    )
    dkim_key = _dkim_key(args.dkim_key_file)
    with connect(_url(settings)) as conn:
        sender_id = add_sender(conn, spec, password, box, dkim_key, oauth=oauth)
    print(f"added sender account {args.name} (id {sender_id})")
    if dkim_key is not None:
        from worker.core.dkim import dns_record, normalise_private_key

        print(f"DKIM: publish this TXT record at {args.dkim_selector}._domainkey.{args.dkim_domain}:")
        print(dns_record(normalise_private_key(dkim_key)))
    return 0


def _complete_add(args: argparse.Namespace) -> str | None:
    """Ask on a terminal for the security, port and login left out; default them (warned) otherwise."""
    asking = interactive()
    if args.security is None:
        if asking:
            args.security = ask("Security (none, starttls, tls)", "starttls", ("none", "starttls", "tls"))
        else:
            args.security = "starttls"
            print("warning: no --security given: using starttls", file=sys.stderr)
    default_port = 465 if args.security == "tls" else 587
    if args.port is None and asking:
        args.port = int(ask("SMTP port", str(default_port), None, digits=True))
    elif args.port is None:
        args.port = default_port
        what = "implicit TLS" if default_port == 465 else "submission"
        print(f"warning: no --port given: using {default_port} ({what})", file=sys.stderr)
    password = password_from(args)
    if args.auth == "oauth2":
        return password  # logs in with tokens (a password given is refused when stored)
    if asking and args.username is None and password is None:
        args.username = ask("SMTP username (Enter for no login)", "", None) or None
    if asking and args.username and password is None:
        password = getpass.getpass(f"SMTP password for {args.username}@{args.host}: ") or None
    if args.username and password is None:
        raise ConfigError(
            "--username needs a password: give --password-env VAR or --password-file PATH "
            "(or run on a terminal to be asked)"
        )
    return password


def _dkim_key(path: pathlib.Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the DKIM key file: {exc}") from None


def _logs_in_with_password(settings: Settings, name: str) -> bool:
    """Whether the account logs in with a password (an oauth2 account is never asked for one)."""
    from worker.core.db import connect

    with connect(_url(settings)) as conn:
        row = conn.execute(AUTH_OF, (name,)).fetchone()
    return row is None or row["auth_type"] == "password"


def _edit(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.ops.sender_auth import OAuthSecrets
    from worker.ops.senders import edit_sender

    if args.no_login and (args.username or password_given(args)):
        raise ConfigError("--no-login removes the username and password: give it alone, without them")
    changes = {**settings_changes(args), **auth_changes(args)}
    password = password_from(args)
    if (
        args.username
        and password is None
        and interactive()
        and args.auth is None
        and _logs_in_with_password(settings, args.name)
    ):
        password = (
            getpass.getpass(f"SMTP password for {args.username} (Enter to keep the stored one): ") or None
        )
    secrets = oauth_secrets_from(args, ask=False)
    oauth = OAuthSecrets(*secrets) if secrets != (None, None) else None
    if not changes and password is None and oauth is None and not args.no_login:
        raise ConfigError("nothing to change: give at least one option (see `mailroom senders edit --help`)")
    box = secret_box(settings) if password is not None or oauth is not None else None
    with connect(_url(settings)) as conn:
        try:
            done = edit_sender(
                conn,
                args.name,
                changes,
                box,
                password=password,
                drop_password=args.no_login,
                oauth=oauth,
                expected_version=args.version,
            )
        except LookupError as exc:
            print(f"error: {str(exc).strip(chr(34))}", file=sys.stderr)
            return 1
        except ValueError as exc:
            if getattr(exc, "field", None) == "version":
                print(f"error: {exc}", file=sys.stderr)
                return 1
            raise
        row = conn.execute(SETTINGS_OF, (done.id,)).fetchone()
    watched = {"smtp_host", "smtp_port", "smtp_security", "smtp_username", "allow_plaintext_login"}
    if row is not None and watched & set(done.changed):
        host, port, security = str(row["smtp_host"]), int(str(row["smtp_port"])), str(row["smtp_security"])
        warnings = doubtful_choices(host, port, security, None, check_login=False)
        username = None if row["smtp_username"] is None else str(row["smtp_username"])
        allowed = bool(row["allow_plaintext_login"])
        for warning in warnings + plaintext_login_warning(host, security, username, allowed):
            print(f"warning: {warning}", file=sys.stderr)
    what = ", ".join(done.changed) if done.changed else "nothing (the values given are the current ones)"
    print(f"edited sender account {args.name} (version {done.version}, {done.status}): changed {what}")
    return 0


def _list(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.db import connect
    from worker.ops.senders import list_senders

    with connect(_url(settings)) as conn:
        rows = list_senders(conn)
    if args.json:
        print(json.dumps(rows, default=str, indent=2))
        return 0
    cells = []
    for r in rows:
        # Stage 0 is a finished (or never started) warm-up: its old limit no longer applies.
        warmup = f"stage {r['warmup_stage']}/5 {r['warmup_limit']}/day" if r["warmup_stage"] else "-"
        host = f"{r['smtp_host']}:{r['smtp_port']}"
        cells.append(
            [
                r["name"],
                r["status"],
                f"{r['sent_today']}/{r['effective_limit']}",
                warmup,
                r["from_email"],
                host,
                r["auth_type"],
            ]
        )
    header = ("NAME", "STATUS", "TODAY", "WARM-UP", "FROM", "HOST", "AUTH")
    lines = table(header, cells, right=frozenset({2}))
    print(lines[0])
    for r, line in zip(rows, lines[1:], strict=True):
        print(line)
        if r["status"] == "unreachable":
            print(f"  since {r['circuit_since']:%Y-%m-%d %H:%M:%S}: {r['status_reason']}")
        returns = [f"bounce domain {r['bounce_domain']}"] if r["bounce_domain"] else []
        returns += [f"tagged for {r['relay_provider']}"] if r["relay_provider"] else []
        if returns:
            print(f"  {', '.join(returns)}")
    return 0


def _set_status(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.db import connect
    from worker.ops.senders import set_sender_status

    target = {"pause": "paused", "resume": "active", "suspend": "suspended"}[args.senders_command]
    with connect(_url(settings)) as conn:
        try:
            status = set_sender_status(conn, args.name, target, getattr(args, "reason", None))
        except (LookupError, ValueError) as exc:
            print(f"error: {str(exc).strip(chr(34))}", file=sys.stderr)
            return 1
    print(f"sender account {args.name} is now {status}")
    return 0


def _remove(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.db import connect
    from worker.ops.senders import SenderInUse, remove_sender

    if not args.yes:
        if not interactive():
            raise ConfigError("removing a sender account cannot be undone: add --yes to confirm")
        answer = ask(
            f"Remove sender account {args.name}? This cannot be undone. Type its name to confirm", "", None
        )
        if answer != args.name:
            print("nothing changed", file=sys.stderr)
            return 1
    with connect(_url(settings)) as conn:
        try:
            sender_id = remove_sender(conn, args.name)
        except (LookupError, SenderInUse) as exc:
            print(f"error: {str(exc).strip(chr(34))}", file=sys.stderr)
            return 1
    print(f"removed sender account {args.name} (id {sender_id})")
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom senders` and its actions."""
    senders = sub.add_parser(
        "senders", help="manage sender accounts", description=help_text.SENDERS, formatter_class=RAW
    )
    s_sub = senders.add_subparsers(dest="senders_command", required=True, metavar="ACTION")
    _register_add(s_sub)
    edit = s_sub.add_parser(
        "edit",
        help="change some settings of a sender account",
        description=help_text.EDIT,
        formatter_class=RAW,
    )
    edit.add_argument("name", help="the account to change")
    add_settings_arguments(edit, adding=False)
    add_auth_arguments(edit, adding=False)
    lst = s_sub.add_parser(
        "list",
        help="list sender accounts with today's usage",
        description=help_text.LIST,
        formatter_class=RAW,
    )
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    for action, text, described in (
        ("pause", "stop sending until resumed", help_text.PAUSE),
        ("resume", "start sending again", help_text.RESUME),
        ("suspend", "take out of service (e.g. credentials revoked)", help_text.SUSPEND),
    ):
        p = s_sub.add_parser(action, help=text, description=described, formatter_class=RAW)
        p.add_argument("name")
        if action != "resume":
            p.add_argument("--reason", help="why, shown to other operators")
    remove = s_sub.add_parser(
        "remove",
        help="delete a sender account no email is bound to",
        description=help_text.REMOVE,
        formatter_class=RAW,
    )
    remove.add_argument("name", help="the account to delete")
    remove.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    senders.set_defaults(handler=cmd_senders)


def _register_add(s_sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom senders add` and its options."""
    add = s_sub.add_parser("add", help="add a sender account", description=help_text.ADD, formatter_class=RAW)
    add.add_argument("name", help="short unique name, e.g. transactional-1")
    add_settings_arguments(add, adding=True)
    add_auth_arguments(add, adding=True)
    add.add_argument(
        "--warmup-stage", type=int, default=0, choices=range(6), help="warm-up stage 1-5, 0 = none"
    )
    add.add_argument("--dkim-domain", metavar="DOMAIN", help="DKIM signing domain (d=), e.g. example.com")
    add.add_argument("--dkim-selector", metavar="SELECTOR", help="DKIM selector (s=), e.g. mail2026")
    add.add_argument(
        "--dkim-key-file",
        metavar="PATH",
        type=pathlib.Path,
        help="RSA private key (PEM) to sign with; stored encrypted with MAILROOM_SECRET_KEY. "
        "All three --dkim-* options go together; the TXT record to publish is printed",
    )
