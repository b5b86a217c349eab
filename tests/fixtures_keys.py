"""Pytest plugin: keys made once per test process (an RSA key takes ~0.1-1 s to make), for DKIM and secrets."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from worker.core.dkim import DkimKey, normalise_private_key


@pytest.fixture(scope="session")
def pem() -> bytes:
    """A fresh 2048-bit RSA key in PKCS#8 PEM (what `openssl genpkey` writes)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture(scope="session")
def key(pem: bytes) -> DkimKey:
    """The DKIM key of `pem` for selector mail2026 of example.org."""
    return DkimKey("example.org", "mail2026", normalise_private_key(pem))
