"""DKIM: sign each message's final bytes with a sender account's key, and check keys before they are stored.

Signing is our own RFC 6376 implementation (rsa-sha256, relaxed/relaxed): the canonicalisation
and header selection are a few byte-level regular expressions, and the RSA step is OpenSSL's
through `cryptography`, so a 2048-bit signature costs well under a millisecond instead of the
~11 ms of dkimpy's pure-Python RSA (which would block the worker's event loop). dkimpy stays the
reference verifier in the tests, and the canonicalisation follows it byte for byte.

The signed header list is explicit: dkimpy's default set omits `List-Unsubscribe-Post`, and a
receiver only honours RFC 8058 one-click unsubscribe when both List-Unsubscribe headers are
covered by a valid signature. Headers in the list that a message lacks are signed as absent, and
the ones that matter are signed once more than they occur, so nobody can add a copy on the way
without breaking the signature (RFC 6376 §5.4.2: each occurrence of a name in h= takes the next
instance from the bottom; one with no instance left signs the header as absent).

Where it runs: the worker signs inline on its event loop (`worker.engine.delivery`), about 1 ms per 7 KB
message with a 2048-bit key (`python -m bench.dkim_sign`), plus a one-off ~60-75 ms when a
sender's key is first parsed in a process. That blocks the loop for less than one SMTP round
trip, so other connections' sends are barely delayed, and it stays inline. What it does cost is
CPU: the worker spends ~0.8 ms of its own per email, so signing roughly halves the ceiling of one
worker process for signed mail. A thread would not win that back (`cryptography` holds the GIL
while signing: two threads sign no faster than one), more worker processes do. Revisit for
4096-bit keys (RSA signing grows with about the cube of the key size: roughly 7x).

Input: the CRLF wire form that `worker.core.message` builds. LF-only or mixed line endings are accepted
too: bare LFs become CRLF (as every verifier reads them) and `sign` returns that CRLF form, so the
bytes returned are exactly the bytes signed. A header block that does not parse as RFC 5322
fields is refused with `DkimError`.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import re
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING

from worker.core.message import Envelope
from worker.core.validation import ValidationError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

_SIGNED = ("date", "message-id", "reply-to", "mime-version", "content-type")
# Listed twice: one more time than a message carries them, so a second copy cannot be added in transit.
_OVERSIGNED = ("from", "to", "cc", "subject", "list-unsubscribe", "list-unsubscribe-post")
SIGNED_HEADERS = (*_OVERSIGNED, *_SIGNED, *_OVERSIGNED)
MIN_KEY_BITS = 1024
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DOMAIN = re.compile(rf"^(?:{_LABEL}\.)+[A-Za-z]{{2,63}}$")
_SELECTOR = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")

_BARE_LF = re.compile(rb"(?<!\r)\n")
_FIELD_NAME = re.compile(rb"([\x21-\x7e]+?):")  # up to the first colon, as dkimpy parses it
_WSP_RUN = re.compile(rb"[\t ]+")
_LINE_WIDTH = 78  # RFC 5322 §2.1.1: SHOULD be no more than 78 characters, excluding the CRLF
_HEADER_NAME = b"DKIM-Signature"
_SIGNED_NAMES = tuple(name.encode("ascii") for name in SIGNED_HEADERS)
# h= as (separator, text) atoms to fill lines with: it may break after any colon (FWS is allowed there).
_H_ATOMS = [
    (b" ", b"h=" + _SIGNED_NAMES[0] + b":"),
    *((b"", name + b":") for name in _SIGNED_NAMES[1:-1]),
    (b"", _SIGNED_NAMES[-1] + b";"),
]


class DkimError(ValueError):
    """A message could not be signed."""


@dataclass(frozen=True)
class DkimKey:
    """One sender account's signing identity: d=, s= and the RSA private key (PKCS#1 PEM)."""

    domain: str
    selector: str
    private_key: bytes = field(repr=False)  # never in a log line or a traceback's locals

    @cached_property
    def _rsa_key(self) -> rsa.RSAPrivateKey:
        """The parsed key, loaded on first use and kept for this object's life (loading validates it: ~60 ms)."""
        # cryptography is imported with the first key, not with the module: a worker starts sooner.
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        try:
            key = serialization.load_pem_private_key(self.private_key, password=None)
        except (ValueError, TypeError) as exc:
            raise DkimError(f"DKIM signing failed: unusable private key ({exc})") from None
        if not isinstance(key, rsa.RSAPrivateKey):
            raise DkimError("DKIM signing failed: the private key is not an RSA key")
        return key

    def sign(self, message: bytes, *, timestamp: int | None = None) -> bytes:
        """Return the message with its DKIM-Signature header prepended (relaxed/relaxed, rsa-sha256).

        `timestamp` is the t= value (seconds since the epoch); the current time when omitted.
        """
        try:
            domain, selector = self.domain.encode("ascii"), self.selector.encode("ascii")
        except UnicodeEncodeError:
            raise DkimError("DKIM signing failed: d= and s= must be ASCII") from None
        key = self._rsa_key
        message = _to_crlf(message)
        fields, body = _parse(message)
        body_hash = base64.b64encode(hashlib.sha256(_relaxed_body(body)).digest())
        stamp = int(time.time()) if timestamp is None else timestamp
        lines = _tag_lines(domain, selector, str(stamp).encode("ascii"), body_hash)
        signed = hashlib.sha256()
        for name, value in _select(fields, _SIGNED_NAMES):
            signed.update(name + b":" + _relaxed_value(value) + b"\r\n")
        # The signature header itself, b= empty, canonicalised, without its trailing CRLF (§3.7).
        signed.update(b"dkim-signature:" + _relaxed_value(b"".join(lines)[len(_HEADER_NAME) + 1 :]))
        signature = base64.b64encode(key.sign(signed.digest(), *_pkcs1_sha256()))
        return b"\r\n".join(_fold_b_value(lines, signature)) + b"\r\n" + message


@functools.cache
def _pkcs1_sha256() -> tuple[padding.PKCS1v15, utils.Prehashed]:
    """RSASSA-PKCS1-v1_5 over a SHA-256 digest computed here: the padding and algorithm `sign` takes."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, utils

    return padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())


def _to_crlf(message: bytes) -> bytes:
    """The message with every bare LF turned into CRLF (unchanged, not copied, when already CRLF)."""
    if message.count(b"\n") == message.count(b"\r\n"):
        return message
    return _BARE_LF.sub(b"\r\n", message)


def _parse(message: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Split a CRLF message into (lower-cased field name, unfolded raw value) pairs and the body.

    The header block ends at the first empty line (no empty line: no body). Like dkimpy, an
    mbox `From ` line is skipped and anything else that is neither a field nor a continuation
    is an error.
    """
    if message.startswith(b"\r\n"):
        return [], message[2:]
    end = message.find(b"\r\n\r\n")
    if end == -1:
        head, body = message.removesuffix(b"\r\n"), b""
    else:
        head, body = message[:end], message[end + 4 :]
    fields: list[tuple[bytes, bytes]] = []
    for line in head.split(b"\r\n") if head else ():
        if line[:1] in (b" ", b"\t"):
            if not fields:
                raise DkimError("DKIM signing failed: the message starts with a continuation line")
            name, value = fields[-1]
            fields[-1] = (name, value + line)  # unfolding is removing the CRLF (§3.4.2)
            continue
        match = _FIELD_NAME.match(line)
        if match is not None:
            fields.append((match.group(1).lower(), line[match.end() :]))
        elif not line.startswith(b"From "):
            raise DkimError(f"DKIM signing failed: not a header field: {line[:40]!r}")
    return fields, body


def _select(fields: list[tuple[bytes, bytes]], names: tuple[bytes, ...]) -> list[tuple[bytes, bytes]]:
    """The fields h= covers, in h= order (RFC 6376 §5.4.2).

    Each occurrence of a name takes the next instance of that field from the bottom of the
    header block up; once none is left the name is signed as absent (it contributes nothing),
    so a field added later anywhere breaks the signature.
    """
    selected = []
    below: dict[bytes, int] = {}  # per name: the index of the last instance taken
    for name in names:
        i = below.get(name, len(fields))
        while i > 0:
            i -= 1
            if fields[i][0] == name:
                selected.append(fields[i])
                break
        below[name] = i
    return selected


def _relaxed_value(value: bytes) -> bytes:
    """Relaxed header value (§3.4.2): whitespace runs to one space, none at either end."""
    return _WSP_RUN.sub(b" ", value).strip()


def _relaxed_body(body: bytes) -> bytes:
    """Relaxed body (§3.4.4): no whitespace at line ends, runs to one space, no empty lines at the end.

    A non-empty body ends with exactly one CRLF; an empty one (or only empty lines) is empty. A last
    line without a CRLF keeps one trailing space (it gets its CRLF after the whitespace step), as in
    dkimpy; SMTP bodies always end with a CRLF, so only non-SMTP input can meet this.
    """
    # Regular expressions that try a match at every space cost ~0.5 ms on a 7 KB body, more than
    # the RSA step: so each step runs only when a (C substring) search finds work for it.
    if b" \r\n" in body or b"\t\r\n" in body:
        lines = body.split(b"\r\n")  # the last piece is not followed by a CRLF: left as it is
        body = b"\r\n".join([*(line.rstrip(b" \t") for line in lines[:-1]), lines[-1]])
    if b"\t" in body or b"  " in body:
        body = _WSP_RUN.sub(b" ", body)
    end = len(body)
    while body.endswith(b"\r\n", 0, end):
        end -= 2
    return body[:end] + b"\r\n" if end else b""


def _tag_lines(domain: bytes, selector: bytes, stamp: bytes, body_hash: bytes) -> list[bytes]:
    """The DKIM-Signature header's lines up to an empty `b=`, which starts a line of its own.

    Tags are filled into lines of at most 78 characters; h= breaks after a colon (FWS is allowed
    there). b= begins its own line so the signature's length cannot change how the rest folds.
    """
    tags = (b"v=1", b"a=rsa-sha256", b"c=relaxed/relaxed", b"d=" + domain, b"s=" + selector, b"t=" + stamp)
    atoms = [*((b" ", tag + b";") for tag in tags), *_H_ATOMS, (b" ", b"bh=" + body_hash + b";")]
    lines = [_HEADER_NAME + b":"]
    for separator, atom in atoms:
        if len(lines[-1]) + len(separator) + len(atom) <= _LINE_WIDTH:
            lines[-1] += separator + atom
        else:
            lines.append(b" " + atom)
    lines.append(b" b=")
    return lines


def _fold_b_value(lines: list[bytes], signature: bytes) -> list[bytes]:
    """The header's lines with the base64 signature filling the b= line and continuation lines."""
    first = _LINE_WIDTH - len(lines[-1])
    folded = [*lines[:-1], lines[-1] + signature[:first]]
    width = _LINE_WIDTH - 1
    folded += [b" " + signature[i : i + width] for i in range(first, len(signature), width)]
    return folded


def sign_envelope(envelope: Envelope, key: DkimKey) -> Envelope:
    """The same envelope with signed content."""
    return replace(envelope, content=key.sign(envelope.content))


def check_identity(domain: str, selector: str) -> tuple[str, str]:
    """Validate a DKIM domain (d=) and selector (s=); return them lower-cased."""
    if not _DOMAIN.match(domain) or len(domain) > 253:
        raise ValidationError("dkim_domain", f"{domain!r} is not a domain name")
    if not _SELECTOR.match(selector) or len(selector) > 63:
        raise ValidationError("dkim_selector", f"{selector!r} is not a DKIM selector (letters, digits, -, .)")
    return domain.lower(), selector.lower()


def normalise_private_key(pem: bytes) -> bytes:
    """Load an RSA private key in PEM (PKCS#1 or PKCS#8, unencrypted) and return it as PKCS#1 PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValidationError("dkim_key", f"not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValidationError("dkim_key", "only RSA keys are supported (rsa-sha256)")
    if key.key_size < MIN_KEY_BITS:
        raise ValidationError("dkim_key", f"a {key.key_size}-bit key is too short; use 2048 bits")
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def dns_record(private_key: bytes) -> str:
    """The TXT record to publish at `<selector>._domainkey.<domain>` for this key."""
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(private_key, password=None)
    public = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return f"v=DKIM1; k=rsa; p={base64.b64encode(public).decode('ascii')}"
