"""What `senders add` and `senders edit` take for OAuth2 logins, bounce domains and relay providers.

The client secret and refresh token come the way a password does: from an environment variable, a
file, or a prompt on a terminal; never from the command line itself.
"""

from __future__ import annotations

import pathlib
from typing import Any

import click

from worker.cli.commands.sender_input import (
    Decorator,
    Given,
    SecretSource,
    apply,
    ask_secret,
    at_most_one,
    refused,
    secret_from,
)

# The choices of worker.core.sender_settings (PROVIDERS, RELAY_PROVIDERS), spelled here so that
# loading the command does not load the validation it needs only when it runs; a test holds them equal.
PROVIDERS = ("google", "microsoft")
RELAY_PROVIDERS = ("postmark", "sendgrid")
AUTH_TYPES = ("password", "oauth2", "gmail")

# The two OAuth2 secrets: (option stem, what it is called in messages).
SECRETS = (
    ("oauth-client-secret", "OAuth2 client secret"),
    ("oauth-refresh-token", "OAuth2 refresh token"),
)


def auth_options(*, adding: bool) -> Decorator:
    """The OAuth2, bounce domain and relay provider options of `senders add` and `senders edit`."""
    options: list[Decorator] = [
        click.option(
            "--auth",
            type=click.Choice(AUTH_TYPES),
            default="password" if adding else None,
            help="how the account logs in: password (default), oauth2 (AUTH XOAUTH2, for Gmail and "
            "Microsoft 365; --username is then the mailbox address) or gmail (the Gmail API as a "
            "Workspace user, with a service account: see --impersonate)",
        ),
        click.option(
            "--oauth-provider", type=click.Choice(PROVIDERS), help="the token endpoint of google or microsoft"
        ),
        click.option("--oauth-token-url", metavar="URL", help="any other OAuth2 token endpoint (https)"),
        click.option(
            "--oauth-tenant",
            metavar="TENANT",
            help="the Microsoft Entra tenant (its id or domain) for --oauth-provider microsoft (default common)",
        ),
        click.option("--oauth-client-id", metavar="ID", help="the OAuth2 client (application) id"),
    ]
    for stem, what in SECRETS:
        options += _secret_options(stem, what)
    options.append(
        click.option(
            "--bounce-domain",
            metavar="DOMAIN",
            help="domain of this account's VERP return paths (default MAILROOM_BOUNCE_DOMAIN, else the "
            "From address); '' clears it",
        )
    )
    if not adding:
        options.append(
            click.option("--no-bounce-domain", is_flag=True, help="clear the account's own bounce domain")
        )
    options.append(
        click.option(
            "--relay-provider",
            type=click.Choice((*RELAY_PROVIDERS, "none")),
            help="the relay whose event webhooks report on this account's email: each message is tagged "
            "for it (postmark: X-PM-Metadata, sendgrid: X-SMTPAPI unique_args); none removes the tag",
        )
    )
    return lambda function: apply(function, options)


def _secret_options(stem: str, what: str) -> list[Decorator]:
    """Where one OAuth2 secret comes from: a variable, a file or a prompt; its value as an option is refused."""
    return [
        click.option(f"--{stem}-env", metavar="VAR", help=f"read the {what} from environment variable VAR"),
        click.option(
            f"--{stem}-file",
            metavar="PATH",
            type=click.Path(path_type=pathlib.Path),
            help=f"read the {what} from the first line of PATH",
        ),
        click.option(f"--{stem}-prompt", is_flag=True, help=f"prompt for the {what} (not echoed)"),
        click.option(
            f"--{stem}",
            hidden=True,
            is_flag=False,
            flag_value="",
            expose_value=False,
            callback=refused(
                f"a secret on the command line shows in `ps` and the shell history: use --{stem}-env VAR, "
                f"--{stem}-file PATH, or --{stem}-prompt"
            ),
        ),
    ]


def auth_changes(given: Given) -> dict[str, Any]:
    """The account settings these options set (`senders edit`: only those given; `add`: all of them)."""
    from worker.core.config import ConfigError
    from worker.core.sender_settings import preset_token_url

    at_most_one({"--oauth-provider": given.oauth_provider, "--oauth-token-url": given.oauth_token_url})
    at_most_one({"--bounce-domain": given.bounce_domain, "--no-bounce-domain": given.no_bounce_domain})
    changes: dict[str, Any] = {}
    if given.auth is not None:
        changes["auth_type"] = given.auth
    if given.oauth_tenant is not None and given.oauth_provider != "microsoft":
        raise ConfigError("--oauth-tenant goes with --oauth-provider microsoft")
    if given.oauth_provider is not None:
        changes["oauth_token_url"] = preset_token_url(given.oauth_provider, given.oauth_tenant)
    elif given.oauth_token_url is not None:
        changes["oauth_token_url"] = given.oauth_token_url
    if given.oauth_client_id is not None:
        changes["oauth_client_id"] = given.oauth_client_id
    if given.bounce_domain is not None or given.no_bounce_domain:
        changes["bounce_domain"] = given.bounce_domain or None
    if given.relay_provider is not None:
        changes["relay_provider"] = None if given.relay_provider == "none" else given.relay_provider
    return changes


def oauth_sources(given: Given) -> tuple[SecretSource, SecretSource]:
    """Where the client secret and the refresh token come from."""
    (secret_stem, secret_is), (token_stem, token_is) = SECRETS
    return (
        SecretSource(
            secret_stem,
            secret_is,
            given.oauth_client_secret_env,
            given.oauth_client_secret_file,
            given.oauth_client_secret_prompt,
        ),
        SecretSource(
            token_stem,
            token_is,
            given.oauth_refresh_token_env,
            given.oauth_refresh_token_file,
            given.oauth_refresh_token_prompt,
        ),
    )


def oauth_secrets_from(given: Given, *, ask: bool) -> tuple[str | None, str | None]:
    """The client secret and refresh token given (env, file, prompt); with `ask`, prompt for those missing."""
    client_secret, refresh_token = (_secret(given, source, ask=ask) for source in oauth_sources(given))
    return client_secret, refresh_token


def _secret(given: Given, source: SecretSource, *, ask: bool) -> str | None:
    prompt = f"{source.what} for {given.username or given.name}"
    value = secret_from(source, ask=lambda: ask_secret(prompt) or None, strip=True)
    if value is None and ask:
        value = ask_secret(prompt) or None
    return value


def oauth_secret_given(given: Given) -> bool:
    """Whether an option names where an OAuth2 secret comes from."""
    return any(source.given() for source in oauth_sources(given))


def complete_oauth_add(given: Given, asking: bool) -> tuple[str | None, str | None]:
    """`senders add --auth oauth2`: the mailbox to log in as (the From address unless given) and the secrets."""
    from worker.core.validation import ValidationError

    changes = auth_changes(given)  # said before any prompt: the endpoint and the client come first
    if "oauth_token_url" not in changes:
        raise ValidationError(
            "oauth_token_url", "--auth oauth2 needs --oauth-provider google|microsoft or --oauth-token-url"
        )
    if "oauth_client_id" not in changes:
        raise ValidationError("oauth_client_id", "--auth oauth2 needs --oauth-client-id")
    if given.username is None:
        given.username = given.from_email
        click.echo(
            f"note: logging in as the From address {given.from_email} (give --username otherwise)", err=True
        )
    client_secret, refresh_token = oauth_secrets_from(given, ask=asking)
    if client_secret is None or refresh_token is None:
        missing = "--oauth-client-secret-env" if client_secret is None else "--oauth-refresh-token-env"
        raise ValidationError(
            "oauth2",
            f"an oauth2 sender needs its client secret and refresh token: give {missing} VAR "
            "(or -file PATH, or run on a terminal to be asked)",
        )
    return client_secret, refresh_token
