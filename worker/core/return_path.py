"""VERP return paths: an envelope sender per email and recipient whose token the bounce intake trusts.

`bounces+<id>-<rcpt>-<mac>@<bounce domain>`: the email id in base 36, a keyed hash of the recipient
(8 base32 characters, so the address itself never appears in the return path) and an HMAC-SHA256 of
both truncated to 80 bits, keyed by a key derived from `MAILROOM_SECRET_KEY`. Lower case only, because
relays and mailbox providers may change the case of a local part. The whole local part stays within
RFC 5321's 64 characters. It lives in the core so the engine (which sets MAIL FROM) can call it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from functools import lru_cache

from worker.core.config import ConfigError, Settings

DEFAULT_PREFIX = "bounces"
MAX_LOCAL_PART = 64
_RCPT_CHARS = 8  # 40 bits: tells the recipients of one email apart, never reveals the address
_MAC_CHARS = 16  # 80 bits of HMAC-SHA256: forging one is out of reach
_KEY_CONTEXT = b"mailroom return path v1"
# Matched whole (fullmatch): a `$` would also match before a final newline.
_TOKEN = re.compile(r"([0-9a-z]{1,13})-([a-z2-7]{8})-([a-z2-7]{16})")
_PREFIX = re.compile(r"[a-z0-9][a-z0-9._-]{0,30}")


def derive_key(secret: str) -> bytes:
    """The return-path key: HMAC-SHA256 of a fixed context under the secret key, never the key itself."""
    return hmac.new(secret.strip().encode("utf-8"), _KEY_CONTEXT, hashlib.sha256).digest()


def bounce_key(settings: Settings) -> bytes:
    """The return-path key for these settings: from `MAILROOM_SECRET_KEY`, else the key file in $MAILROOM_HOME."""
    if settings.secret_key:
        return derive_key(settings.secret_key)
    path = settings.home / "secret.key"
    if path.exists():
        return derive_key(path.read_text(encoding="ascii"))
    raise ConfigError("MAILROOM_SECRET_KEY is not set: return-path tokens are signed with it")


def optional_bounce_key(settings: Settings) -> bytes | None:
    """The return-path key, or None where no secret key is configured (then no token is authentic)."""
    try:
        return bounce_key(settings)
    except ConfigError:
        return None


@lru_cache(maxsize=16)
def _prepared(key: bytes) -> hmac.HMAC:
    return hmac.new(key, digestmod=hashlib.sha256)


def keyed_digest(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 of `message` under `key`, from a prepared copy (the key schedule is done once)."""
    mac = _prepared(key).copy()
    mac.update(message)
    return mac.digest()


def b32_prefix(digest: bytes, chars: int) -> str:
    """The first `chars` lower-case base32 characters of `digest`, encoding only the bytes they need
    (base32 of a whole digest cost more than the HMAC itself, on every email's hot path)."""
    return base64.b32encode(digest[: (chars * 5 + 7) // 8]).decode("ascii").lower()[:chars]


def base36(n: int) -> str:
    """`n` (not negative) in lower-case base 36: short numbers in tokens that travel in addresses and links."""
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out


def recipient_hash(recipient: str, key: bytes) -> str:
    """The keyed hash of an address that a return path carries (case-insensitive)."""
    return b32_prefix(keyed_digest(key, b"rcpt\0" + recipient.strip().lower().encode("utf-8")), _RCPT_CHARS)


def _mac(body: str, key: bytes) -> str:
    return b32_prefix(keyed_digest(key, b"verp\0" + body.encode("ascii")), _MAC_CHARS)


def return_path(email_id: int, recipient: str, bounce_domain: str, local_prefix: str, key: bytes) -> str:
    """The envelope sender for one email to one recipient: `<prefix>+<token>@<bounce_domain>`."""
    if email_id < 0:
        raise ValueError("an email id is never negative")
    prefix = local_prefix.lower()
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"return-path prefix {local_prefix!r} must be letters, digits, '.', '_' or '-'")
    body = f"{base36(email_id)}-{recipient_hash(recipient, key)}"
    local = f"{prefix}+{body}-{_mac(body, key)}"
    if len(local) > MAX_LOCAL_PART:
        raise ValueError(f"return path local part {local!r} is longer than {MAX_LOCAL_PART} characters")
    return f"{local}@{bounce_domain.strip().lower()}"


def parse_return_path(address: str, key: bytes) -> tuple[int, str] | None:
    """(email id, recipient hash) of a return path whose token is authentic; None for anything else."""
    text = address.strip().strip("<>").strip().lower()
    local, at, _domain = text.rpartition("@")
    if not at:
        return None
    _prefix, plus, token = local.rpartition("+")
    match = _TOKEN.fullmatch(token) if plus else None
    if match is None:
        return None
    body = f"{match.group(1)}-{match.group(2)}"
    # Constant time: a forger learns nothing from how long a wrong MAC took to refuse.
    if not hmac.compare_digest(_mac(body, key), match.group(3)):
        return None
    return int(match.group(1), 36), match.group(2)


def looks_like_return_path(address: str) -> bool:
    """Whether an address has the shape of a return path (authentic or not): a forged one is not ignored silently."""
    local = address.strip().strip("<>").strip().lower().rpartition("@")[0]
    _prefix, plus, token = local.rpartition("+")
    return bool(plus) and _TOKEN.fullmatch(token) is not None


@lru_cache(maxsize=8)
def _cached_key(secret: str) -> bytes:
    return derive_key(secret)


def envelope_sender(
    settings: Settings, email_id: int, recipient: str, from_email: str, bounce_domain: str | None = None
) -> str:
    """MAIL FROM for an email: its VERP return path on the sender's `bounce_domain`, else on
    `MAILROOM_BOUNCE_DOMAIN`, else `from_email` unchanged."""
    domain = bounce_domain or settings.bounce_domain
    if not domain:
        return from_email
    key = _cached_key(settings.secret_key) if settings.secret_key else bounce_key(settings)
    return return_path(email_id, recipient, domain, DEFAULT_PREFIX, key)
