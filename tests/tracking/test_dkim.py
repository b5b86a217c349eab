"""DKIM: final bytes signed with the sender's key, List-Unsubscribe headers covered, verified offline."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import dkim as dkimpy
import psycopg
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.tracking import enqueue_one, https
from tests.tracking.dkim_helpers import _dns
from tests.worker.helpers import run_until_drained
from worker.cli.main import main
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.dkim import dns_record, normalise_private_key
from worker.core.validation import ValidationError
from worker.devtools.sink import RunningSink
from worker.ops.senders import SenderSpec, add_sender


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
    enqueue_one(db_url, https(settings))  # a campaign email: List-Unsubscribe headers, tracked HTML
    enqueue_one(db_url, settings, campaign_id=None, to="ada@example.com")  # transactional
    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05, lease_seconds=2.0)
    assert await run_until_drained(db_url, fast) == 2
    assert len(smtp_sink.messages) == 2
    for received in smtp_sink.messages:
        assert received.content.startswith(b"DKIM-Signature:")
        assert dkimpy.verify(received.content, dnsfunc=_dns(pem)) is True
    campaign = next(m for m in smtp_sink.messages if m.message["List-Unsubscribe-Post"])
    assert campaign.message["List-Unsubscribe"].startswith("<https://t.example.org/u/")


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


# The signer's own behaviour: the tag list and folding, RFC 6376 header selection, canonicalisation
# edge cases, line endings, and bad input. dkimpy is the independent verifier throughout.
