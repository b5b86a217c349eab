"""DKIM, DMARC and MX of a sender's domains.

DKIM: the TXT record at `selector._domainkey.domain` must carry the public half of the private key the
worker signs with (compared as RSA numbers, whether published as SubjectPublicKeyInfo, as most tools do,
or as a bare PKCS#1 key). DMARC: a record at `_dmarc` (or the organisational domain's), its policy, and
whether the mail we send aligns with it (DKIM's d= and the return path against the From domain, relaxed
or strict as adkim= and aspf= say). MX: bounces come back to the return-path domain, so it needs one.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from worker.ops.dns_checks.findings import INFO, OK, PROBLEM, WARNING, DnsFinding
from worker.ops.dns_checks.lookups import DnsUnreachable, Resolvers, txt, unreachable

DKIM_FIX = "publish the record `mailroom senders add` printed (the key's public half) at that name"


def check_dkim(domain: str, selector: str, public: Any, resolvers: Resolvers) -> list[DnsFinding]:
    """Findings about the DKIM key published for `selector` at `domain` against our key's public half."""
    name = f"{selector}._domainkey.{domain}"
    try:
        records = txt(name, resolvers)
    except ValueError as exc:
        return [DnsFinding(name, PROBLEM, "dkim_invalid", f"{exc}: receivers cannot use it")]
    keys = [r for r in records or [] if "p=" in r]
    if not keys:
        return [
            DnsFinding(
                name,
                PROBLEM,
                "dkim_missing",
                f"no DKIM key is published at {name}: every signature fails; {DKIM_FIX}",
            )
        ]
    verdicts = [_compare(r, public) for r in keys]
    if "match" in verdicts:
        found = [
            DnsFinding(name, OK, "dkim_match", f"the DKIM key at {name} matches the sender's private key")
        ]
        if len(keys) > 1:
            found.append(
                DnsFinding(
                    name,
                    WARNING,
                    "dkim_multiple",
                    f"{len(keys)} DKIM records at {name}: receivers may take any",
                )
            )
        return found
    if "revoked" in verdicts:
        return [
            DnsFinding(
                name, PROBLEM, "dkim_revoked", f"the DKIM key at {name} is revoked (empty p=); {DKIM_FIX}"
            )
        ]
    if "match" not in verdicts and "mismatch" in verdicts:
        return [
            DnsFinding(
                name,
                PROBLEM,
                "dkim_mismatch",
                f"the DKIM key at {name} is not the public half of the sender's private key: every signature"
                f" fails; {DKIM_FIX}",
            )
        ]
    return [
        DnsFinding(
            name, PROBLEM, "dkim_invalid", f'the DKIM record at {name} is not a usable key: "{keys[0]}"'
        )
    ]


def _compare(record: str, public: Any) -> str:
    """match, mismatch, revoked or invalid: one DKIM TXT record against our public key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    tags = _tags(record)
    if tags.get("k", "rsa").lower() != "rsa":
        return "mismatch"  # we sign with RSA: an Ed25519 key at our selector is someone else's
    p = "".join(tags.get("p", "").split())
    if not p:
        return "revoked"
    try:
        der = base64.b64decode(p, validate=True)
    except (binascii.Error, ValueError):
        return "invalid"
    key: Any
    try:
        key = serialization.load_der_public_key(der)
    except (ValueError, TypeError):
        # Some publish the bare PKCS#1 RSAPublicKey; read it through its PEM form.
        pem = (
            b"-----BEGIN RSA PUBLIC KEY-----\n" + base64.encodebytes(der) + b"-----END RSA PUBLIC KEY-----\n"
        )
        try:
            key = serialization.load_pem_public_key(pem)
        except (ValueError, TypeError):
            return "invalid"
    if not isinstance(key, rsa.RSAPublicKey):
        return "mismatch"
    return "match" if key.public_numbers() == public.public_numbers() else "mismatch"


def _tags(record: str) -> dict[str, str]:
    """A DKIM or DMARC tag list (`k=v; k=v`), names lower-cased; later duplicates ignored."""
    tags: dict[str, str] = {}
    for part in record.split(";"):
        name, sep, value = part.partition("=")
        if sep:
            tags.setdefault(name.strip().lower(), value.strip())
    return tags


def check_dmarc(
    from_domain: str, dkim_domain: str | None, envelope_domain: str, resolvers: Resolvers
) -> list[DnsFinding]:
    """Findings about the DMARC record that governs `from_domain`, and whether our mail aligns with it."""
    from checkdmarc.dmarc import DMARCError, DMARCRecordNotFound, get_dmarc_record  # type: ignore[import-untyped]

    try:
        found = get_dmarc_record(from_domain, **resolvers.kwargs)
    except DMARCRecordNotFound as exc:
        if unreachable(exc):
            raise DnsUnreachable("no answer for the DMARC record") from None
        return [
            DnsFinding(
                f"_dmarc.{from_domain}",
                WARNING,
                "dmarc_missing",
                f"{from_domain} publishes no DMARC record: Gmail and Yahoo refuse or spam-folder bulk mail without"
                f' one; publish a TXT record at _dmarc.{from_domain} such as "v=DMARC1; p=none;'
                f' rua=mailto:dmarc@{from_domain}", then tighten p= once reports show every source aligned',
            ),
            *_alignment(from_domain, dkim_domain, envelope_domain, {}),
        ]
    except DMARCError as exc:
        if unreachable(exc):
            raise DnsUnreachable("no answer for the DMARC record") from None
        return [
            DnsFinding(
                f"_dmarc.{from_domain}",
                WARNING,
                "dmarc_invalid",
                f"the DMARC record of {from_domain} is not valid: {exc}",
            )
        ]
    tags = {k: str(v.get("value")) for k, v in (found.get("parsed", {}).get("tags") or {}).items()}
    return _policy(from_domain, found, tags) + _alignment(from_domain, dkim_domain, envelope_domain, tags)


def _policy(from_domain: str, found: dict[str, Any], tags: dict[str, str]) -> list[DnsFinding]:
    """What the DMARC record's p= and pct= say receivers do with mail that fails."""
    where = f"_dmarc.{found.get('location') or from_domain}"
    policy = tags.get("p", "none")
    findings = []
    if policy == "none":
        findings.append(
            DnsFinding(
                where,
                INFO,
                "dmarc_policy_none",
                f'DMARC of {from_domain} is "p=none": receivers only report, mail forged in its name is still'
                " delivered; move to p=quarantine, then p=reject, once aggregate reports show every source aligned",
            )
        )
    else:
        findings.append(
            DnsFinding(where, OK, "dmarc_policy", f'DMARC of {from_domain}: "{found.get("record")}"')
        )
    if tags.get("pct", "100") not in ("100", "None"):
        findings.append(
            DnsFinding(
                where,
                INFO,
                "dmarc_partial",
                f"DMARC of {from_domain} applies to {tags['pct']}% of failing mail",
            )
        )
    return findings


def _alignment(
    from_domain: str, dkim_domain: str | None, envelope_domain: str, tags: dict[str, str]
) -> list[DnsFinding]:
    """DKIM's d= and the return-path domain against the From domain, as adkim= and aspf= ask (relaxed by default)."""
    dkim_ok = dkim_domain is not None and aligned(dkim_domain, from_domain, tags.get("adkim", "r"))
    spf_ok = aligned(envelope_domain, from_domain, tags.get("aspf", "r"))
    findings = []
    if dkim_domain is not None and not dkim_ok:
        findings.append(
            DnsFinding(
                from_domain,
                WARNING,
                "dkim_not_aligned",
                f"the DKIM domain {dkim_domain} does not align with the From domain {from_domain}"
                f" (adkim={tags.get('adkim', 'r')}): its signatures do not count for DMARC; sign with d={from_domain}",
            )
        )
    if not dkim_ok and not spf_ok:
        findings.append(
            DnsFinding(
                from_domain,
                WARNING,
                "dmarc_not_aligned",
                f"neither DKIM nor the return path ({envelope_domain}) aligns with the From domain {from_domain}:"
                " every message fails DMARC; sign with DKIM for the From domain, or use a bounce domain below it",
            )
        )
    elif dkim_ok or spf_ok:
        how = " and ".join(w for w, ok in (("DKIM", dkim_ok), ("SPF", spf_ok)) if ok)
        findings.append(
            DnsFinding(from_domain, OK, "dmarc_aligned", f"mail from {from_domain} aligns through {how}")
        )
    return findings


def aligned(domain: str, from_domain: str, mode: str = "r") -> bool:
    """DMARC alignment of `domain` (DKIM's d=, or the return path's) with the From domain: the same
    organizational domain (by the public suffix list) when relaxed, `r`; the same domain when strict, `s`."""
    from checkdmarc.utils import get_base_domain  # type: ignore[import-untyped]

    domain, from_domain = domain.lower().rstrip("."), from_domain.lower().rstrip(".")
    if mode == "s":
        return domain == from_domain
    return bool(get_base_domain(domain) == get_base_domain(from_domain))


def check_mx(domain: str, resolvers: Resolvers) -> list[DnsFinding]:
    """Findings about the MX of the return-path domain, where bounces and complaints come back."""
    from checkdmarc.utils import DNSException, DNSExceptionNXDOMAIN, get_mx_record_set

    try:
        found = get_mx_record_set(domain, **resolvers.kwargs)
    except DNSExceptionNXDOMAIN:
        found = {"hosts": [], "null_mx": False}
    except DNSException as exc:
        raise DnsUnreachable(f"no answer for the MX of {domain}") from exc
    hosts = [str(h.get("hostname")) for h in found.get("hosts") or []]
    if found.get("null_mx"):
        return [
            DnsFinding(
                domain,
                WARNING,
                "mx_null",
                f"the return-path domain {domain} publishes a null MX: it accepts no mail, so bounces are lost",
            )
        ]
    if not hosts:
        return [
            DnsFinding(
                domain,
                WARNING,
                "mx_missing",
                f"the return-path domain {domain} has no MX record: bounces and complaints cannot come back;"
                f" publish an MX record pointing at the host that receives them (mailroom bounces receive)",
            )
        ]
    return [DnsFinding(domain, OK, "mx_present", f"MX of {domain}: {', '.join(hosts[:5])}")]
