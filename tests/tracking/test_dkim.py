"""DKIM: final bytes signed with the sender's key, List-Unsubscribe headers covered, verified offline."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dkim as dkimpy
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.tracking import enqueue_one
from tests.worker.helpers import run_until_drained
from worker.cli import main
from worker.config import Settings
from worker.crypto import SecretBox
from worker.dkim import DkimKey, dns_record, normalise_private_key
from worker.message import build_message
from worker.senders import SenderSpec, add_sender
from worker.sink import RunningSink
from worker.validation import ValidationError


@pytest.fixture(scope="module")
def pem() -> bytes:
    """A fresh 2048-bit RSA key in PKCS#8 PEM (what `openssl genpkey` writes)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _dns(pem: bytes, name: bytes = b"mail2026._domainkey.example.org.") -> Any:
    record = dns_record(normalise_private_key(pem)).encode("ascii")

    def lookup(query: bytes, timeout: int = 5) -> bytes | None:
        return record if query == name else None

    return lookup


def _campaign_message(headers: dict[str, str]) -> bytes:
    email = {
        "id": 7,
        "created_at": datetime(2026, 11, 22, tzinfo=UTC),
        "recipient_email": "reader@example.com",
        "recipient_name": "Reader",
        "subject": "Spring news",
        "text_body": "Hello",
        "html_body": "<p>Hello</p>",
        "headers": headers,
    }
    return build_message(email, "news@example.org", "Example News").content


UNSUBSCRIBE = {
    "List-Unsubscribe": "<https://t.example.org/u/0f6c2a84-6d4f-4e8e-9b3b-3c1c8d0b2a11>, "
    "<mailto:unsubscribe@example.org?subject=unsubscribe%200f6c2a84-6d4f-4e8e-9b3b-3c1c8d0b2a11>",
    "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
}


def test_signature_verifies_offline_and_covers_both_list_unsubscribe_headers(pem: bytes) -> None:
    key = DkimKey("example.org", "mail2026", normalise_private_key(pem))
    signed = key.sign(_campaign_message(UNSUBSCRIBE))
    assert signed.startswith(b"DKIM-Signature: ")
    assert dkimpy.verify(signed, dnsfunc=_dns(pem)) is True
    header = signed.split(b"\r\n\r\n", 1)[0].replace(b"\r\n", b"").replace(b" ", b"").replace(b"\t", b"")
    signed_names = re.search(rb";h=([^;]+)", header)
    assert signed_names is not None
    names = signed_names.group(1).lower().split(b":")
    assert b"list-unsubscribe" in names and b"list-unsubscribe-post" in names
    assert b"d=example.org" in header and b"s=mail2026" in header


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"List-Unsubscribe=One-Click", b"List-Unsubscribe=Nope"),
        (b"t.example.org/u/", b"evil.example/u/"),
        (b"Subject: Spring news", b"Subject: Spring sale"),
        (b"\r\n\r\n", b"\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\n"),  # added a second one
    ],
)
def test_altered_headers_break_the_signature(pem: bytes, old: bytes, new: bytes) -> None:
    signed = DkimKey("example.org", "mail2026", normalise_private_key(pem)).sign(
        _campaign_message(UNSUBSCRIBE)
    )
    assert old in signed
    assert dkimpy.verify(signed.replace(old, new, 1), dnsfunc=_dns(pem)) is False


def test_list_unsubscribe_post_cannot_be_added_to_a_transactional_message(pem: bytes) -> None:
    signed = DkimKey("example.org", "mail2026", normalise_private_key(pem)).sign(_campaign_message({}))
    assert dkimpy.verify(signed, dnsfunc=_dns(pem)) is True
    forged = signed.replace(b"\r\n\r\n", b"\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\r\n", 1)
    assert dkimpy.verify(forged, dnsfunc=_dns(pem)) is False


async def test_worker_signs_what_it_sends_with_the_sender_key(
    db_url: str, settings: Settings, smtp_sink: RunningSink, pem: bytes
) -> None:
    with psycopg.connect(db_url) as conn:
        add_sender(
            conn,
            SenderSpec(
                "signed",
                "news@example.org",
                "127.0.0.1",
                smtp_sink.port,
                smtp_security="none",
                dkim_domain="Example.org",
                dkim_selector="mail2026",
            ),
            None,
            SecretBox(settings.secret_key or ""),
            pem,
        )
        stored = conn.execute(
            "SELECT dkim_domain, dkim_selector, dkim_private_key_encrypted FROM mailroom.sender_accounts"
        ).fetchone()
    assert stored is not None and stored[:2] == ("example.org", "mail2026")
    assert b"PRIVATE KEY" not in bytes(stored[2])  # encrypted at rest
    enqueue_one(db_url, settings)  # a campaign email: List-Unsubscribe headers, tracked HTML
    enqueue_one(db_url, settings, campaign_id=None, to="ada@example.com")  # transactional
    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05, lease_seconds=2.0)
    assert await run_until_drained(db_url, fast) == 2
    assert len(smtp_sink.messages) == 2
    for received in smtp_sink.messages:
        assert received.content.startswith(b"DKIM-Signature:")
        assert dkimpy.verify(received.content, dnsfunc=_dns(pem)) is True
    campaign = next(m for m in smtp_sink.messages if m.message["List-Unsubscribe-Post"])
    assert campaign.message["List-Unsubscribe"].startswith("<http://localhost:8025/u/")


def test_bad_dkim_input_is_refused_and_nothing_is_stored(db_url: str, settings: Settings, pem: bytes) -> None:
    ec_pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    cases: list[tuple[dict[str, str | None], bytes | None, str]] = [
        ({"dkim_domain": "example.org", "dkim_selector": None}, pem, "together"),
        ({"dkim_domain": "example.org", "dkim_selector": "s1"}, None, "together"),
        ({"dkim_domain": "not a domain", "dkim_selector": "s1"}, pem, "not a domain name"),
        ({"dkim_domain": "example.org", "dkim_selector": "s1;x=y"}, pem, "not a DKIM selector"),
        ({"dkim_domain": "example.org", "dkim_selector": "s1"}, b"-----BEGIN NONSENSE-----", "PEM"),
        ({"dkim_domain": "example.org", "dkim_selector": "s1"}, ec_pem, "only RSA"),
    ]
    with psycopg.connect(db_url) as conn:
        for fields, key, message in cases:
            spec = SenderSpec("bad", "news@example.org", "127.0.0.1", 25, **fields)  # type: ignore[arg-type]
            with pytest.raises(ValidationError, match=message):
                add_sender(conn, spec, None, SecretBox(settings.secret_key or ""), key)
        assert conn.execute("SELECT count(*) FROM mailroom.sender_accounts").fetchone() == (0,)


def test_cli_adds_a_dkim_sender_and_prints_the_dns_record(
    cli_env: dict[str, str], tmp_path: Path, pem: bytes, capsys: pytest.CaptureFixture[str], db_url: str
) -> None:
    key_file = tmp_path / "dkim.pem"
    key_file.write_bytes(pem)
    argv = [
        "senders",
        "add",
        "news",
        "--from",
        "news@example.org",
        "--host",
        "127.0.0.1",
        "--security",
        "none",
    ]
    dkim_args = [
        "--dkim-domain",
        "example.org",
        "--dkim-selector",
        "mail2026",
        "--dkim-key-file",
        str(key_file),
    ]
    assert main([*argv, *dkim_args]) == 0
    out = capsys.readouterr().out
    assert "mail2026._domainkey.example.org" in out
    assert dns_record(normalise_private_key(pem)) in out
    assert main([*argv[:2], "other", *argv[3:], "--dkim-domain", "example.org"]) == 2
    assert "together" in capsys.readouterr().err
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT name FROM mailroom.sender_accounts").fetchall() == [("news",)]
