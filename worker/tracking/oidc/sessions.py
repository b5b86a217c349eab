"""Login sessions (`mailroom.oauth_sessions`): created at the OIDC callback, found by the cookie's hash, ended by
the theft rule, the idle limit or the issuer's refusal to refresh.

The rules, in the order `check` applies them:

- a session unused for `IDLE_DAYS` (37) days is over (maintenance also deletes it);
- a session used from another user agent, or from another network than it was created on (another
  /24 for IPv4, another /48 for IPv6; an IPv4-mapped IPv6 address counts as IPv4), is taken to be a
  stolen cookie: the session is deleted and whoever holds the cookie logs in again;
- once the access token's lifetime has passed, the refresh token is used: the issuer's new refresh
  token (rotation) replaces the old one, encrypted; a refusal ends the session, as does the lack of
  a refresh token (the issuer gave none: the session lasts as long as the access token).
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import class_row

IDLE_DAYS = 37
IDLE = timedelta(days=IDLE_DAYS)
IPV4_PREFIX = 24
IPV6_PREFIX = 48

CREATE = """
INSERT INTO mailroom.oauth_sessions (session_secret_hash, user_sub, email, refresh_token_encrypted,
    access_token_expires_at, user_agent, ip_address, created_at, updated_at)
VALUES (%(hash)s, %(sub)s, %(email)s, %(refresh)s, %(expires)s, %(agent)s, %(ip)s, %(now)s, %(now)s)
"""
FIND = """
SELECT id, user_sub, email, refresh_token_encrypted, access_token_expires_at, user_agent,
       host(ip_address) AS ip_address, updated_at
FROM mailroom.oauth_sessions WHERE session_secret_hash = %s
"""
LOCK = FIND + " FOR UPDATE"
TOUCH = "UPDATE mailroom.oauth_sessions SET updated_at = %(now)s WHERE id = %(id)s"
REFRESHED = """
UPDATE mailroom.oauth_sessions
SET refresh_token_encrypted = %(refresh)s, access_token_expires_at = %(expires)s,
    last_refreshed_at = %(now)s, updated_at = %(now)s
WHERE id = %(id)s
"""
DELETE = "DELETE FROM mailroom.oauth_sessions WHERE id = %s"
DELETE_BY_HASH = "DELETE FROM mailroom.oauth_sessions WHERE session_secret_hash = %s"


@dataclass(frozen=True)
class SessionRow:
    """One stored session, as `FIND` reads it."""

    id: int
    user_sub: str
    email: str
    refresh_token_encrypted: bytes | None
    access_token_expires_at: datetime | None
    user_agent: str | None
    ip_address: str | None
    updated_at: datetime


def secret_hash(cookie_value: str) -> bytes:
    """What is stored for a session cookie: its SHA-256 (the cookie is 256 random bits; no salt is needed)."""
    return hashlib.sha256(cookie_value.encode("ascii", "replace")).digest()


def same_network(stored: str | None, current: str | None) -> bool:
    """Whether two client addresses are on one network in the theft rule's sense (/24 IPv4, /48 IPv6)."""
    if stored is None or current is None:
        return stored == current
    try:
        a, b = _address(stored), _address(current)
    except ValueError:
        return False
    if a.version != b.version:
        return False
    prefix = IPV4_PREFIX if a.version == 4 else IPV6_PREFIX
    return ipaddress.ip_network(f"{a}/{prefix}", strict=False) == ipaddress.ip_network(
        f"{b}/{prefix}", strict=False
    )


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def theft(row: SessionRow, user_agent: str | None, ip: str | None) -> str | None:
    """Why this request may not use the session (the theft rule), or None when it may."""
    if (row.user_agent or "") != (user_agent or ""):
        return "the user agent changed"
    if not same_network(row.ip_address, ip):
        return "the network changed"
    return None


def idle(row: SessionRow, now: datetime) -> bool:
    """Whether the session went unused too long to be used again."""
    return row.updated_at + IDLE <= now


async def create(conn: psycopg.AsyncConnection[Any], values: dict[str, Any]) -> None:
    """Store a new session (`values`: hash, sub, email, refresh, expires, agent, ip, now)."""
    await conn.execute(CREATE, values)


async def find(
    conn: psycopg.AsyncConnection[Any], cookie_value: str, *, lock: bool = False
) -> SessionRow | None:
    """The session a cookie names, or None; with `lock`, the row is locked until the transaction ends."""
    async with conn.cursor(row_factory=class_row(SessionRow)) as cur:
        await cur.execute(LOCK if lock else FIND, (secret_hash(cookie_value),))
        return await cur.fetchone()
