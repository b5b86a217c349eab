"""The signing page's other states in a real browser: a link superseded by a new checksum and one
past its expiry, each with its page; two tabs signing at once; a title written to attack the page;
a signer reading in French."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from playwright.async_api import Browser, Route

from tests.browser.browser_helpers import PHONE, press, tracker_at_its_base_url
from tests.browser.signing_helpers import (
    DOC_ID,
    DOC_URL,
    TITLE,
    add_lease,
    deliver_reminders,
    signatures,
)
from tests.worker.helpers import add_sender
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.producers.documents.signing_links import link_for

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

NEW_CHECKSUM = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"


def expired_link(db_url: str, settings: Settings, email: str) -> str:
    """The signer's link as made a day more than its lifetime ago: authentic, and expired."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT e.id, d.checksum FROM mailroom.expected_signers e JOIN mailroom.documents d"
            " USING (doc_id) WHERE e.doc_id = %s AND e.email = %s",
            (DOC_ID, email),
        ).fetchone()
    assert row is not None
    made = datetime.now(UTC) - timedelta(days=settings.signing_link_days + 1)
    return link_for(settings, int(row[0]), DOC_ID, email, row[1], now=made)


async def test_superseded_and_expired_links_say_so_and_a_new_reminder_link_signs(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    add_lease(db_url, settings)
    async with tracker_at_its_base_url(db_url, settings, signing=True) as here:
        old = (await deliver_reminders(db_url, here, smtp_sink))["ada@example.com"]
        context = await browser.new_context(viewport=PHONE)
        page = await context.new_page()
        try:
            expired = await page.goto(expired_link(db_url, here, "ada@example.com"))
            assert expired is not None and expired.status == 410
            assert await page.title() == "This link has expired"
            assert await page.get_by_role("button").count() == 0
            # The page with the form is open when the document's file is replaced: the form signs nothing.
            await page.goto(old)
            with psycopg.connect(db_url) as conn:
                conn.execute(
                    "UPDATE mailroom.documents SET checksum = %s WHERE doc_id = %s", (NEW_CHECKSUM, DOC_ID)
                )
            await page.get_by_role("checkbox").check()
            stale = await press(page, page.get_by_role("button", name="Sign"))
            assert stale is not None and stale.status == 410
            assert await page.title() == "The document has changed"
            assert signatures(db_url) == []
            # The next reminder carries a link for the new file, and it signs.
            with psycopg.connect(db_url) as conn:
                conn.execute("DELETE FROM mailroom.reminder_logs")  # the interval would hold it back
            fresh = (await deliver_reminders(db_url, here, smtp_sink))["ada@example.com"]
            assert fresh != old
            await page.goto(fresh)
            assert NEW_CHECKSUM in await page.inner_text("body")
            await page.get_by_role("checkbox").check()
            signed = await press(page, page.get_by_role("button", name="Sign"))
            assert signed is not None and signed.status == 200
        finally:
            await context.close()
    assert [r["signer_email"] for r in signatures(db_url)] == ["ada@example.com"]


async def test_a_second_tab_signing_after_the_first_is_told_the_link_is_used_up(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    add_lease(db_url, settings)
    async with tracker_at_its_base_url(db_url, settings, signing=True) as here:
        link = (await deliver_reminders(db_url, here, smtp_sink))["grace@example.com"]
        context = await browser.new_context()
        try:
            first, second = await context.new_page(), await context.new_page()
            for tab in (first, second):
                await tab.goto(link)
                await tab.get_by_role("checkbox").check()
            one = await press(first, first.get_by_role("button", name="Sign"))
            two = await press(second, second.get_by_role("button", name="Sign"))
            assert one is not None and one.status == 200
            # The second tab's form was valid when shown; the link is used up now, and it says so.
            assert two is not None and two.status == 409
            assert await second.title() == "Already signed"
        finally:
            await context.close()
    assert [r["signer_email"] for r in signatures(db_url)] == ["grace@example.com"]


async def test_a_title_written_to_attack_the_page_is_shown_as_text_and_runs_nothing(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    hostile = 'Lease <img src=x onerror=alert(1)><script>alert(2)</script> & "terms"'
    add_sender(db_url, smtp_sink.port, settings=settings)
    add_lease(db_url, settings, title=hostile)
    async with tracker_at_its_base_url(db_url, settings, signing=True) as here:
        link = (await deliver_reminders(db_url, here, smtp_sink))["ada@example.com"]
        context = await browser.new_context()
        page = await context.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda dialog: dialogs.append(dialog.message))
        try:
            await page.goto(link)
            assert await page.title() == f"Sign “{hostile}”"
            assert await page.locator("h1").inner_text() == f"Sign “{hostile}”"
            assert await page.locator("img, script").count() == 0
            await page.get_by_role("checkbox").check()
            await press(page, page.get_by_role("button", name="Sign"))
            assert await page.title() == f"You signed “{hostile}”"
            assert await page.locator("img, script").count() == 0
        finally:
            await context.close()
    assert dialogs == []


async def test_a_french_reader_gets_the_page_in_french(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    add_lease(db_url, settings, locale="fr")
    async with tracker_at_its_base_url(db_url, settings, signing=True) as here:
        link = (await deliver_reminders(db_url, here, smtp_sink))["ada@example.com"]
        context = await browser.new_context(locale="fr-FR", viewport=PHONE)
        page = await context.new_page()
        try:
            await page.goto(link)
            assert await page.title() == f"Signer « {TITLE} »"
            assert await page.locator("html").get_attribute("lang") == "fr"
            await page.get_by_role("checkbox", name=f"J'ai lu « {TITLE} » et je le signe.").check()
            await press(page, page.get_by_role("button", name="Signer"))
            assert await page.title() == f"Vous avez signé « {TITLE} »"
        finally:
            await context.close()
    assert len(signatures(db_url)) == 1


async def test_following_the_document_link_does_not_carry_the_signers_link_away(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    add_lease(db_url, settings)
    async with tracker_at_its_base_url(db_url, settings, signing=True) as here:
        link = (await deliver_reminders(db_url, here, smtp_sink))["ada@example.com"]
        context = await browser.new_context()
        seen: list[dict[str, str]] = []

        async def documents_host(route: Route) -> None:
            # Stands in for the host of the document's file, and notes what the browser told it.
            seen.append(await route.request.all_headers())
            await route.fulfill(status=200, content_type="text/html", body="<title>Lease</title>")

        await context.route(f"{DOC_URL}*", documents_host)
        try:
            page = await context.new_page()
            await page.goto(link)
            await press(page, page.get_by_role("link", name=DOC_URL))
            assert page.url == DOC_URL
        finally:
            await context.close()
    # The signer's token never reaches the other host: no Referer at all, not even this server's origin.
    assert len(seen) == 1 and "referer" not in seen[0], seen
