"""What `senders add` and `senders edit` take for OAuth2 logins, bounce domains and relay providers.

The client secret and refresh token come the way a password does: from an environment variable, a
file, or a prompt on a terminal; never from the command line itself.
"""

from __future__ import annotations

import argparse
import getpass
import pathlib
import sys
from typing import Any

from worker.cli.commands.sender_input import secret_from
from worker.core.config import ConfigError
from worker.core.sender_settings import PROVIDERS, RELAY_PROVIDERS, preset_token_url
from worker.core.validation import ValidationError

# The two OAuth2 secrets: (option stem, argparse dest stem, what it is called in messages).
SECRETS = (
    ("oauth-client-secret", "oauth_client_secret", "OAuth2 client secret"),
    ("oauth-refresh-token", "oauth_refresh_token", "OAuth2 refresh token"),
)


class _Refuse(argparse.Action):
    """A secret as an option value is refused, saying how to give it without showing it to others."""

    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        stem = str(self.dest).replace("_", "-").removesuffix("-refused")
        parser.error(
            f"a secret on the command line shows in `ps` and the shell history: use --{stem}-env VAR, "
            f"--{stem}-file PATH, or --{stem}-prompt"
        )


def add_auth_arguments(parser: argparse.ArgumentParser, *, adding: bool) -> None:
    """The OAuth2, bounce domain and relay provider options of `senders add` and `senders edit`."""
    parser.add_argument(
        "--auth",
        choices=("password", "oauth2"),
        default="password" if adding else None,
        help="how the account logs in: password (default) or oauth2 (AUTH XOAUTH2, for Gmail and "
        "Microsoft 365; --username is then the mailbox address)",
    )
    endpoint = parser.add_mutually_exclusive_group()
    endpoint.add_argument(
        "--oauth-provider", choices=PROVIDERS, help="the token endpoint of google or microsoft"
    )
    endpoint.add_argument("--oauth-token-url", metavar="URL", help="any other OAuth2 token endpoint (https)")
    parser.add_argument(
        "--oauth-tenant",
        metavar="TENANT",
        help="the Microsoft Entra tenant (its id or domain) for --oauth-provider microsoft (default common)",
    )
    parser.add_argument("--oauth-client-id", metavar="ID", help="the OAuth2 client (application) id")
    for stem, dest, what in SECRETS:
        group = parser.add_mutually_exclusive_group()
        group.add_argument(
            f"--{stem}-env", metavar="VAR", help=f"read the {what} from environment variable VAR"
        )
        group.add_argument(
            f"--{stem}-file",
            metavar="PATH",
            type=pathlib.Path,
            help=f"read the {what} from the first line of PATH",
        )
        group.add_argument(
            f"--{stem}-prompt", action="store_true", help=f"prompt for the {what} (not echoed)"
        )
        group.add_argument(
            f"--{stem}", dest=f"{dest}_refused", nargs="?", action=_Refuse, help=argparse.SUPPRESS
        )
    bounce = parser.add_mutually_exclusive_group()
    bounce.add_argument(
        "--bounce-domain",
        metavar="DOMAIN",
        help="domain of this account's VERP return paths (default MAILROOM_BOUNCE_DOMAIN, else the "
        "From address); '' clears it",
    )
    if not adding:
        bounce.add_argument(
            "--no-bounce-domain", action="store_true", help="clear the account's own bounce domain"
        )
    parser.add_argument(
        "--relay-provider",
        choices=(*RELAY_PROVIDERS, "none"),
        help="the relay whose event webhooks report on this account's email: each message is tagged "
        "for it (postmark: X-PM-Metadata, sendgrid: X-SMTPAPI unique_args); none removes the tag",
    )


def auth_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The account settings these options set (`senders edit`: only those given; `add`: all of them)."""
    changes: dict[str, Any] = {}
    if args.auth is not None:
        changes["auth_type"] = args.auth
    if args.oauth_tenant is not None and args.oauth_provider != "microsoft":
        raise ConfigError("--oauth-tenant goes with --oauth-provider microsoft")
    if args.oauth_provider is not None:
        changes["oauth_token_url"] = preset_token_url(args.oauth_provider, args.oauth_tenant)
    elif args.oauth_token_url is not None:
        changes["oauth_token_url"] = args.oauth_token_url
    if args.oauth_client_id is not None:
        changes["oauth_client_id"] = args.oauth_client_id
    if args.bounce_domain is not None or getattr(args, "no_bounce_domain", False):
        changes["bounce_domain"] = args.bounce_domain or None
    if args.relay_provider is not None:
        changes["relay_provider"] = None if args.relay_provider == "none" else args.relay_provider
    return changes


def oauth_secrets_from(args: argparse.Namespace, *, ask: bool) -> tuple[str | None, str | None]:
    """The client secret and refresh token given (env, file, prompt); with `ask`, prompt for those missing."""
    found: list[str | None] = []
    for _, dest, what in SECRETS:
        value = _secret_from(args, dest, what)
        if value is None and ask:
            value = getpass.getpass(f"{what} for {args.username or args.name}: ") or None
        found.append(value)
    return found[0], found[1]


def oauth_secret_given(args: argparse.Namespace) -> bool:
    """Whether an option names where an OAuth2 secret comes from."""
    return any(
        getattr(args, f"{dest}_env")
        or getattr(args, f"{dest}_file") is not None
        or getattr(args, f"{dest}_prompt")
        for _, dest, _ in SECRETS
    )


def _secret_from(args: argparse.Namespace, dest: str, what: str) -> str | None:
    prompt = f"{what} for {args.username or args.name}: "
    return secret_from(args, dest, what, ask=lambda: getpass.getpass(prompt) or None, strip=True)


def complete_oauth_add(args: argparse.Namespace, asking: bool) -> tuple[str | None, str | None]:
    """`senders add --auth oauth2`: the mailbox to log in as (the From address unless given) and the secrets."""
    changes = auth_changes(args)  # said before any prompt: the endpoint and the client come first
    if "oauth_token_url" not in changes:
        raise ValidationError(
            "oauth_token_url", "--auth oauth2 needs --oauth-provider google|microsoft or --oauth-token-url"
        )
    if "oauth_client_id" not in changes:
        raise ValidationError("oauth_client_id", "--auth oauth2 needs --oauth-client-id")
    if args.username is None:
        args.username = args.from_email
        print(
            f"note: logging in as the From address {args.from_email} (give --username otherwise)",
            file=sys.stderr,
        )
    client_secret, refresh_token = oauth_secrets_from(args, ask=asking)
    if client_secret is None or refresh_token is None:
        missing = "--oauth-client-secret-env" if client_secret is None else "--oauth-refresh-token-env"
        raise ValidationError(
            "oauth2",
            f"an oauth2 sender needs its client secret and refresh token: give {missing} VAR "
            "(or -file PATH, or run on a terminal to be asked)",
        )
    return client_secret, refresh_token
