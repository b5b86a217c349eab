"""SPF of a sender's domains: present, valid, within RFC 7208's 10 lookups, and authorising the relay.

checkdmarc fetches and parses the record, following include, a, mx and redirect; what it does not do is
say whether an address passes, so `evaluate` walks its parsed tree the way a receiver would (RFC 7208
§4.6: the first mechanism that matches decides; redirect only when none does). Mechanisms that depend on
the connecting client in ways a parse cannot know (exists, ptr, macros) give "unknown".
"""

from __future__ import annotations

import ipaddress
from typing import Any

from worker.ops.dns_checks.findings import OK, WARNING, DnsFinding
from worker.ops.dns_checks.lookups import DnsUnreachable, Resolvers, unreachable

LOOKUP_LIMIT = 10  # RFC 7208 §4.6.4: more is a permerror, and SPF then fails for every message
_DEPTH = 12  # include/redirect nesting followed by `evaluate` (checkdmarc refuses loops itself)

PASS, UNKNOWN = "pass", "unknown"


def check_spf(domain: str, role: str, relay: list[str], resolvers: Resolvers) -> list[DnsFinding]:
    """Findings about the SPF record of `domain` (`role`: "From domain" or "return-path domain")."""
    from checkdmarc.spf import SPFError, SPFRecordNotFound, parse_spf_record, query_spf_record  # type: ignore[import-untyped]

    try:
        record = query_spf_record(domain, **resolvers.kwargs)["record"]
    except SPFRecordNotFound as exc:
        if unreachable(exc):
            raise DnsUnreachable("no answer for the SPF record") from None
        return [
            DnsFinding(
                domain,
                WARNING,
                "spf_missing",
                f"the {role} {domain} publishes no SPF record: receivers cannot tell the relay may send for it;"
                f' publish a TXT record such as "v=spf1 {_suggest(relay)} -all"',
            )
        ]
    except SPFError as exc:
        return [_invalid(domain, role, exc)]
    try:
        parsed = parse_spf_record(record, domain, ignore_too_many_lookups=True, **resolvers.kwargs)
    except SPFError as exc:
        if unreachable(exc):
            raise DnsUnreachable("no answer while following the SPF record") from None
        return [_invalid(domain, role, exc, record)]
    findings: list[DnsFinding] = []
    lookups = int(parsed.get("dns_lookups") or 0)
    if lookups > LOOKUP_LIMIT:
        findings.append(
            DnsFinding(
                domain,
                WARNING,
                "spf_too_many_lookups",
                f"the SPF record of the {role} {domain} needs {lookups} DNS lookups, more than the {LOOKUP_LIMIT}"
                " receivers allow (RFC 7208): SPF fails for every message; flatten includes into ip4:/ip6:"
                " ranges or drop the ones no longer used",
            )
        )
    else:
        findings.append(
            DnsFinding(domain, OK, "spf_valid", f'SPF of the {role} {domain} ({lookups} lookups): "{record}"')
        )
    findings += _relay_findings(domain, role, relay, parsed.get("parsed"))
    return findings


def _relay_findings(domain: str, role: str, relay: list[str], tree: Any) -> list[DnsFinding]:
    if not relay or not isinstance(tree, dict):
        return []
    results = {address: evaluate(tree, address) for address in relay}
    refused = [a for a, r in results.items() if r not in (PASS, UNKNOWN)]
    unknown = [a for a, r in results.items() if r == UNKNOWN]
    if refused:
        verdicts = ", ".join(f"{a}: {results[a]}" for a in refused)
        return [
            DnsFinding(
                domain,
                WARNING,
                "spf_relay_not_authorised",
                f"the SPF record of the {role} {domain} does not authorise the relay's address ({verdicts});"
                f" add {_suggest(refused)} (or the include: your relay provider documents)",
            )
        ]
    if unknown:
        return [
            DnsFinding(
                domain,
                WARNING,
                "spf_relay_unknown",
                f"the SPF record of the {role} {domain} decides {', '.join(unknown)} with exists, ptr or macros,"
                " which cannot be checked without a message; prefer ip4:/ip6: or include:",
            )
        ]
    return [
        DnsFinding(
            domain, OK, "spf_relay_authorised", f"SPF of {domain} authorises the relay ({', '.join(relay)})"
        )
    ]


def evaluate(tree: dict[str, Any], address: str, depth: int = 0) -> str:
    """The SPF result for `address` under a parsed record: pass, fail, softfail, neutral or unknown."""
    if depth > _DEPTH:
        return UNKNOWN
    ip = ipaddress.ip_address(address)
    for mechanism in tree.get("mechanisms") or []:
        matched = _matches(mechanism, ip, depth)
        if matched is None:
            return UNKNOWN
        if matched:
            return str(mechanism.get("action") or PASS)
    redirect = tree.get("redirect")
    if isinstance(redirect, dict) and isinstance(redirect.get("parsed"), dict):
        return evaluate(redirect["parsed"], address, depth + 1)
    return str(tree.get("all") or "neutral")


def _matches(
    mechanism: dict[str, Any], ip: ipaddress.IPv4Address | ipaddress.IPv6Address, depth: int
) -> bool | None:
    """Whether one mechanism matches `ip`; None when a parse cannot tell."""
    kind = str(mechanism.get("mechanism") or "")
    value = str(mechanism.get("value") or "")
    if "%{" in value or kind in ("exists", "ptr"):
        return None
    if kind in ("ip4", "ip6"):
        try:
            return ip in ipaddress.ip_network(value, strict=False)
        except ValueError:
            return False
    if kind == "a":
        return _in(ip, mechanism.get("addresses") or [])
    if kind == "mx":
        hosts = mechanism.get("hosts") or []
        return any(_in(ip, h.get("addresses") or []) for h in hosts if isinstance(h, dict))
    if kind == "include":
        inner = mechanism.get("parsed")
        if not isinstance(inner, dict):
            return False  # RFC 7208 §5.2: an include without a record is a permerror; it never passes
        result = evaluate(inner, str(ip), depth + 1)
        return None if result == UNKNOWN else result == PASS
    return kind == "all"


def _in(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, addresses: list[Any]) -> bool:
    for a in addresses:
        try:
            if ip in ipaddress.ip_network(str(a), strict=False):
                return True
        except ValueError:
            continue
    return False


def _suggest(addresses: list[str]) -> str:
    """ip4:/ip6: terms for the relay's addresses, or a placeholder when they are not known."""
    terms = [f"ip{ipaddress.ip_address(a).version}:{a}" for a in addresses[:4]]
    return " ".join(terms) or "include:<your relay's SPF domain>"


def _invalid(domain: str, role: str, exc: Exception, record: str | None = None) -> DnsFinding:
    shown = f' ("{record}")' if record else ""
    reason = str(exc.args[0]) if exc.args else type(exc).__name__
    return DnsFinding(
        domain,
        WARNING,
        "spf_invalid",
        f"the SPF record of the {role} {domain}{shown} is not valid: {reason}; receivers treat it as a permanent"
        " error and SPF fails",
    )
