"""A signer signs from the reminder email in a real browser: the link the worker delivered, the page
(title, checksum, signer), consent and signing, the confirmation, the signature row, the console's
figures moving live, the receipt email; on a phone's screen, without JavaScript, and against a
forged cross-site form."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from playwright.async_api import Browser, Page

from tests.browser.browser_helpers import (
    PHONE,
    another_site,
    press,
    scrolls_sideways,
    tracker_at_its_base_url,
)
from tests.browser.signing_helpers import (
    CHECKSUM,
    DOC_ID,
    DOC_URL,
    TITLE,
    ConsoleWatch,
    add_lease,
    deliver,
    deliver_reminders,
    signatures,
)
from tests.tracking.campaign_mail_helpers import parts
from tests.worker.helpers import add_sender
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.producers.documents.reminders import send_reminders

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

WEBMAIL = "https://mail.example.net/inbox/1"


async def read_page(page: Page) -> str:
    """The page's visible text."""
    return await page.inner_text("body")


async def test_signer_signs_from_the_reminder_on_a_phone_and_the_console_sees_it_live(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    add_lease(db_url, settings)
    console = ConsoleWatch(db_url)
    async with tracker_at_its_base_url(db_url, settings, signing=True) as here:
        links = await deliver_reminders(db_url, here, smtp_sink)
        assert sorted(links) == ["ada@example.com", "grace@example.com"]
        assert links["ada@example.com"] != links["grace@example.com"]
        await console.start()
        context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        page = await context.new_page()
        # Every request the page makes, and what the browser reports (a CSP violation is an error).
        requested: list[str] = []
        reported: list[str] = []
        page.on("request", lambda request: requested.append(request.url))
        page.on("console", lambda message: reported.append(f"{message.type}: {message.text}"))
        try:
            assert await console.completion() == (0, 2)
            # Opened from the webmail: the page shows the document and the signer, and changes nothing.
            opened = await page.goto(links["ada@example.com"], referer=WEBMAIL)
            assert opened is not None and opened.status == 200
            assert await page.title() == f"Sign “{TITLE}”"
            text = await read_page(page)
            assert f"SHA-256: {CHECKSUM}" in text and "Ada Lovelace <ada@example.com>" in text
            assert await page.get_by_role("link", name=DOC_URL).get_attribute("href") == DOC_URL
            assert "grace" not in (await page.content()).lower()
            assert not await scrolls_sideways(page)
            # The form's cookie is out of the page's reach and never leaves with another site's request.
            [cookie] = await context.cookies()
            assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
                "mailroom_sign",
                True,
                "Strict",
            )
            assert cookie["path"] == "/s/" and await page.evaluate("document.cookie") == ""
            consent = page.get_by_role("checkbox", name=f"I have read “{TITLE}” and I sign it.")
            # The browser will not send the form before the box is ticked.
            assert await consent.evaluate("box => box.validity.valueMissing")
            assert signatures(db_url) == []
            # Big enough for a thumb, and inside the screen.
            button = await page.get_by_role("button", name="Sign").bounding_box()
            assert button is not None and button["height"] >= 44
            assert button["x"] >= 0 and button["x"] + button["width"] <= PHONE["width"]
            await consent.tap()
            signed = await press(page, page.get_by_role("button", name="Sign"), tap=True)
            assert signed is not None and signed.status == 200
            assert await page.title() == f"You signed “{TITLE}”"
            assert not await scrolls_sideways(page)
            agent = await page.evaluate("navigator.userAgent")
            [row] = signatures(db_url)
            text = await read_page(page)
            assert f"#{row['id']}" in text and row["payload_hash"] in text
            # The console hears of it at once (NOTIFY) and its figures move.
            await console.signed.wait()
            assert await console.completion() == (1, 2)
            assert await console.missing() == ["grace@example.com"]
            # Back to the same link: used up, and it says so with the receipt.
            again = await page.goto(links["ada@example.com"])
            assert again is not None and again.status == 200
            assert await page.title() == "Already signed"
            assert row["payload_hash"] in await read_page(page)
            assert await page.get_by_role("button").count() == 0
        finally:
            await context.close()
            await console.stop()
        # No third-party asset, no script, nothing the content-security policy had to block.
        assert requested and all(url.startswith(f"{here.base_url}/s/") for url in requested), requested
        assert reported == []
        assert row["signer_email"] == "ada@example.com"
        assert (row["user_sub"], row["ip"], row["user_agent"]) == (
            "email:ada@example.com",
            "127.0.0.1",
            agent,
        )
        assert row["referer"] == WEBMAIL
        # The receipt goes through the queue; the next reminder run skips the signer.
        before = len(smtp_sink.messages)
        assert await deliver(db_url, here) == 1
        receipt = smtp_sink.messages[before]
        assert "ada@example.com" in str(receipt.message["To"])
        text, _ = parts(receipt.content)
        assert f"Signature: #{row['id']}" in text and row["payload_hash"] in text
        with psycopg.connect(db_url) as conn:
            result = send_reminders(conn, DOC_ID, settings=here, interval=timedelta(0), requested_by="test")
        assert result.queued == 1 and "ada@example.com" not in result.skipped
        assert await deliver(db_url, here) == 1
        assert "grace@example.com" in str(smtp_sink.messages[-1].message["To"])


def forged_form(link: str, csrf: str) -> str:
    """Another site's page whose button posts a ticked consent to the signer's link."""
    return (
        f'<!doctype html><form method="post" action="{link}"><input type="hidden" name="csrf" value="{csrf}">'
        '<input type="hidden" name="consent" value="yes"><button type="submit">Win a prize</button></form>'
    )


async def test_signing_works_without_javascript_and_refuses_what_the_page_did_not_send(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    add_lease(db_url, settings)
    async with tracker_at_its_base_url(db_url, settings, signing=True) as here:
        links = await deliver_reminders(db_url, here, smtp_sink)
        link = links["grace@example.com"]
        context = await browser.new_context(java_script_enabled=False, viewport=PHONE)
        page = await context.new_page()
        try:
            # A link with one character changed: a page that says so, and no form.
            tampered = link[:-1] + ("a" if link[-1] != "a" else "b")
            answer = await page.goto(tampered)
            assert answer is not None and answer.status == 404
            assert await page.title() == "This link is not valid"
            assert await page.get_by_role("button").count() == 0
            await page.goto(link)
            assert await page.title() == f"Sign “{TITLE}”"
            assert "Grace Hopper <grace@example.com>" in await read_page(page)
            # Another site's form posting to the link from this very browser, even with the CSRF token of
            # this browser's own page: the page's cookie (SameSite) is not sent across sites, nothing signs.
            csrf = await page.locator("input[name=csrf]").get_attribute("value")
            assert csrf
            async with another_site(forged_form(link, csrf)) as evil:
                await page.goto(evil)
                refused = await press(page, page.get_by_role("button", name="Win a prize"))
            assert refused is not None and refused.status == 403
            assert await page.title() == "Please reload the page"
            # The form with the box unticked (its `required` taken off): the server refuses it too.
            await page.goto(link)
            await page.get_by_role("checkbox").evaluate("box => box.removeAttribute('required')")
            unticked = await press(page, page.get_by_role("button", name="Sign"))
            assert unticked is not None and unticked.status == 400
            assert await page.title() == "Tick the box to sign"
            assert signatures(db_url) == []
            # Ticked, and sent as a plain HTML form: signed.
            await page.goto(link)
            await page.get_by_role("checkbox").check()
            signed = await press(page, page.get_by_role("button", name="Sign"))
            assert signed is not None and signed.status == 200
            assert await page.title() == f"You signed “{TITLE}”"
            assert not await scrolls_sideways(page)
        finally:
            await context.close()
    [row] = signatures(db_url)
    assert (row["signer_email"], row["user_sub"], row["referer"]) == (
        "grace@example.com",
        "email:grace@example.com",
        None,
    )
