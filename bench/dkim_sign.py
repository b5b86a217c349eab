"""DKIM signing cost: `python -m bench.dkim_sign [N]` (default 2,000) signs a ~7 KB campaign email.

A 2048-bit RSA key, the worker's header list (relaxed/relaxed, rsa-sha256). Prints ms/message and
messages/s for Mailroom's signer (`worker.core.dkim.DkimKey.sign`, OpenSSL RSA through `cryptography`)
and, for comparison, for dkimpy's `dkim.sign` (pure-Python RSA) over N/20 messages (at least 20).
Each signature is checked with dkimpy once before timing. One process, one core: the figures are
per signing worker process, and vary with the machine's load.
"""

from __future__ import annotations

import hashlib
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime

import dkim as dkimpy
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

from worker.core.dkim import SIGNED_HEADERS, DkimKey, dns_record
from worker.core.message import build_message

PARAGRAPH = (
    "Our spring collection is here: linen shirts, light jackets and the walking shoes you asked "
    "for. Members get early access until Friday, and delivery is free on every order this week. "
)


def campaign_message() -> bytes:
    """A campaign email like the worker sends: text and HTML parts, List-Unsubscribe headers."""
    text = "Hello Reader,\n\n" + "\n\n".join(PARAGRAPH * 2 for _ in range(9)) + "\n\nThe Example team\n"
    items = "".join(
        f'<tr><td><a href="https://t.example.org/c/0f6c2a84-6d4f-4e8e-9b3b-3c1c8d0b2a1{i}">'
        f"{PARAGRAPH}</a></td></tr>\n"
        for i in range(10)
    )
    html = f"<html><body><h1>Spring news</h1><table>\n{items}</table></body></html>"
    email = {
        "id": 7,
        "created_at": datetime(2026, 11, 22, tzinfo=UTC),
        "recipient_email": "reader@example.com",
        "recipient_name": "Reader",
        "subject": "Spring news: the new collection and free delivery this week",
        "text_body": text,
        "html_body": html,
        "headers": {
            "List-Unsubscribe": "<https://t.example.org/u/0f6c2a84-6d4f-4e8e-9b3b-3c1c8d0b2a11>, "
            "<mailto:unsubscribe@example.org?subject=unsubscribe%200f6c2a84-6d4f-4e8e-9b3b-3c1c8d0b2a11>",
            "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
        },
    }
    return build_message(email, "news@example.org", "Example News").content


def timed(label: str, count: int, sign: Callable[[bytes], bytes], message: bytes) -> float:
    """Sign `count` times in rounds of count/10; print the median round's ms/message; return it."""
    per_round = max(1, count // 10)
    rounds = []
    for _ in range(max(1, count // per_round)):
        started = time.perf_counter()
        for _ in range(per_round):
            sign(message)
        rounds.append((time.perf_counter() - started) * 1000 / per_round)
    ms = statistics.median(rounds)
    print(
        f"{label}: {ms:.3f} ms/message, {1000 / ms:,.0f} messages/s "
        f"({per_round * len(rounds)} signatures; rounds {min(rounds):.3f}-{max(rounds):.3f} ms)",
        flush=True,
    )
    return ms


def main() -> None:
    """Sign with both signers, check each once with dkimpy, print the figures."""
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    record = dns_record(pem).encode("ascii")

    def dns(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == b"bench._domainkey.example.org." else None

    message = campaign_message()
    key = DkimKey("example.org", "bench", pem)

    def ours(message: bytes) -> bytes:
        return key.sign(message)

    def theirs(message: bytes) -> bytes:
        header = dkimpy.sign(
            message,
            b"bench",
            b"example.org",
            pem,
            canonicalize=(b"relaxed", b"relaxed"),
            include_headers=[name.encode("ascii") for name in SIGNED_HEADERS],
        )
        return bytes(header) + message

    started = time.perf_counter()
    first = ours(message)  # includes parsing (and validating) the key, once per DkimKey
    print(f"message: {len(message):,} bytes; 2048-bit RSA key")
    print(
        f"first signature with a new DkimKey (parses the key): {(time.perf_counter() - started) * 1000:.1f} ms"
    )
    for label, signed in (("ours", first), ("dkimpy", theirs(message))):
        if not dkimpy.verify(signed, dnsfunc=dns):
            raise SystemExit(f"{label}: the signature does not verify")
    mine = timed("worker.core.dkim (cryptography/OpenSSL)", count, ours, message)
    digest = hashlib.sha256(message).digest()

    def rsa_only(message: bytes) -> bytes:
        return private.sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256()))

    timed("  of which the RSA step alone", count, rsa_only, message)
    dkimpys = timed("dkimpy dkim.sign (pure Python)", max(20, count // 20), theirs, message)
    print(f"speed-up: {dkimpys / mine:.0f}x")


if __name__ == "__main__":
    main()
