"""Helpers of the DMARC report tests: the fixture reports, a sender for their domain, and hostile inputs."""

from __future__ import annotations

import gzip
import io
import zipfile
from email.message import EmailMessage
from pathlib import Path

import psycopg
from psycopg import sql

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dmarc"
RFC_EXAMPLE = "rfc7489-appendix-c.xml"
GOOGLE_EMAIL = "google-report.eml"
MICROSOFT_EMAIL = "microsoft-report.eml"
GOOGLE_ZIP = "google.com!example.com!1767225600!1767311999.zip"
MICROSOFT_GZIP = "protection.outlook.com!example.com!1767225600!1767312000.xml.gz"
SPOOFER = "198.51.100.7"  # fails DKIM and SPF in both providers' reports
RELAY = "203.0.113.10"  # our relay: aligned in both


def load(name: str) -> bytes:
    """A fixture report's bytes."""
    return (FIXTURES / name).read_bytes()


def add_sender(url: str, from_email: str = "news@example.com", name: str = "news") -> None:
    """A sender account whose From domain the reports are about."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port) VALUES (%s, %s, %s, 25)",
            (name, from_email, "127.0.0.1"),
        )


def count(url: str, table: str) -> int:
    """Rows in one of the DMARC tables (or the bounce quarantine)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier("mailroom", table))
        ).fetchone()
    assert row is not None
    return int(row[0])


def replaced(text: str, *pairs: tuple[str, str]) -> bytes:
    """`text` with each (old, new) replaced once, as UTF-8."""
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text.encode()


def zipped(*members: tuple[str, bytes]) -> bytes:
    """A zip of the given (name, bytes) entries, deflated."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(name, data)
    return out.getvalue()


def zeros_gzip(size: int) -> bytes:
    """A gzip bomb: `size` zero bytes behind an XML start, compressed about a thousand to one."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as archive:
        archive.write(b"<?xml version='1.0'?><feedback>")
        chunk = b"\x20" * (1 << 20)
        for _ in range(size >> 20):
            archive.write(chunk)
    return out.getvalue()


def zeros_zip(size: int) -> bytes:
    """A zip bomb: one entry of `size` spaces behind an XML start."""
    out = io.BytesIO()
    archive = zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED)
    with archive, archive.open("report.xml", "w", force_zip64=True) as member:
        member.write(b"<?xml version='1.0'?><feedback>")
        chunk = b"\x20" * (1 << 20)
        for _ in range(size >> 20):
            member.write(chunk)
    return out.getvalue()


def as_email(attachment: bytes, filename: str, content_type: str = "application/zip") -> bytes:
    """An email to dmarc@ carrying one attachment, as a provider sends a report."""
    msg = EmailMessage()
    msg["From"] = "noreply-dmarc-support@google.com"
    msg["To"] = "dmarc@bounces.example"
    msg["Subject"] = "Report domain: example.com Submitter: google.com Report-ID: 1"
    msg.set_content("")
    maintype, subtype = content_type.split("/")
    msg.add_attachment(attachment, maintype=maintype, subtype=subtype, filename=filename)
    return msg.as_bytes()


def big_report(
    records: int,
    *,
    domain: str = "example.com",
    org: str = "google.com",
    report_id: str = "1",
    messages: int = 1,
    distinct: bool = False,
) -> bytes:
    """A report (XML) of `records` records about `domain` in `org`'s name: each a source failing DKIM and
    SPF for `messages` messages, every one the same, or each from its own address when `distinct`."""
    head = (
        '<?xml version="1.0" encoding="UTF-8" ?>\n<feedback>\n  <report_metadata>\n'
        f"    <org_name>{org}</org_name>\n    <email>noreply-dmarc-support@{org}</email>\n"
        f"    <report_id>{report_id}</report_id>\n"
        "    <date_range><begin>1767225600</begin><end>1767311999</end></date_range>\n"
        "  </report_metadata>\n  <policy_published>\n"
        f"    <domain>{domain}</domain><adkim>r</adkim><aspf>r</aspf><p>none</p><sp>none</sp><pct>100</pct>\n"
        "  </policy_published>\n"
    )
    record = (
        "  <record>\n    <row>\n      <source_ip>{ip}</source_ip>\n      <count>{messages}</count>\n"
        "      <policy_evaluated><disposition>none</disposition><dkim>fail</dkim><spf>fail</spf>"
        "</policy_evaluated>\n    </row>\n"
        f"    <identifiers><header_from>{domain}</header_from></identifiers>\n"
        "    <auth_results><spf><domain>mail.spoofer.test</domain><result>fail</result></spf></auth_results>\n"
        "  </record>\n"
    )
    body = (
        "".join(
            record.format(ip=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}", messages=messages)
            for i in range(records)
        )
        if distinct
        else record.format(ip=SPOOFER, messages=messages) * records
    )
    return (head + body + "</feedback>\n").encode()


def gzipped(data: bytes) -> bytes:
    """`data` gzipped, as Microsoft sends a report."""
    return gzip.compress(data, mtime=0)


def mailed(xml: bytes, report_id: str = "1") -> bytes:
    """An email to dmarc@ carrying the report `xml` gzipped, as a provider mails it."""
    raw = as_email(gzipped(xml), f"google.com!example.com!{report_id}.xml.gz", "application/gzip")
    return raw.replace(b"Report-ID: 1", f"Report-ID: {report_id}".encode())
