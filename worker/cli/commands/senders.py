"""`mailroom senders`: add, list, pause, resume and suspend sender accounts."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any

from worker.core.config import ConfigError, Settings


def _url(settings: Settings) -> str:
    from worker.core.db import checked_url

    return checked_url(settings)


def _password_from(args: argparse.Namespace) -> str | None:
    if args.password_env:
        value = os.environ.get(args.password_env)
        if value is None:
            raise ConfigError(f"environment variable {args.password_env} is not set")
        return value
    if args.password_prompt:
        import getpass

        return getpass.getpass(f"SMTP password for {args.username or args.name}: ")
    return None


def cmd_senders(args: argparse.Namespace, settings: Settings) -> int:
    """`mailroom senders add|list|pause|resume|suspend`."""
    if args.senders_command == "add":
        return _add(args, settings)
    if args.senders_command == "list":
        return _list(args, settings)
    return _set_status(args, settings)


def _add(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.ops.senders import SenderSpec, add_sender

    password = _password_from(args)
    if args.username and password is None:
        raise ConfigError("--username needs a password: give --password-env VAR or --password-prompt")
    for warning in _doubtful_choices(args, password):
        print(f"warning: {warning}", file=sys.stderr)
    box = secret_box(settings)
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
    )
    dkim_key = None
    if args.dkim_key_file:
        try:
            dkim_key = args.dkim_key_file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read the DKIM key file: {exc}") from None
    with connect(_url(settings)) as conn:
        sender_id = add_sender(conn, spec, password, box, dkim_key)
    print(f"added sender account {args.name} (id {sender_id})")
    if dkim_key is not None:
        from worker.core.dkim import dns_record, normalise_private_key

        print(f"DKIM: publish this TXT record at {args.dkim_selector}._domainkey.{args.dkim_domain}:")
        print(dns_record(normalise_private_key(dkim_key)))
    return 0


def _doubtful_choices(args: argparse.Namespace, password: str | None) -> list[str]:
    """What an operator probably did not mean: a port left to its default, TLS on an odd port, no login."""
    warnings = []
    if args.port is None:
        args.port = 465 if args.security == "tls" else 587
        warnings.append(
            f"no --port given: using {args.port} ({'implicit TLS' if args.port == 465 else 'submission'})"
        )
    elif args.security == "tls" and args.port == 587:
        warnings.append("--security tls (implicit TLS) on port 587, which usually speaks STARTTLS")
    if args.security == "none" and args.host not in ("localhost", "127.0.0.1", "::1"):
        warnings.append(f"--security none: mail to {args.host} crosses the network unencrypted")
    if password is None:
        warnings.append("no password: the relay must accept mail from this host without a login")
    return warnings


def _list(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.db import connect
    from worker.ops.senders import list_senders

    with connect(_url(settings)) as conn:
        rows = list_senders(conn)
    if args.json:
        print(json.dumps(rows, default=str, indent=2))
        return 0
    print(f"{'NAME':<20} {'STATUS':<22} {'TODAY':>13} {'WARM-UP':<20} {'HOST':<30}")
    for r in rows:
        today = f"{r['sent_today']}/{r['effective_limit']}"
        # Stage 0 is a finished (or never started) warm-up: its old limit no longer applies.
        warmup = f"stage {r['warmup_stage']}/5 {r['warmup_limit']}/day" if r["warmup_stage"] else "-"
        print(f"{r['name']:<20} {r['status']:<22} {today:>13} {warmup:<20} {r['smtp_host']}:{r['smtp_port']}")
        if r["status"] == "unreachable":
            print(f"{'':<20} since {r['circuit_since']:%Y-%m-%d %H:%M:%S}: {r['status_reason']}")
    return 0


def _set_status(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.db import connect
    from worker.ops.senders import set_sender_status

    target = {"pause": "paused", "resume": "active", "suspend": "suspended"}[args.senders_command]
    with connect(_url(settings)) as conn:
        try:
            status = set_sender_status(conn, args.name, target, getattr(args, "reason", None))
        except (LookupError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(f"sender account {args.name} is now {status}")
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom senders` and its actions."""
    senders = sub.add_parser(
        "senders",
        help="manage sender accounts",
        description="Add, list, pause, resume and suspend the SMTP accounts email goes out through. "
        "Every change is recorded in the audit trail (`mailroom audit`).\n\n"
        "Examples:\n"
        "  SMTP_PASSWORD=... mailroom senders add transactional-1 --from noreply@example.com \\\n"
        "      --host smtp.example.com --port 587 --username mailer --password-env SMTP_PASSWORD\n"
        "  mailroom senders list\n"
        "  mailroom senders suspend transactional-1 --reason 'credentials revoked'",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    s_sub = senders.add_subparsers(dest="senders_command", required=True, metavar="ACTION")
    _register_add(s_sub)
    lst = s_sub.add_parser("list", help="list sender accounts with today's usage")
    lst.add_argument("--json", action="store_true")
    for action, text in (
        ("pause", "stop sending until resumed"),
        ("resume", "start sending again"),
        ("suspend", "take out of service (e.g. credentials revoked)"),
    ):
        p = s_sub.add_parser(action, help=text)
        p.add_argument("name")
        if action != "resume":
            p.add_argument("--reason", help="why, shown to other operators")
    senders.set_defaults(handler=cmd_senders)


def _register_add(s_sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom senders add` and its options."""
    add = s_sub.add_parser(
        "add",
        help="add a sender account",
        description="Add an SMTP sender account. The password is never a flag value: give the name of an "
        "environment variable holding it (--password-env) or type it at a prompt (--password-prompt). It is "
        "stored encrypted with MAILROOM_SECRET_KEY.",
    )
    add.add_argument("name", help="short unique name, e.g. transactional-1")
    add.add_argument("--from", dest="from_email", required=True, help="From address")
    add.add_argument("--from-name", help="From display name")
    add.add_argument("--host", required=True, help="SMTP host")
    add.add_argument("--port", type=int, help="SMTP port (default 587, or 465 with --security tls)")
    add.add_argument(
        "--security",
        choices=("none", "starttls", "tls"),
        default="starttls",
        help="none, starttls (default) or tls (implicit TLS, usually port 465)",
    )
    add.add_argument("--username", help="SMTP username")
    pw = add.add_mutually_exclusive_group()
    pw.add_argument(
        "--password-env", metavar="VAR", help="read the SMTP password from environment variable VAR"
    )
    pw.add_argument("--password-prompt", action="store_true", help="prompt for the SMTP password")
    add.add_argument("--daily-limit", type=int, default=2000, help="emails per UTC day (default 2000)")
    add.add_argument(
        "--warmup-stage", type=int, default=0, choices=range(6), help="warm-up stage 1-5, 0 = none"
    )
    add.add_argument("--warmup-limit", type=int, help="daily cap while warming up")
    add.add_argument("--send-delay-ms", type=int, default=0, help="pause between emails on this account")
    add.add_argument("--max-connections", type=int, default=4, help="parallel SMTP connections (default 4)")
    add.add_argument("--dkim-domain", metavar="DOMAIN", help="DKIM signing domain (d=), e.g. example.com")
    add.add_argument("--dkim-selector", metavar="SELECTOR", help="DKIM selector (s=), e.g. mail2026")
    add.add_argument(
        "--dkim-key-file",
        metavar="PATH",
        type=pathlib.Path,
        help="RSA private key (PEM) to sign with; stored encrypted with MAILROOM_SECRET_KEY. "
        "All three --dkim-* options go together; the TXT record to publish is printed",
    )
    for flag, what, default in (
        (
            "--connect-timeout",
            "connecting, greeting, TLS and login",
            "MAILROOM_SMTP_CONNECT_TIMEOUT_SECONDS, 10",
        ),
        ("--command-timeout", "each of MAIL, RCPT and DATA", "MAILROOM_SMTP_COMMAND_TIMEOUT_SECONDS, 30"),
        ("--data-timeout", "sending the body and its reply", "MAILROOM_SMTP_DATA_TIMEOUT_SECONDS, 120"),
    ):
        add.add_argument(
            flag, type=float, metavar="SECONDS", help=f"seconds allowed for {what} (default {default})"
        )
