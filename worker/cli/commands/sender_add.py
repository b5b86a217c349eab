"""`mailroom senders add`: a new SMTP sender account, asking on a terminal for what is left out."""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any

import click

from worker.cli.commands.sender_gmail import complete_gmail_add, gmail_given, gmail_options
from worker.cli.commands.sender_input import (
    SECURITY,
    WARMUP_STAGE,
    Given,
    answer_in,
    answer_number,
    ask_secret,
    doubtful_choices,
    password_from,
    plaintext_login_warning,
    settings_options,
)
from worker.cli.commands.sender_oauth import (
    auth_changes,
    auth_options,
    complete_oauth_add,
    oauth_secret_given,
)
from worker.cli.framework import Command, Database, interactive, with_database

if TYPE_CHECKING:
    from worker.ops.sender_auth import OAuthSecrets
    from worker.ops.senders import SenderSpec

ADD = """\
Add an SMTP sender account. The password is stored encrypted with MAILROOM_SECRET_KEY and is never a
flag value (it would show in `ps` and the shell history): give the name of an environment variable
holding it (--password-env), a file holding it (--password-file, first line), or type it at the
prompt. On a terminal, what is missing is asked for: the security (none, starttls, tls), the port
and the login (username, then the password, not echoed). Without a terminal nothing is asked: a
port or security left out is defaulted with a warning on standard error, a login without a password
is refused, and doubtful choices (implicit TLS on 587, no TLS to a remote host, no login) are
warned about. A login (password or OAuth2) with --security none to a host other than localhost is
refused: the secret would cross the network readable by anyone on the path; --allow-plaintext-login
allows it knowingly (the worker refuses such a login too when the account does not allow it).
Other accounts are left alone.

OAuth2 (Gmail, Microsoft 365, which refuse passwords): --auth oauth2 logs in with SMTP AUTH
XOAUTH2 as the mailbox (--username; the From address when left out), with access tokens the worker
gets from the token endpoint (--oauth-provider google, --oauth-provider microsoft with
--oauth-tenant, or --oauth-token-url) using the client id, the client secret and a refresh token.
The secret and the refresh token are stored encrypted and come like a password: from a variable
(--oauth-client-secret-env, --oauth-refresh-token-env), a file (...-file) or a prompt (...-prompt).
--bounce-domain gives the account's own domain for VERP return paths; --relay-provider postmark
or sendgrid tags each message so that relay's bounce webhooks name the email.
The new account's DNS is checked as `mailroom senders check` does (SPF, DKIM, DMARC, MX, relay TLS):
what it finds is printed as warnings and stored, and never stops the add; --no-dns-check skips it.

Gmail API (Google Workspace): --auth gmail sends through the Gmail API as the Workspace user
--impersonate names (also the From address unless --from is given), with a service account that
has domain-wide delegation for the gmail.send scope; its JSON key comes from --service-account-file,
--service-account-env or --service-account-prompt and is stored encrypted. No --host or login.
Exit status 0 when added, 2 when a setting is invalid, the name is taken or a password, an
OAuth2 setting or the Gmail API user or key is missing.

Examples:
  SMTP_PASSWORD=... mailroom senders add transactional-1 --from noreply@example.com \\
      --host smtp.example.com --port 587 --security starttls --username mailer \\
      --password-env SMTP_PASSWORD --daily-limit 5000
  mailroom senders add relay --from noreply@example.com --host smtp.example.com \\
      --username mailer --password-file /run/secrets/smtp
  mailroom senders add local --from dev@example.com --host 127.0.0.1 --port 2525 --security none
  mailroom senders add careful --from news@example.com --host 127.0.0.1 --port 2525 \\
      --security none --batch-size 20 --send-delay-ms 200
  CLIENT_SECRET=... REFRESH_TOKEN=... mailroom senders add gmail --from me@example.com \\
      --host smtp.gmail.com --port 587 --security starttls --auth oauth2 --oauth-provider google \\
      --oauth-client-id 1234.apps.googleusercontent.com --oauth-client-secret-env CLIENT_SECRET \\
      --oauth-refresh-token-env REFRESH_TOKEN
  mailroom senders add workspace --auth gmail --service-account-file key.json \\
      --impersonate noreply@example.com
  mailroom senders add relay --from noreply@example.com --host smtp.postmarkapp.com \\
      --username TOKEN --password-env PM_TOKEN --bounce-domain bounces.example.com \\
      --relay-provider postmark"""


@click.command("add", cls=Command, help=ADD, short_help="add a sender account")
@click.argument("name")
@settings_options(adding=True)
@auth_options(adding=True)
@gmail_options()
@click.option("--warmup-stage", type=WARMUP_STAGE, default=0, help="warm-up stage 1-5, 0 = none")
@click.option("--dkim-domain", metavar="DOMAIN", help="DKIM signing domain (d=), e.g. example.com")
@click.option("--dkim-selector", metavar="SELECTOR", help="DKIM selector (s=), e.g. mail2026")
@click.option(
    "--dkim-key-file",
    metavar="PATH",
    type=click.Path(path_type=pathlib.Path),
    help="RSA private key (PEM) to sign with; stored encrypted with MAILROOM_SECRET_KEY. "
    "All three --dkim-* options go together; the TXT record to publish is printed",
)
@click.option("--no-dns-check", is_flag=True, help="do not check the account's DNS and relay after adding it")
@with_database
def add(db: Database, /, **options: Any) -> int:
    """`mailroom senders add NAME --from ADDRESS --host HOST [...]`."""
    from worker.core.crypto import secret_box
    from worker.core.db import connect
    from worker.ops.senders import add_sender

    no_dns_check = bool(options.pop("no_dns_check", False))
    given = Given(**options)
    _require_smtp_options(given)
    # Before any prompt: a missing key is said before a password is typed. A relay without a login
    # stores nothing secret and needs no key (a login typed at the prompt still finds it missing).
    box = secret_box(db.settings, required=_keeps_secrets(given))
    gmail_key = _gmail_key(given)
    oauth = _oauth_secrets(given)
    password = _complete_add(given)
    spec = _spec(given)
    host, security = spec.smtp_host, spec.smtp_security
    login = given.auth == "password"
    warnings = doubtful_choices(host, spec.smtp_port, security, password, check_login=login)
    warnings += plaintext_login_warning(host, security, spec.smtp_username, spec.allow_plaintext_login)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    dkim_key = _dkim_key(given.dkim_key_file)
    with connect(db.url) as conn:
        sender_id = add_sender(conn, spec, password, box, dkim_key, oauth=oauth, gmail_key=gmail_key)
    click.echo(f"added sender account {given.name} (id {sender_id})")
    if dkim_key is not None:
        from worker.core.dkim import dns_record, normalise_private_key

        click.echo(f"DKIM: publish this TXT record at {given.dkim_selector}._domainkey.{given.dkim_domain}:")
        click.echo(dns_record(normalise_private_key(dkim_key)))
    if not no_dns_check:
        _check_dns(db, given.name)
    return 0


def _check_dns(db: Database, name: str) -> None:
    """Check the new account's DNS and relay; say what is wrong as warnings (the account is added anyway)."""
    from worker.core.db import connect
    from worker.ops.dns_checks import run_checks

    try:
        with connect(db.url, autocommit=True) as conn:
            [check] = run_checks(conn, db.settings, name)
    except Exception as exc:  # the account is added: a failed check must not say otherwise
        click.echo(
            f"warning: the DNS check did not run ({exc}); run: mailroom senders check {name}", err=True
        )
        return
    for f in check.findings:
        if f.severity in ("warning", "problem"):
            click.echo(f"warning: DNS {f.code}: {f.detail}", err=True)


def _keeps_secrets(given: Given) -> bool:
    """Whether the options given already say the account will store a secret (password, tokens, key)."""
    return bool(
        given.username or given.password_source.given() or given.auth != "password" or given.dkim_key_file
    )


def _require_smtp_options(given: Given) -> None:
    """--from and --host, which every account but a Gmail API sender needs (exit status 2 without)."""
    if given.auth == "gmail":
        return
    for option, value in (("--from", given.from_email), ("--host", given.host)):
        if value is None:
            raise click.UsageError(f"Missing option '{option}'.")


def _gmail_key(given: Given) -> str | None:
    """A Gmail API sender's service account key (asked on a terminal); refused for any other account."""
    from worker.core.config import ConfigError

    if given.auth == "gmail":
        return complete_gmail_add(given, interactive())
    if gmail_given(given):
        raise ConfigError(
            "--impersonate and --service-account-* are for a Gmail API sender: add --auth gmail"
        )
    return None


def _oauth_secrets(given: Given) -> OAuthSecrets | None:
    """The OAuth2 secrets of an oauth2 account (asked on a terminal); refused for a password account."""
    from worker.core.config import ConfigError
    from worker.ops.sender_auth import OAuthSecrets

    if given.auth == "oauth2":
        return OAuthSecrets(*complete_oauth_add(given, interactive()))
    if oauth_secret_given(given):
        raise ConfigError("OAuth2 secrets are for an oauth2 sender: add --auth oauth2")
    return None


def _spec(given: Given) -> SenderSpec:
    """The account to add: the settings the options give (the ones `senders edit` changes), completed by
    `_complete_add`; what is left out takes SenderSpec's defaults."""
    from worker.ops.senders import SenderSpec

    settings = {setting: value for setting, value in given.settings().items() if value is not None}
    settings["smtp_username"] = given.username or None  # --username '': no login
    return SenderSpec(
        name=given.name,
        **settings,
        dkim_domain=given.dkim_domain,
        dkim_selector=given.dkim_selector,
        gmail_subject_email=given.impersonate,
        **auth_changes(given),
    )


def _complete_add(given: Given) -> str | None:
    """Ask on a terminal for the security, port and login left out; default them (warned) otherwise."""
    from worker.core.config import ConfigError

    asking = interactive()
    if given.security is None:
        if asking:
            given.security = click.prompt(
                "Security (none, starttls, tls)", default="starttls", value_proc=answer_in(SECURITY), err=True
            )
        else:
            given.security = "starttls"
            click.echo("warning: no --security given: using starttls", err=True)
    default_port = 465 if given.security == "tls" else 587
    if given.port is None and asking:
        given.port = click.prompt("SMTP port", default=str(default_port), value_proc=answer_number, err=True)
    elif given.port is None:
        given.port = default_port
        what = "implicit TLS" if default_port == 465 else "submission"
        click.echo(f"warning: no --port given: using {default_port} ({what})", err=True)
    password = password_from(given)
    if given.auth in ("oauth2", "gmail"):
        return password  # logs in with tokens (a password given is refused when stored)
    if asking and given.username is None and password is None:
        answer: str = click.prompt(
            "SMTP username (Enter for no login)", default="", show_default=False, err=True
        )
        given.username = answer.strip() or None
    if asking and given.username and password is None:
        password = ask_secret(f"SMTP password for {given.username}@{given.host}") or None
    if given.username and password is None:
        raise ConfigError(
            "--username needs a password: give --password-env VAR or --password-file PATH "
            "(or run on a terminal to be asked)"
        )
    return password


def _dkim_key(path: pathlib.Path | None) -> bytes | None:
    from worker.core.config import ConfigError

    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the DKIM key file: {exc}") from None
