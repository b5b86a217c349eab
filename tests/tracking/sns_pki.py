"""A test PKI and a local "AWS": certificates as SNS's are made, served over real HTTPS and HTTP in-process.

The tracker's `SnsVerifier` takes its fetcher and its trust store from the caller: the tests give it
a fetcher whose resolver sends every host to the local servers (so `sns.us-west-2.amazonaws.com` and
`attacker-bucket.s3.amazonaws.com` both answer, from here) and the test root as the only trust.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from worker.tracking.sns_trust import HttpFetcher

ISSUER_URL = "http://crt.test.amazontrust.com/issuer.der"


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: rsa.RSAPrivateKey

    def pem(self) -> bytes:
        """The certificate in PEM."""
        return self.cert.public_bytes(serialization.Encoding.PEM)


def authority(common: str, parent: Issued | None = None) -> Issued:
    """A CA certificate: self-signed (a root) or issued by `parent` (an intermediate)."""
    now = datetime.now(UTC)
    key = _key()
    signer = parent.key if parent else key
    builder = (
        x509.CertificateBuilder().subject_name(_name(common))
        .issuer_name(parent.cert.subject if parent else _name(common))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None if parent is None else 0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )  # fmt: skip
    if parent is not None:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(parent.key.public_key())
        builder = builder.add_extension(aki, critical=False)
    return Issued(builder.sign(signer, hashes.SHA256()), key)


def leaf(names: list[str], issuer: Issued | None, *, issuer_url: str | None = None) -> Issued:
    """A server certificate for `names` issued by `issuer` (self-signed when None)."""
    now = datetime.now(UTC)
    key = _key()
    signer = issuer.key if issuer else key
    builder = (
        x509.CertificateBuilder().subject_name(_name(names[0]))
        .issuer_name(issuer.cert.subject if issuer else _name(names[0]))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )  # fmt: skip
    if issuer is not None:
        aki = x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key())
        builder = builder.add_extension(aki, critical=False)
    if issuer_url is not None:
        where = x509.UniformResourceIdentifier(issuer_url)
        aia = x509.AuthorityInformationAccess(
            [x509.AccessDescription(x509.AuthorityInformationAccessOID.CA_ISSUERS, where)]
        )
        builder = builder.add_extension(aia, critical=False)
    return Issued(builder.sign(signer, hashes.SHA256()), key)


@dataclass
class Pki:
    """The test's trusted root, the issuing CA under it, and SNS's signing certificate from that CA."""

    root: Issued
    issuing: Issued
    signing: Issued

    @classmethod
    def make(cls) -> Pki:
        """A fresh root, issuing CA and SNS signing certificate (naming `sns.amazonaws.com`)."""
        root = authority("Test Root CA")
        issuing = authority("Test Issuing CA", root)
        return cls(root, issuing, leaf(["sns.amazonaws.com"], issuing, issuer_url=ISSUER_URL))


class LocalResolver(AbstractResolver):
    """Resolves every host to 127.0.0.1: https hosts to the HTTPS server, http to the HTTP one; remembers each."""

    def __init__(self, https_port: int, http_port: int) -> None:
        self.https_port, self.http_port = https_port, http_port
        self.hosts: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        """Where the local servers are."""
        self.hosts.append(host)
        local = self.http_port if port == 80 else self.https_port
        return [
            ResolveResult(
                hostname=host, host="127.0.0.1", port=local, family=socket.AF_INET, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        """Nothing to close."""


@dataclass
class FakeAws:
    """The local servers: files by path, and every request they saw (host and path with query)."""

    files: dict[str, bytes]
    requests: list[str] = field(default_factory=list)
    fetcher: HttpFetcher | None = None
    # what a hanging server waits for (never set while the test runs: the fetch must time out)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """Serve a file, a subscription confirmation, or a redirect (which must never be followed)."""
        self.requests.append(f"{request.host.split(':')[0]}{request.path_qs}")
        if request.path == "/hang.pem":
            await self.release.wait()
        if request.path == "/redirect.pem":
            raise web.HTTPFound("https://sns.us-west-2.amazonaws.com/SimpleNotificationService-good.pem")
        if request.query.get("Action") == "ConfirmSubscription":
            return web.Response(text="<ConfirmSubscriptionResponse/>", content_type="text/xml")
        body = self.files.get(request.path)
        if body is None:
            raise web.HTTPNotFound()
        return web.Response(body=body)


def _server_tls(pki: Pki) -> ssl.SSLContext:
    """A server TLS context with a certificate for SNS's regional host (and S3's) from the test PKI."""
    server = leaf(["sns.us-west-2.amazonaws.com", "*.s3.amazonaws.com"], pki.issuing)
    with tempfile.TemporaryDirectory() as tmp:
        chain, key = Path(tmp, "chain.pem"), Path(tmp, "key.pem")
        chain.write_bytes(server.pem() + pki.issuing.pem())
        key.write_bytes(
            server.key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(chain, key)
    return tls


@asynccontextmanager
async def fake_aws(pki: Pki, files: dict[str, bytes], fetch_seconds: float = 10.0) -> AsyncIterator[FakeAws]:
    """Local HTTPS (a certificate for SNS's regional hosts from the test PKI) and HTTP servers serving `files`."""
    aws = FakeAws(files)
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", aws.handle)
    tls = _server_tls(pki)
    runner = web.AppRunner(app)
    await runner.setup()
    https = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    http = web.TCPSite(runner, "127.0.0.1", 0)
    await https.start()
    await http.start()
    try:
        ports = [int(addr[1]) for addr in runner.addresses]
        client_tls = ssl.create_default_context(cadata=pki.root.pem().decode("ascii"))
        aws.fetcher = HttpFetcher(
            ssl_context=client_tls, resolver=LocalResolver(ports[0], ports[1]), timeout=fetch_seconds
        )
        yield aws
    finally:
        aws.release.set()
        await runner.cleanup()
