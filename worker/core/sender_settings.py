"""Checks for the sender account settings that say how its email is authenticated, returned and tagged:
OAuth2 token endpoints (with the Google and Microsoft presets), bounce domains and relay providers.

The same rules as the database's CHECKs on `mailroom.sender_accounts` (`sender_accounts_oauth2_complete`,
`sender_accounts_bounce_domain_hostname`, ... in schema.sql), said in words an operator can act on.
"""

from __future__ import annotations

import re

from worker.core.validation import ValidationError

GOOGLE_ENDPOINT = "https://oauth2.googleapis.com/token"
MICROSOFT_ENDPOINT = "https://login.microsoftonline.com/{tenant}/oauth2/v2.0/token"
PROVIDERS = ("google", "microsoft")
AUTH_TYPES = ("password", "oauth2", "gmail")
RELAY_PROVIDERS = ("postmark", "sendgrid")

_HTTPS = re.compile(r"^https://[^\s/?#@]+(/[^\s#]*)?$")
# Plain HTTP only to this host itself: a local test endpoint or a sidecar, never across a network.
_LOOPBACK_HTTP = re.compile(r"^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?(/[^\s#]*)?$")
_CLIENT_ID = re.compile(r"^[\x21-\x7e]{1,500}$")
# A Microsoft Entra tenant: its id (a GUID), a domain, or one of common, organizations, consumers.
_TENANT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,99}$")
_DOMAIN = re.compile(r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$")


def preset_token_url(provider: str, tenant: str | None = None) -> str:
    """The token endpoint of a provider preset: `google`, or `microsoft` for a tenant (default `common`)."""
    if provider == "google":
        if tenant is not None:
            raise ValidationError("oauth_tenant", "a tenant is for the microsoft preset only")
        return GOOGLE_ENDPOINT
    if provider == "microsoft":
        tenant = tenant or "common"
        if not _TENANT.match(tenant):
            raise ValidationError("oauth_tenant", "must be a tenant id, a domain, or common/organizations")
        return MICROSOFT_ENDPOINT.format(tenant=tenant)
    raise ValidationError("oauth_provider", f"must be one of {', '.join(PROVIDERS)}")


def check_token_url(url: str) -> str:
    """An OAuth2 token endpoint: HTTPS, or plain HTTP to the loopback interface only."""
    if len(url) > 2000 or not (_HTTPS.match(url) or _LOOPBACK_HTTP.match(url)):
        raise ValidationError(
            "oauth_token_url", "must be an https:// URL (plain http:// only to 127.0.0.1 or localhost)"
        )
    return url


def check_client_id(client_id: str) -> str:
    """An OAuth2 client id: printable ASCII without spaces, at most 500 characters."""
    if not _CLIENT_ID.match(client_id):
        raise ValidationError("oauth_client_id", "must be printable ASCII without spaces (at most 500)")
    return client_id


def normalise_bounce_domain(domain: str) -> str:
    """A bounce domain as stored: lower case, without a trailing dot, a valid DNS name."""
    value = domain.strip().lower().rstrip(".")
    if not _DOMAIN.match(value) or len(value) > 253:
        raise ValidationError("bounce_domain", f"{domain!r} is not a domain name (e.g. bounces.example.com)")
    return value


def check_relay_provider(provider: str) -> str:
    """A relay whose event webhooks Mailroom reads: postmark or sendgrid."""
    if provider not in RELAY_PROVIDERS:
        raise ValidationError("relay_provider", f"must be one of {', '.join(RELAY_PROVIDERS)} (or none)")
    return provider
