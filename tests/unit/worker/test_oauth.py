"""OAuth2 token refresh answers, read without a database: a refusal is a failed login, anything else but a token an outage."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.worker.oauth_helpers import (
    CLIENT_ID,
    CLIENT_SECRET,
    MAILBOX,
    REFRESH_TOKEN,
)
from worker.core.sender_settings import GOOGLE_ENDPOINT, preset_token_url
from worker.engine.oauth import (
    OAuthClient,
    TokenRefused,
    TokenUnavailable,
    grant_from,
    refresh_form,
)
from worker.engine.smtp import SmtpAccount


def test_no_secret_or_token_shows_in_a_repr() -> None:
    client = OAuthClient("https://e.example/token", CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN, b"stored")
    account = SmtpAccount(1, "h", 25, "none", MAILBOX, None, oauth=client)
    grant = grant_from(200, b'{"access_token": "at-secret-1", "expires_in": 60, "refresh_token": "rt-new-2"}')
    shown = repr(account) + repr(client) + repr(grant)
    for secret in (CLIENT_SECRET, REFRESH_TOKEN, "at-secret-1", "rt-new-2", "stored"):
        assert secret not in shown


@pytest.mark.parametrize("error", ["invalid_grant", "invalid_client", "unauthorized_client"])
@pytest.mark.parametrize("status", [400, 401])
def test_an_endpoint_refusal_is_a_failed_login(error: str, status: int) -> None:
    with pytest.raises(TokenRefused, match=f"^{error}: no way$"):
        grant_from(status, f'{{"error": "{error}", "error_description": "no way"}}'.encode())


@pytest.mark.parametrize(
    ("status", "body"),
    [(503, b'{"error": "temporarily_unavailable"}'), (429, b'{"error": "slow_down"}'), (200, b"[]"),
     (200, b'{"access_token": "x", "token_type": "mac"}'), (400, b"bad request")],
)  # fmt: skip
def test_anything_else_but_a_token_is_an_outage(status: int, body: bytes) -> None:
    with pytest.raises(TokenUnavailable):
        grant_from(status, body)


def test_a_microsoft_refresh_asks_for_the_smtp_scope_and_a_google_one_for_none() -> None:
    microsoft = OAuthClient(
        preset_token_url("microsoft", "contoso.com"), CLIENT_ID, CLIENT_SECRET, REFRESH_TOKEN
    )
    google = replace(microsoft, token_url=GOOGLE_ENDPOINT)
    assert refresh_form(microsoft)["scope"] == "https://outlook.office.com/SMTP.Send offline_access"
    assert refresh_form(google) == {
        "grant_type": "refresh_token",
        "refresh_token": REFRESH_TOKEN,
        "client_id": CLIENT_ID,
        "client_secret": CLIENT_SECRET,
    }
