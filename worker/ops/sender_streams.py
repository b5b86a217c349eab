"""Which email a sender account sends: its message streams, and the domains an email's own From may be in.

A stream keeps kinds of mail apart (campaign mail never through the relay of password resets); the
From domains keep a per-email From aligned with what the account signs for: each must be its DKIM
domain's organizational domain (relaxed DMARC alignment, as `mailroom senders check` judges it), so DKIM still passes DMARC;
an account without DKIM aligns them with its return path's domain instead (SPF's side of DMARC)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from worker.core.validation import ValidationError
from worker.ops.dns_checks.records import aligned

DEFAULT_STREAMS = ("transactional", "broadcast")
_STREAM = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_DOMAIN = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}\.)+[a-z0-9-]{1,63}$")


def checked_streams(streams: Iterable[str]) -> list[str]:
    """The streams, each once in the order given: 1 to 20 names like transactional or broadcast."""
    found = list(dict.fromkeys(s.strip() for s in streams))
    if not 1 <= len(found) <= 20:
        raise ValidationError("streams", "one to twenty streams, like transactional,broadcast")
    for stream in found:
        if not _STREAM.match(stream):
            raise ValidationError(
                "streams", f"{stream!r} is not a stream name (a-z, 0-9, _ and -, at most 32)"
            )
    return found


def checked_from_domains(
    domains: Iterable[str] | None, dkim_domain: str | None, return_domain: str | None = None
) -> list[str] | None:
    """The From domains, lower case, each once, aligned with the DKIM domain when the account signs,
    else with the domain of its return path (`return_domain`: its bounce domain, else its own From's),
    so DMARC passes by one or the other; None (the domain of the account's own From) when none are given."""
    if domains is None:
        return None
    found = list(dict.fromkeys(d.strip().lower().rstrip(".") for d in domains if d.strip()))
    if not found:
        return None
    if len(found) > 50:
        raise ValidationError("from_domains", "at most 50 domains")
    for domain in found:
        if not _DOMAIN.match(domain):
            raise ValidationError("from_domains", f"{domain!r} is not a domain name")
        anchor, what = (
            (dkim_domain, "DKIM domain") if dkim_domain else (return_domain, "return path's domain")
        )
        if anchor and not aligned(domain, anchor):
            raise ValidationError(
                "from_domains",
                f"{domain} is not aligned with the account's {what} {anchor}: DMARC would fail"
                f" (give a domain of the same organizational domain as {anchor}{'' if dkim_domain else '; or give the account a DKIM key'})",
            )
    return found


def _return_domain(values: dict[str, Any]) -> str | None:
    """The domain of the account's MAIL FROM: its bounce domain, else its own From's."""
    from_email = str(values.get("from_email") or "")
    return values.get("bounce_domain") or from_email.rpartition("@")[2].lower() or None


def checked(values: dict[str, Any]) -> dict[str, Any]:
    """A `SenderSpec`'s streams and From domains, checked and normalised, as lists (the columns' arrays)."""
    return {
        "streams": checked_streams(values.get("streams") or DEFAULT_STREAMS),
        "from_domains": checked_from_domains(
            values.get("from_domains"), values.get("dkim_domain"), _return_domain(values)
        ),
    }
