"""Where SNS may send the tracker, and why a signing certificate is believed: hosts, fetches, chains.

An SNS message names the URL of its signing certificate and, for a subscription, a URL to GET. Both
are written by whoever sent the request, so the tracker fetches only from the SNS host itself
(`https://sns.<region>.amazonaws.com`, or `.amazonaws.com.cn`), never follows a redirect and reads a
bounded body within a timeout. TLS to that host is not taken as enough: the certificate fetched must
chain to a trusted root (the system's store by default) and name the SNS host. AWS serves the leaf
alone, so the issuer is fetched from the leaf's caIssuers URL when it is on Amazon's own trust hosts.
"""

from __future__ import annotations

import ssl
import warnings
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver
from cryptography import x509
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509 import verification
from cryptography.x509.oid import AuthorityInformationAccessOID

MAX_BYTES = 64 * 1024
FETCH_SECONDS = 10.0
MAX_URL = 2048
# The certificate's issuers are published on these hosts (Amazon Trust Services).
ISSUER_HOST_SUFFIX = ".amazontrust.com"
# Printable ASCII without space, backslash, quotes or angle brackets: what AWS's URLs are made of,
# and nothing two URL parsers could read differently.
_URL_CHARS = frozenset(chr(c) for c in range(0x21, 0x7F)) - set("\\\"'<>`{}|^")

# GET a URL and return its body; `FetchRefused` when the answer is not a plain 200 within bounds.
Fetch = Callable[[str], Awaitable[bytes]]


class FetchRefused(Exception):
    """The server answered, but not with what may be used (a redirect, an error, too large)."""


@dataclass(frozen=True)
class SnsUrl:
    """An https URL on the SNS host, rebuilt from its checked parts (what is fetched, and nothing else)."""

    host: str
    region: str
    path: str
    query: str

    def __str__(self) -> str:
        return f"https://{self.host}{self.path}" + (f"?{self.query}" if self.query else "")


def _region(label: str) -> bool:
    """Whether a host label is an AWS region name (`us-west-2`, `us-gov-east-1`, `cn-north-1`)."""
    words = label.split("-")
    return (
        len(words) >= 3
        and all(w.isascii() and w.isalnum() and w.islower() for w in words[:-1])
        and len(words[0]) == 2
        and words[-1].isascii()
        and words[-1].isdigit()
    )


def sns_url(url: Any) -> SnsUrl | None:
    """The URL as an `SnsUrl` when it is https on `sns.<region>.amazonaws.com(.cn)`, port 443, no credentials."""
    if not isinstance(url, str) or len(url) > MAX_URL or not set(url) <= _URL_CHARS:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    labels = host.split(".")
    if (
        parts.scheme != "https"
        or parts.netloc.lower() not in (host, f"{host}:443")
        or port not in (None, 443)
        or parts.fragment
        or labels[0] != "sns"
        or labels[2:] not in (["amazonaws", "com"], ["amazonaws", "com", "cn"])
        or not _region(labels[1])
        or (labels[-1] == "cn") != labels[1].startswith("cn-")
    ):
        return None
    return SnsUrl(host, labels[1], parts.path or "/", parts.query)


def certificate_url(url: Any) -> SnsUrl | None:
    """The SigningCertURL as an `SnsUrl` when it is a `.pem` file on the SNS host (no query)."""
    checked = sns_url(url)
    if checked is None or checked.query or not checked.path.endswith(".pem"):
        return None
    return checked


def subscribe_url(url: Any, topic: str) -> SnsUrl | None:
    """The SubscribeURL as an `SnsUrl` when it confirms this topic on the SNS host of the topic's region."""
    checked = sns_url(url)
    if checked is None or checked.path != "/":
        return None
    try:
        query = parse_qs(checked.query, max_num_fields=8)
    except ValueError:  # more fields than a confirmation has
        return None
    arn = topic.split(":")
    if (
        query.get("Action") != ["ConfirmSubscription"]
        or query.get("TopicArn") != [topic]
        or len(query.get("Token", [])) != 1
        or len(arn) < 6
        or arn[3] != checked.region
    ):
        return None
    return checked


def issuer_urls(leaf: x509.Certificate) -> list[str]:
    """The leaf's caIssuers URLs that are on Amazon's trust hosts (any other is never fetched)."""
    try:
        access = leaf.extensions.get_extension_for_class(x509.AuthorityInformationAccess).value
    except x509.ExtensionNotFound:
        return []
    found: list[str] = []
    for item in access:
        location = item.access_location
        if item.access_method != AuthorityInformationAccessOID.CA_ISSUERS:
            continue
        if not isinstance(location, x509.UniformResourceIdentifier):
            continue
        url = location.value
        if not set(url) <= _URL_CHARS or len(url) > MAX_URL:
            continue
        parts = urlsplit(url)
        host = parts.hostname or ""
        if (
            parts.scheme in ("http", "https")
            and host.endswith(ISSUER_HOST_SUFFIX)
            and parts.netloc.lower() == host
        ):
            found.append(f"{parts.scheme}://{host}{parts.path}")
    return found[:2]


class HttpFetcher:
    """GETs a URL: status 200 only, no redirect followed, at most `max_bytes`, within `timeout` seconds."""

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        resolver: AbstractResolver | None = None,
        timeout: float = FETCH_SECONDS,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        self.ssl_context = ssl_context or ssl.create_default_context()
        self.resolver = resolver
        self.timeout = timeout
        self.max_bytes = max_bytes

    async def __call__(self, url: str) -> bytes:
        """The body at `url`; `FetchRefused` for anything but a bounded 200, aiohttp/OS errors when unreachable."""
        connector = aiohttp.TCPConnector(ssl=self.ssl_context, resolver=self.resolver, force_close=True)
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as http,
            http.get(url, allow_redirects=False) as resp,
        ):
            if resp.status != 200:
                raise FetchRefused(f"HTTP {resp.status}")
            if (resp.content_length or 0) > self.max_bytes:
                raise FetchRefused("body too large")
            body = await resp.content.read(self.max_bytes + 1)
            if len(body) > self.max_bytes:
                raise FetchRefused("body too large")
            return body


def system_roots() -> list[x509.Certificate]:
    """The system's trusted roots (OpenSSL's default CA file); empty when there is none."""
    paths = ssl.get_default_verify_paths()
    for name in (paths.cafile, paths.openssl_cafile):
        if name and Path(name).is_file():
            # Some distributions' bundles hold old roots cryptography warns about (a negative serial):
            # the bundle is the system's choice, not ours to lint.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CryptographyDeprecationWarning)
                try:
                    return x509.load_pem_x509_certificates(Path(name).read_bytes())
                except ValueError:
                    continue
    return []


def load_certificates(data: bytes) -> list[x509.Certificate]:
    """Certificates in PEM (one or more) or a single DER; `ValueError` when there are none."""
    if b"-----BEGIN" in data:
        return x509.load_pem_x509_certificates(data)
    return [x509.load_der_x509_certificate(data)]


def sns_names(host: str) -> list[str]:
    """The names an SNS signing certificate may carry for this host."""
    partition = "sns.amazonaws.com.cn" if host.endswith(".cn") else "sns.amazonaws.com"
    return [partition, host]


def chain_verified(
    store: verification.Store,
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    host: str,
    at: datetime,
) -> bool:
    """Whether the leaf chains to the store at time `at` and names the SNS host (in its SAN)."""
    for name in sns_names(host):
        verifier = (
            verification.PolicyBuilder().store(store).time(at).build_server_verifier(x509.DNSName(name))
        )
        try:
            verifier.verify(leaf, list(intermediates))
        except verification.VerificationError:
            continue
        return True
    return False
