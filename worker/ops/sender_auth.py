"""How a sender account logs in and how its email is returned and tagged, as operators set it:
password or OAuth2 (the client secret and refresh token encrypted like passwords), bounce domain,
relay provider. `worker.ops.senders` stores what these checks let through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.core.crypto import SecretBox
from worker.core.sender_settings import (
    AUTH_TYPES,
    check_client_id,
    check_relay_provider,
    check_token_url,
    normalise_bounce_domain,
)
from worker.core.validation import ValidationError, normalise_address

# The OAuth2 settings a password account never has (cleared when an account goes back to a password).
OAUTH_SETTINGS = ("oauth_token_url", "oauth_client_id")


@dataclass(frozen=True)
class OAuthSecrets:
    """An OAuth2 client secret and refresh token as given (None: keep the stored one when editing)."""

    client_secret: str | None = None
    refresh_token: str | None = None

    def __repr__(self) -> str:
        return "OAuthSecrets(...)"  # never a secret in a log line or a traceback

    def encrypted(self, box: SecretBox | None) -> tuple[bytes | None, bytes | None]:
        """Both encrypted with `box` (None where not given)."""
        if box is None and (self.client_secret or self.refresh_token):
            raise ValueError("OAuth2 secrets need the secret box to encrypt them")
        return (
            box.encrypt(self.client_secret) if box is not None and self.client_secret else None,
            box.encrypt(self.refresh_token) if box is not None and self.refresh_token else None,
        )


def checked_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The login, bounce and relay settings of an account (a `SenderSpec`'s fields), checked and normalised."""
    auth_type = values.get("auth_type") or "password"
    if auth_type not in AUTH_TYPES:
        raise ValidationError("auth", f"must be one of {', '.join(AUTH_TYPES)}")
    url, client_id = values.get("oauth_token_url"), values.get("oauth_client_id")
    if auth_type == "oauth2":
        if not url:
            raise ValidationError(
                "oauth_token_url",
                "an oauth2 sender needs a token endpoint: --oauth-provider google|microsoft or --oauth-token-url",
            )
        if not client_id:
            raise ValidationError("oauth_client_id", "an oauth2 sender needs a client id (--oauth-client-id)")
        check_token_url(url)
        check_client_id(client_id)
        if not values.get("smtp_username"):
            raise ValidationError(
                "username",
                "an oauth2 sender logs in as its mailbox: give --username with the mailbox address",
            )
    elif url or client_id:
        raise ValidationError("auth", "OAuth2 settings are for an oauth2 sender: add --auth oauth2")
    subject = _gmail_subject(auth_type, values)
    domain, relay = values.get("bounce_domain"), values.get("relay_provider")
    return {
        "auth_type": auth_type,
        "oauth_token_url": url or None,
        "oauth_client_id": client_id or None,
        "bounce_domain": normalise_bounce_domain(domain) if domain else None,
        "relay_provider": check_relay_provider(relay) if relay else None,
        "gmail_subject_email": subject,
    }


def _gmail_subject(auth_type: str, values: dict[str, Any]) -> str | None:
    """The Workspace user a gmail account sends as (normalised); no other account has one."""
    subject = values.get("gmail_subject_email")
    if auth_type != "gmail":
        if subject:
            raise ValidationError("impersonate", "--impersonate is for a Gmail API sender: add --auth gmail")
        return None
    if not subject:
        raise ValidationError("impersonate", "a Gmail API sender needs the Workspace user it sends as")
    if values.get("smtp_username"):
        raise ValidationError("username", "a Gmail API sender has no SMTP login (it sends as --impersonate)")
    return normalise_address("impersonate", subject)


def check_secrets(
    auth_type: str, password: str | None, oauth: OAuthSecrets | None, gmail_key: str | None = None
) -> None:
    """An oauth2 account has a client secret and a refresh token and no password; a password one no OAuth2
    secret; a gmail account its service account key and nothing else (which no other account has)."""
    if auth_type == "gmail":
        if password or (oauth is not None and (oauth.client_secret or oauth.refresh_token)):
            raise ValidationError("auth", "a Gmail API sender signs in with its service account key alone")
        if not gmail_key:
            raise ValidationError("service_account", "a Gmail API sender needs its service account key")
        return
    if gmail_key:
        raise ValidationError(
            "service_account", "a service account key is for a Gmail API sender: add --auth gmail"
        )
    if auth_type == "oauth2":
        if password:
            raise ValidationError("password", "an oauth2 sender logs in with tokens, not a password")
        if oauth is None or not oauth.client_secret:
            raise ValidationError("oauth_client_secret", "an oauth2 sender needs its client secret")
        if not oauth.refresh_token:
            raise ValidationError("oauth_refresh_token", "an oauth2 sender needs a refresh token")
    elif oauth is not None and (oauth.client_secret or oauth.refresh_token):
        raise ValidationError("auth", "OAuth2 secrets are for an oauth2 sender: add --auth oauth2")


def check_auth_change(before: str, after: str) -> None:
    """An edit never turns an account into a Gmail API sender or back: its key is only taken by `add`."""
    if before != after and "gmail" in (before, after):
        raise ValidationError(
            "auth",
            "an account does not change to or from the Gmail API: remove it and add it again "
            "(`mailroom senders add NAME --auth gmail ...` for a Gmail API sender)",
        )


def secret_updates(
    current: dict[str, Any],
    merged: dict[str, Any],
    password: str | None,
    drop_password: bool,
    oauth: OAuthSecrets | None,
    box: SecretBox | None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """An edit's secrets: the update's parameters and which secrets change.

    `current` is the locked row (with has_password, has_client_secret, has_refresh_token), `merged`
    the account's settings after the edit. An account turned oauth2 loses its password; one turned
    back to a password loses its OAuth2 secrets. Raises `ValidationError` when a needed secret is missing.
    """
    oauth = oauth or OAuthSecrets()
    oauth2 = merged["auth_type"] == "oauth2"
    if oauth2:
        if password:
            raise ValidationError("password", "an oauth2 sender logs in with tokens, not a password")
        drop_password = True
        kept = current["auth_type"] == "oauth2"
        if not (oauth.client_secret or (kept and current["has_client_secret"])):
            raise ValidationError("oauth_client_secret", "an oauth2 sender needs its client secret")
        if not (oauth.refresh_token or (kept and current["has_refresh_token"])):
            raise ValidationError("oauth_refresh_token", "an oauth2 sender needs a refresh token")
    else:
        check_secrets("password", None, oauth)
        keeps_password = current["has_password"] and not drop_password
        if merged["smtp_username"] and not (password or keeps_password):
            raise ValidationError("password", "a login (username) needs a password")
    changes = {
        "password": password is not None or (drop_password and current["has_password"]),
        "oauth_client_secret": oauth.client_secret is not None
        or (not oauth2 and current["has_client_secret"]),
        "oauth_refresh_token": oauth.refresh_token is not None
        or (not oauth2 and current["has_refresh_token"]),
    }
    if password is not None and box is None:
        raise ValueError("a new password needs the secret box to encrypt it")
    client_secret, refresh_token = oauth.encrypted(box)
    params = {
        "password_change": changes["password"],
        "password": box.encrypt(password) if box is not None and password else None,
        "secret_change": changes["oauth_client_secret"],
        "client_secret": client_secret,
        "refresh_change": changes["oauth_refresh_token"],
        "refresh_token": refresh_token,
    }
    return params, tuple(name for name, change in changes.items() if change)
