"""Campaign mail as inbox providers expect it: List-Id, Feedback-ID, a text part, a footer with the
recipient's own unsubscribe link and the postal address, open tracking per campaign; the postal
address required for campaign email; the footer link's confirmation page; SpamAssassin's verdict."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import psycopg
import pytest

from tests.tracking import enqueue_one, https, running_tracker, scalar
from tests.tracking.campaign_mail_helpers import newsletter, parsed, parts, sent_bytes, stored
from tests.tracking.spam_helpers import scores
from tests.worker.helpers import add_sender, run_until_drained
from worker.cli.main import main
from worker.core.campaign_mail import Campaign, check_postal_address, dress_for, label
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.core.templates import builtin_templates
from worker.core.validation import ValidationError
from worker.devtools.sink import RunningSink

POSTAL = "Oak & Iron Ltd, 12 Mill Lane, Bristol BS1 4DJ, United Kingdom"
# Data for every built-in template (each uses some of it).
TEMPLATE_DATA = {
    "name": "Ada Lovelace",
    "first_name": "Ada",
    "last_name": "Lovelace",
    "login": "ada",
    "code": "483920",
    "link": "https://app.example.com/activate?token=2f9c1e",
    "url": "https://app.example.com/documents/42/sign",
    "expires_at": "2026-12-01 18:00 UTC",
    "customer_name": "Ada Lovelace",
    "order_number": "A-1042",
    "items": [{"quantity": 2, "name": "Oak chopping board", "line_total": "EUR 64.00"}],
    "total": "EUR 64.00",
    "reason": "the item is out of stock",
    "doc_id": "42",
    "title": "Lease agreement",
    "checksum": "9f2c4e8a1b7d3f6e0c5a2b9d8e7f1a3c4b6d5e2f0a9c8b7d6e5f4a3b2c1d0e9f",
    "checksum_algorithm": "SHA-256",
    "signing_url": "https://app.example.com/s/17.1767225600.9f2c4e8a.Zm9vYmFy",
    "signature_id": "318",
    "signed_at": "2026-11-26 14:02 UTC",
    "payload_hash": "4b1e7c9d2a6f8e3b5c0d1a7f9e2b4c6d8a0f3e5b7c9d1e2f4a6b8c0d2e4f6a8b",
}


def _settings(settings: Settings, **changes: object) -> Settings:
    return replace(https(settings), postal_address=POSTAL, **changes)  # type: ignore[arg-type]


def test_campaign_email_has_list_id_feedback_id_and_a_footer_in_both_parts(
    db_url: str, settings: Settings
) -> None:
    s = _settings(settings)
    content = sent_bytes(stored(db_url, enqueue_one(db_url, s)), s)
    message = parsed(content)
    assert message["List-Id"] == "<spring.shop.example.com>"
    assert message["Feedback-ID"] == "spring:newsletter:mailroom:shop.example.com"
    header = re.fullmatch(r"<(https://t\.example\.org/u/[0-9a-f-]{36})>", str(message["List-Unsubscribe"]))
    assert header is not None
    text, html = parts(content)
    assert html is not None
    # The footer's link is the header's one-click token, in both parts; the address in both.
    assert f"Unsubscribe: {header.group(1)}" in text and POSTAL in text
    assert f'<a href="{header.group(1)}">Unsubscribe</a>' in html
    assert "Oak &amp; Iron Ltd" in html and "Oak & Iron" not in html
    assert html.index("Unsubscribe") < html.index("</body>")


def test_postal_address_is_escaped_in_html_and_control_characters_are_refused(
    db_url: str, settings: Settings, cli_env: dict[str, str]
) -> None:
    hostile = '<img src=x onerror="alert(1)"> Main St & "Sons"'
    assert main(["campaigns", "set", "spring", "--postal-address", hostile]) == 0
    s = _settings(settings)
    row = stored(db_url, enqueue_one(db_url, s))
    campaigns = {"spring": Campaign(postal_address=hostile)}
    _, html = parts(sent_bytes(row, s, campaigns=campaigns))
    assert html is not None
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; Main St &amp; &quot;Sons&quot;" in html
    assert "<img src=x" not in html
    add_sender(db_url, 2525, settings=settings, name="relay")
    for bad in (
        "1 Main St\r\nBcc: victim@example.com",
        "1 Main St\nSpringfield",
        "1 Main\x00St",
        "1 Main\x85St",
    ):
        assert main(["campaigns", "set", "spring", "--postal-address", bad]) == 2
        with pytest.raises(ValidationError):
            check_postal_address("postal_address", bad)
        if "\x00" in bad:
            continue  # PostgreSQL text cannot hold NUL at all
        # The database refuses it too, however it is written.
        with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE mailroom.campaigns SET postal_address = %s", (bad,))
        with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE mailroom.sender_accounts SET postal_address = %s", (bad,))
    assert scalar(db_url, "SELECT postal_address FROM mailroom.campaigns") == hostile


def test_campaign_names_and_list_ids_with_line_breaks_or_non_ascii_stay_out_of_headers(
    db_url: str, settings: Settings, cli_env: dict[str, str]
) -> None:
    s = _settings(settings)
    for campaign in ("spring\r\nBcc: evil@example.com", "Été été", "ete-ete"):
        row = stored(db_url, enqueue_one(db_url, s, campaign_id=campaign))
        message = parsed(sent_bytes(row, s))
        assert message["Bcc"] is None
        list_id, feedback = str(message["List-Id"]).strip(), str(message["Feedback-ID"]).strip()
        assert re.fullmatch(r"<[a-z0-9-]+\.shop\.example\.com>", list_id), list_id
        assert re.fullmatch(r"[a-z0-9-]+:newsletter:mailroom:shop\.example\.com", feedback), feedback
    # Two names that read alike keep apart; a plain one is kept as written.
    assert label("Été été") != label("ete-ete") == "ete-ete"
    for bad in ("news\r\n.example.com", "nouvelles.exemple.fr\u00e9", "nodot", "a..b"):
        assert main(["campaigns", "set", "spring", "--list-id", bad]) == 2
    assert main(["campaigns", "set", "spring\r\nX", "--no-open-tracking"]) == 2
    with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
        conn.execute(
            "INSERT INTO mailroom.campaigns (campaign_id, list_id) VALUES ('a', 'x\r\n.example.com')"
        )
    assert main(["campaigns", "set", "spring", "--list-id", "spring.news.example.com"]) == 0
    row = stored(db_url, enqueue_one(db_url, s))
    campaigns = {"spring": Campaign(list_id="spring.news.example.com")}
    assert parsed(sent_bytes(row, s, campaigns=campaigns))["List-Id"] == "<spring.news.example.com>"


def test_campaign_email_without_any_postal_address_is_refused(
    db_url: str,
    settings: Settings,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    bare = replace(settings, postal_address=None)
    with pytest.raises(ValidationError, match="postal address"):
        enqueue_one(db_url, bare)
    enqueue_one(db_url, bare, campaign_id=None)  # transactional email needs none
    # Through the command line: the line is rejected with the reason, exit status 1.
    monkeypatch.delenv("MAILROOM_POSTAL_ADDRESS")
    lines = tmp_path / "campaign.jsonl"
    lines.write_text('{"to": "a@example.com", "subject": "Hi", "text": "Hello", "campaign_id": "spring"}\n')
    capsys.readouterr()
    assert main(["enqueue", str(lines)]) == 1
    assert "postal address" in capsys.readouterr().out
    # The campaign's own address, or one on every sender account, is enough.
    assert main(["campaigns", "set", "spring", "--postal-address", POSTAL]) == 0
    assert main(["enqueue", str(lines)]) == 0
    enqueue_one(db_url, bare)
    with pytest.raises(ValidationError, match="postal address"):
        enqueue_one(db_url, bare, campaign_id="autumn")
    add_sender(db_url, 2525, settings=settings, name="relay")
    assert main(["campaigns", "sender-address", "relay", POSTAL]) == 0
    email_id = enqueue_one(db_url, bare, campaign_id="autumn")
    # And the builder never lets one leave without an address (a row written around enqueue).
    with pytest.raises(ValidationError, match="postal address"):
        sent_bytes(stored(db_url, email_id), bare)
    assert POSTAL in parts(sent_bytes(stored(db_url, email_id), bare, sender_postal_address=POSTAL))[0]


def test_only_a_campaigns_email_needs_a_postal_address_and_its_refusal_names_the_campaign(
    db_url: str, settings: Settings
) -> None:
    bare = replace(settings, postal_address=None)
    # Not transactional but of no campaign (a greeting): taken, built with its footer, no address in it.
    greeting = stored(db_url, enqueue_one(db_url, bare, campaign_id=None, transactional=False))
    text, _ = parts(sent_bytes(greeting, bare))
    assert "Unsubscribe: " in text and POSTAL not in text
    with pytest.raises(ValidationError) as refused:
        enqueue_one(db_url, bare, campaign_id="spring sale")
    said = str(refused.value)
    assert "mailroom campaigns set 'spring sale' --postal-address" in said, said
    assert "mailroom campaigns sender-address NAME" in said and "MAILROOM_POSTAL_ADDRESS" in said


def test_open_tracking_is_switched_per_campaign(
    db_url: str, settings: Settings, cli_env: dict[str, str]
) -> None:
    s = _settings(settings)
    assert main(["campaigns", "set", "spring", "--no-open-tracking"]) == 0
    off = stored(db_url, enqueue_one(db_url, s))
    on = stored(db_url, enqueue_one(db_url, s, campaign_id="autumn"))
    assert not off["track_opens"] and off["track_clicks"] and "/o/" not in off["html_body"]
    assert on["track_opens"] and "/o/" in on["html_body"]
    assert main(["campaigns", "show", "spring", "--json"]) == 0


def test_transactional_email_has_a_feedback_id_by_kind_and_a_footer_only_when_asked(
    db_url: str, settings: Settings
) -> None:
    s = _settings(settings)
    with psycopg.connect(db_url) as conn:
        email_id = enqueue(
            conn, EmailRequest(to="ada@example.com", template="activation", data=TEMPLATE_DATA), settings=s
        )
    row = stored(db_url, int(email_id))
    content = sent_bytes(row, s, sender="transactional")
    message = parsed(content)
    assert message["Feedback-ID"] == "activation:transactional:mailroom:shop.example.com"
    assert message["List-Id"] is None and message["List-Unsubscribe"] is None
    assert POSTAL not in content.decode()
    opted = sent_bytes(row, replace(s, postal_footer_transactional=True), sender="transactional")
    text, html = parts(opted)
    assert POSTAL in text and html is not None and "Oak &amp; Iron" in html
    assert "Unsubscribe" not in text  # transactional email has no unsubscribe link to show


def test_html_only_campaign_email_gets_a_text_part(db_url: str, settings: Settings) -> None:
    s = _settings(settings)
    row = stored(db_url, enqueue_one(db_url, s, text=None))
    text, html = parts(sent_bytes(row, s))
    assert html is not None and text.startswith("Hello")
    assert "Sale (https://t.example.org/c/" in text and POSTAL in text


def test_each_recipient_footer_carries_its_own_unsubscribe_link(db_url: str, settings: Settings) -> None:
    s = _settings(settings)
    row = stored(db_url, enqueue_one(db_url, s, to=["a@example.com", "b@example.com"]))
    dress = dress_for(
        row,
        sender="n",
        from_email="n@shop.example.com",
        sender_postal_address=None,
        campaigns={},
        default_postal_address=POSTAL,
    )
    from worker.core.message import build_message

    envelope = build_message(row, "n@shop.example.com", None, b"k" * 32, dress)
    links = set()
    for copy in envelope.copies:
        header = re.search(r"<(https://[^>]+/u/[^>]+)>", str(parsed(copy.content)["List-Unsubscribe"]))
        assert header is not None
        text, html = parts(copy.content)
        assert header.group(1) in text and html is not None and header.group(1) in html
        links.add(header.group(1))
    assert len(links) == 2


async def test_footer_link_lands_on_a_confirmation_page_that_a_scanner_cannot_trigger(
    db_url: str, settings: Settings
) -> None:
    s = _settings(settings)
    text, _ = parts(sent_bytes(stored(db_url, enqueue_one(db_url, s)), s))
    found = re.search(r"Unsubscribe: (https://\S+)", text)
    assert found is not None
    path = urlsplit(found.group(1)).path
    forged = path[:-4] + ("0000" if not path.endswith("0000") else "1111")
    unsubscribed = "SELECT count(*) FROM mailroom.unsubscribe_list"
    async with running_tracker(db_url, s) as server, aiohttp.ClientSession() as http:
        for _ in range(3):  # link scanners follow it, HEAD and GET: nothing happens
            page = await http.get(server.make_url(path))
            assert page.status == 200 and 'method="post"' in await page.text()
            assert (await http.head(server.make_url(path))).status == 200
        assert scalar(db_url, unsubscribed) == 0
        # A forged token, or a cross-site form without the one-click field: nobody is unsubscribed.
        assert (await http.get(server.make_url(forged))).status == 404
        assert (
            await http.post(
                server.make_url(forged), data={"List-Unsubscribe": "One-Click", "confirm": "page"}
            )
        ).status == 404
        assert (await http.post(server.make_url(path), data={"confirm": "page"})).status == 400
        assert scalar(db_url, unsubscribed) == 0
        done = await http.post(
            server.make_url(path), data={"List-Unsubscribe": "One-Click", "confirm": "page"}
        )
        assert done.status == 200
    assert scalar(db_url, "SELECT source FROM mailroom.unsubscribe_list") == "link"


async def test_the_worker_sends_the_sender_accounts_postal_address(
    db_url: str, settings: Settings, smtp_sink: RunningSink, cli_env: dict[str, str]
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    assert main(["campaigns", "sender-address", "primary", "Primary Sender Co, 5 Quay St, Leith"]) == 0
    enqueue_one(db_url, https(settings))
    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05)
    assert await run_until_drained(db_url, fast) == 1
    [sent] = smtp_sink.messages
    assert sent.message["List-Id"] is not None and sent.message["Feedback-ID"].startswith("spring:primary:")
    text, _ = parts(sent.content)
    assert "Primary Sender Co, 5 Quay St, Leith" in text and "Unsubscribe: https://t.example.org/u/" in text


def _template_rows(db_url: str, settings: Settings) -> list[tuple[str, bytes]]:
    """Every built-in template in every locale, enqueued and built as Mailroom sends it."""
    built = []
    # What Mailroom ships as templates (the folder also holds the parts they include).
    for name, locale in sorted({(t.name, t.locale) for t in builtin_templates()}):
        with psycopg.connect(db_url) as conn:
            email_id = enqueue(
                conn,
                EmailRequest(to="ada@example.com", template=name, locale=locale, data=TEMPLATE_DATA),
                settings=settings,
            )
        built.append(
            (f"{name}/{locale}", sent_bytes(stored(db_url, int(email_id)), settings, sender="transactional"))
        )
    return built


def test_every_built_in_template_passes_spamassassin(db_url: str, settings: Settings) -> None:
    s = _settings(settings)
    rows = _template_rows(db_url, s)
    results = dict(zip([name for name, _ in rows], scores([content for _, content in rows]), strict=True))
    assert len(results) >= 7
    assert {n: r for n, r in results.items() if r[0] > 0} == {}


def test_realistic_and_short_campaigns_pass_spamassassin(
    db_url: str, settings: Settings, cli_env: dict[str, str]
) -> None:
    s = _settings(settings)
    text, html = newsletter()
    long_one = enqueue_one(db_url, s, subject="Spring at the workshop", text=text, html=html)
    row = stored(db_url, long_one)
    assert row["track_opens"] and row["track_clicks"]
    # A short campaign: two lines. With the pixel it costs HTML_IMAGE_ONLY_*; without, it passes.
    short = {
        "subject": "Our spring sale starts Monday",
        "text": "Hello,\n\nOur sale starts on Monday.\n",
        "html": "<p>Hello,</p><p>Our sale starts on Monday.</p>",
        "campaign_id": "short",
    }
    short_with_pixel = sent_bytes(stored(db_url, enqueue_one(db_url, s, **short)), s)
    assert main(["campaigns", "set", "short", "--no-open-tracking"]) == 0
    short_without = sent_bytes(stored(db_url, enqueue_one(db_url, s, **short)), s)
    (points, rules), with_pixel, without = scores([sent_bytes(row, s), short_with_pixel, short_without])
    assert points <= 0, rules
    assert with_pixel[0] > 0 and "HTML_IMAGE_ONLY" in with_pixel[1]
    assert without[0] <= 0, without[1]


async def test_a_campaign_set_up_while_the_worker_runs_is_sent_with_its_address(
    db_url: str, settings: Settings, smtp_sink: RunningSink, cli_env: dict[str, str]
) -> None:
    import asyncio

    from worker.engine.delivery import Worker, WorkerOptions

    # No address but the campaign's: the worker's book was read before the campaign existed.
    bare = replace(https(settings), postal_address=None, retry_base_seconds=0.01, retry_cap_seconds=0.05)
    add_sender(db_url, smtp_sink.port, settings=bare)
    worker = Worker(db_url, bare, WorkerOptions(concurrency=1, poll_seconds=3600))
    task = asyncio.create_task(worker.run())
    try:
        enqueue_one(db_url, bare, campaign_id=None)  # the worker has loaded its senders once this is sent
        assert await smtp_sink.wait_for(1, timeout=10)
        assert main(["campaigns", "set", "autumn", "--postal-address", POSTAL]) == 0
        enqueue_one(db_url, bare, campaign_id="autumn")
        assert await smtp_sink.wait_for(2, timeout=10)
    finally:
        worker.stop()
        await task
    text, _ = parts(smtp_sink.messages[1].content)
    assert "Oak & Iron Ltd, 12 Mill Lane" in text
    assert (
        scalar(db_url, "SELECT string_agg(status, ',' ORDER BY id) FROM mailroom.email_queue") == "sent,sent"
    )
