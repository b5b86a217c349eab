"""DNS checks of sender domains against a DNS server in the test process: good and broken zones, a dead or
hostile resolver, and relays with and without STARTTLS. No database: `check_sender` on a target."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from dns.nameserver import Do53Nameserver

from tests.worker.dns_helpers import EhloServer, Zone, closed_port, dns_server, good_zone, rsa_pem
from worker.core.dkim import dns_record
from worker.core.dns_servers import parse_dns_server
from worker.ops.dns_checks import SenderTarget, check_sender, reserved
from worker.ops.dns_checks.lookups import Resolvers, fresh_answers
from worker.ops.dns_checks.spf import evaluate

DOMAIN = "shop-mail.net"


@pytest.fixture(scope="module")
def pems() -> tuple[bytes, bytes]:
    """The sender's DKIM key and another one."""
    return rsa_pem(), rsa_pem()


def target(pem: bytes | None, **changes: object) -> SenderTarget:
    public = serialization.load_pem_private_key(pem, password=None).public_key() if pem else None
    fields: dict[str, object] = {
        "id": 1,
        "name": "relay",
        "from_email": f"noreply@{DOMAIN}",
        "smtp_host": "127.0.0.1",
        "smtp_port": 25,
        "smtp_security": "none",
        "envelope_domain": DOMAIN,
        "dkim_domain": DOMAIN if pem else None,
        "dkim_selector": "s1" if pem else None,
        "dkim_public": public,
        "connect_timeout": 2.0,
    }
    fields.update(changes)
    return SenderTarget(**fields)  # type: ignore[arg-type]


def resolvers(address: str, timeout: float = 2.0) -> Resolvers:
    return Resolvers((Do53Nameserver(*parse_dns_server(address)),), timeout)


@pytest.fixture
def zone(pems: tuple[bytes, bytes]) -> Zone:
    return good_zone(DOMAIN, dns_record(pems[0]))


@pytest.fixture
def served(zone: Zone) -> Iterator[Resolvers]:
    fresh_answers()
    with dns_server(zone) as (_, address):
        yield resolvers(address)


def codes(findings: list, severity: str | None = None) -> dict[str, str]:  # type: ignore[type-arg]
    return {f.code: f.severity for f in findings if severity is None or f.severity == severity}


def bad(findings: list) -> dict[str, str]:  # type: ignore[type-arg]
    return {f.code: f.severity for f in findings if f.severity in ("warning", "problem")}


# --- zones ---------------------------------------------------------------------------------


def test_a_good_zone_passes_every_check(served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    findings = check_sender(target(pems[0]), served, relay=False)
    assert bad(findings) == {}
    assert {
        "spf_valid",
        "spf_relay_authorised",
        "dkim_match",
        "dmarc_policy",
        "dmarc_aligned",
        "mx_present",
    } <= set(codes(findings, "ok"))


def test_missing_spf_is_a_warning_saying_what_to_publish(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    del zone[DOMAIN]["TXT"]
    [finding] = [f for f in check_sender(target(pems[0]), served, relay=False) if f.code == "spf_missing"]
    assert finding.severity == "warning"
    assert "v=spf1 ip4:127.0.0.1 -all" in finding.detail


def test_spf_over_ten_lookups_is_a_warning(zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    includes = " ".join(f"include:i{n}.{DOMAIN}" for n in range(11))
    zone[DOMAIN]["TXT"] = [f"v=spf1 ip4:127.0.0.1 {includes} -all"]
    for n in range(11):
        zone[f"i{n}.{DOMAIN}"] = {"TXT": ["v=spf1 ip4:198.51.100.1 -all"]}
    found = bad(check_sender(target(pems[0]), served, relay=False))
    assert found == {"spf_too_many_lookups": "warning"}


def test_spf_that_does_not_authorise_the_relay_says_its_verdict(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    zone[f"_spf.{DOMAIN}"]["TXT"] = ["v=spf1 ip4:198.51.100.0/24 ~all"]
    findings = check_sender(target(pems[0]), served, relay=False)
    assert bad(findings) == {"spf_relay_not_authorised": "warning"}
    [finding] = [f for f in findings if f.code == "spf_relay_not_authorised"]
    assert "127.0.0.1: fail" in finding.detail  # the include's ~all does not match; -all at the top decides


def test_a_relay_host_name_is_resolved_through_the_same_resolvers(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    zone[f"relay.{DOMAIN}"] = {"A": ["198.51.100.7"]}
    findings = check_sender(target(pems[0], smtp_host=f"relay.{DOMAIN}"), served, relay=False)
    assert "198.51.100.7: fail" in next(f.detail for f in findings if f.code == "spf_relay_not_authorised")
    zone[f"_spf.{DOMAIN}"]["TXT"] = [f"v=spf1 a:relay.{DOMAIN} -all"]
    fresh_answers()
    assert bad(check_sender(target(pems[0], smtp_host=f"relay.{DOMAIN}"), served, relay=False)) == {}


def test_a_wrong_dkim_key_is_a_problem(zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    zone[f"s1._domainkey.{DOMAIN}"]["TXT"] = [dns_record(pems[1])]
    assert bad(check_sender(target(pems[0]), served, relay=False)) == {"dkim_mismatch": "problem"}


def test_a_missing_dkim_key_is_a_problem(zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    del zone[f"s1._domainkey.{DOMAIN}"]
    assert bad(check_sender(target(pems[0]), served, relay=False)) == {"dkim_missing": "problem"}


def test_a_revoked_dkim_key_is_a_problem(zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    zone[f"s1._domainkey.{DOMAIN}"]["TXT"] = ["v=DKIM1; k=rsa; p="]
    assert bad(check_sender(target(pems[0]), served, relay=False)) == {"dkim_revoked": "problem"}


def test_a_dkim_key_published_as_bare_pkcs1_matches(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    import base64

    public = serialization.load_pem_private_key(pems[0], password=None).public_key()
    pkcs1 = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.PKCS1)
    # Split over two strings, as long keys are published: the strings of one record are joined.
    zone[f"s1._domainkey.{DOMAIN}"]["TXT"] = [f"v=DKIM1; p={base64.b64encode(pkcs1).decode()}"]
    assert "dkim_match" in codes(check_sender(target(pems[0]), served, relay=False), "ok")


def test_no_dkim_configured_is_a_warning(served: Resolvers) -> None:
    assert bad(check_sender(target(None), served, relay=False)) == {"dkim_not_configured": "warning"}


def test_dmarc_p_none_is_information_and_p_reject_passes(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    assert codes(check_sender(target(pems[0]), served, relay=False))["dmarc_policy"] == "ok"
    zone[f"_dmarc.{DOMAIN}"]["TXT"] = [f"v=DMARC1; p=none; rua=mailto:dmarc@{DOMAIN}"]
    fresh_answers()
    findings = check_sender(target(pems[0]), served, relay=False)
    assert codes(findings)["dmarc_policy_none"] == "info"
    assert bad(findings) == {}


def test_no_dmarc_record_is_a_warning(zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    del zone[f"_dmarc.{DOMAIN}"]
    assert bad(check_sender(target(pems[0]), served, relay=False)) == {"dmarc_missing": "warning"}


def test_strict_alignment_with_a_dkim_subdomain_fails_alignment(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    zone[f"_dmarc.{DOMAIN}"]["TXT"] = ["v=DMARC1; p=reject; adkim=s; aspf=s"]
    zone[f"s1._domainkey.news.{DOMAIN}"] = {"TXT": [dns_record(pems[0])]}
    zone[f"bounces.{DOMAIN}"] = {"TXT": ["v=spf1 ip4:127.0.0.1 -all"], "MX": [f"10 mx.{DOMAIN}"]}
    sender = target(pems[0], dkim_domain=f"news.{DOMAIN}", envelope_domain=f"bounces.{DOMAIN}")
    assert bad(check_sender(sender, served, relay=False)) == {
        "dkim_not_aligned": "warning",
        "dmarc_not_aligned": "warning",
    }


def test_a_bounce_domain_without_mx_is_a_warning(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    zone[f"bounces.{DOMAIN}"] = {"TXT": ["v=spf1 ip4:127.0.0.1 -all"]}
    sender = target(pems[0], envelope_domain=f"bounces.{DOMAIN}")
    assert bad(check_sender(sender, served, relay=False)) == {"mx_missing": "warning"}


def test_a_from_domain_that_does_not_exist_is_said_once(served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    sender = target(pems[0], from_email="a@nowhere-at-all.net", envelope_domain="nowhere-at-all.net")
    assert bad(check_sender(sender, served, relay=False)) == {"domain_missing": "warning"}


def test_reserved_example_domains_are_not_looked_up(pems: tuple[bytes, bytes]) -> None:
    with dns_server({}) as (server, address):
        sender = target(pems[0], from_email="a@example.com", envelope_domain="example.com")
        assert codes(check_sender(sender, resolvers(address))) == {"not_checked": "info"}
        assert server.queries == []
    assert reserved("mail.example.org") and reserved("x.test") and not reserved("example.com.au")


# --- DNS that does not answer, and hostile answers --------------------------------------------


@pytest.mark.parametrize("how", ["silent", "servfail", "closed"])
def test_dns_that_does_not_answer_is_one_finding_not_a_crash(how: str, pems: tuple[bytes, bytes]) -> None:
    fresh_answers()
    with dns_server({}) as (server, address):
        server.silent = how == "silent"
        server.servfail = how == "servfail"
        where = closed_port() if how == "closed" else address
        findings = check_sender(target(pems[0]), resolvers(where, timeout=0.3), relay=False)
    assert bad(findings) == {"dns_unreachable": "warning"}
    assert where in findings[0].detail
    # One probe decides: a dead resolver is asked one question (perhaps twice), not one per record.
    assert len(set(server.queries)) == (0 if how == "closed" else 1), server.queries


def test_a_huge_txt_answer_at_the_dkim_name_is_refused_not_parsed(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    zone[f"s1._domainkey.{DOMAIN}"]["TXT"] = ["v=DKIM1; p=" + "A" * 20_000]
    findings = check_sender(target(pems[0]), served, relay=False)
    assert bad(findings) == {"dkim_invalid": "problem"}
    assert all(len(f.detail) <= 500 for f in findings)


def test_spf_include_loops_are_an_invalid_record(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    zone[DOMAIN]["TXT"] = [f"v=spf1 include:a.{DOMAIN} -all"]
    zone[f"a.{DOMAIN}"] = {"TXT": [f"v=spf1 include:b.{DOMAIN} -all"]}
    zone[f"b.{DOMAIN}"] = {"TXT": [f"v=spf1 include:a.{DOMAIN} -all"]}
    assert bad(check_sender(target(pems[0]), served, relay=False)) == {"spf_invalid": "warning"}


def test_a_cname_loop_at_the_dkim_name_ends(zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    zone[f"s1._domainkey.{DOMAIN}"] = {"CNAME": [f"s2._domainkey.{DOMAIN}"]}
    zone[f"s2._domainkey.{DOMAIN}"] = {"CNAME": [f"s1._domainkey.{DOMAIN}"]}
    found = bad(check_sender(target(pems[0]), served, relay=False))
    assert found.get("dkim_missing") == "problem" or found.get("dns_unreachable") == "warning"


def test_escape_sequences_in_records_never_reach_a_finding(
    zone: Zone, served: Resolvers, pems: tuple[bytes, bytes]
) -> None:
    zone[DOMAIN]["TXT"] = ["v=spf1 \x1b[2J\x1b]0;owned\x07 ip4:127.0.0.1 -all"]
    findings = check_sender(target(pems[0]), served, relay=False)
    assert findings and all(not any(ord(c) < 32 or 127 <= ord(c) < 160 for c in f.detail) for f in findings)


# --- SPF evaluation and the resolver setting --------------------------------------------------


def test_spf_evaluation_follows_includes_redirects_and_ranges() -> None:
    tree = {
        "mechanisms": [
            {"action": "fail", "mechanism": "ip4", "value": "192.0.2.66"},
            {"action": "pass", "mechanism": "ip4", "value": "192.0.2.0/24"},
            {"action": "pass", "mechanism": "ip6", "value": "2001:db8::/32"},
            {"action": "pass", "mechanism": "exists", "value": "%{i}.x.net"},
        ],
        "redirect": None,
        "all": "fail",
    }
    assert evaluate(tree, "192.0.2.66") == "fail"
    assert evaluate(tree, "192.0.2.7") == "pass"
    assert evaluate(tree, "2001:db8::1") == "pass"
    assert evaluate(tree, "198.51.100.1") == "unknown"  # exists with a macro decides: cannot tell
    redirected = {
        "mechanisms": [],
        "redirect": {"parsed": {"mechanisms": [], "all": "softfail"}},
        "all": None,
    }
    assert evaluate(redirected, "198.51.100.1") == "softfail"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:5353", ("127.0.0.1", 5353)),
        ("1.1.1.1", ("1.1.1.1", 53)),
        ("[::1]:5300", ("::1", 5300)),
        ("2001:db8::53", ("2001:db8::53", 53)),
    ],
)
def test_dns_servers_take_an_address_and_a_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_dns_server(text) == expected


@pytest.mark.parametrize("text", ["dns.google", "127.0.0.1:0", "127.0.0.1:99999", "[::1", "1.2.3.4:x"])
def test_dns_servers_refuse_what_is_not_an_address(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        parse_dns_server(text)


def test_the_setting_reads_several_servers_and_says_which_is_wrong(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.core.config import ConfigError, Settings

    monkeypatch.setenv("MAILROOM_DNS_SERVERS", "127.0.0.1:5353, [::1]:53 9.9.9.9")
    assert Settings.from_env().dns_servers == ("127.0.0.1:5353", "::1", "9.9.9.9")
    monkeypatch.setenv("MAILROOM_DNS_SERVERS", "127.0.0.1, resolver.lan")
    with pytest.raises(
        ConfigError, match=re.escape("MAILROOM_DNS_SERVERS: 'resolver.lan' is not an IP address")
    ):
        Settings.from_env()


# --- the relay ---------------------------------------------------------------------------------


def test_a_relay_without_starttls_is_a_warning(
    served: Resolvers, pems: tuple[bytes, bytes], smtp_sink
) -> None:  # type: ignore[no-untyped-def]
    sender = target(pems[0], smtp_port=smtp_sink.port)
    assert bad(check_sender(sender, served)) == {"relay_no_tls": "warning"}
    required = target(pems[0], smtp_port=smtp_sink.port, smtp_security="starttls")
    [finding] = [f for f in check_sender(required, served) if f.code == "relay_no_tls"]
    assert "every send fails" in finding.detail


def test_a_relay_offering_starttls_passes(served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    relay = EhloServer(("PIPELINING", "STARTTLS"))
    try:
        findings = check_sender(target(pems[0], smtp_port=relay.port, smtp_security="starttls"), served)
        assert codes(findings)["relay_starttls"] == "ok" and bad(findings) == {}
        plain = check_sender(target(pems[0], smtp_port=relay.port), served)
        assert codes(plain)["relay_tls_unused"] == "info"
    finally:
        relay.close()


def test_a_relay_that_does_not_answer_is_a_warning(served: Resolvers, pems: tuple[bytes, bytes]) -> None:
    port = int(closed_port().rsplit(":", 1)[1])
    assert bad(check_sender(target(pems[0], smtp_port=port), served)) == {"relay_unreachable": "warning"}
    tls = check_sender(target(pems[0], smtp_port=port, smtp_security="tls"), served)
    assert bad(tls) == {"relay_no_tls": "warning"}


def test_the_console_shows_the_worst_dns_finding_where_no_other_reason_is() -> None:
    from console.screens.senders import _reason, with_dns

    rows = [
        {"name": "a", "status_reason": None},
        {"name": "b", "status_reason": "paused for maintenance"},
        {"name": "c", "status_reason": None},
    ]
    findings = [
        {"name": "a", "domain": "x.net", "severity": "warning", "code": "mx_missing", "detail": "d"},
        {
            "name": "a",
            "domain": "s._domainkey.x.net",
            "severity": "problem",
            "code": "dkim_mismatch",
            "detail": "d",
        },
        {"name": "b", "domain": "x.net", "severity": "warning", "code": "spf_missing", "detail": "d"},
    ]
    shown = with_dns(rows, findings)
    assert [_reason(r) for r in shown] == ["DNS problem: dkim_mismatch", "paused for maintenance", None]
    assert "dns" not in shown[2]  # a sender without findings keeps its row as it was
