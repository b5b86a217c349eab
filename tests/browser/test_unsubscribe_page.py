"""The unsubscribe link of a delivered campaign email, followed in a real browser: the confirmation
page, its button, the result page and the unsubscribe list; on a phone's screen, with and without
JavaScript."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from playwright.async_api import Browser

from tests.browser.browser_helpers import PHONE, press, scrolls_sideways, tracker_at_its_base_url
from tests.tracking import enqueue_one, scalar
from tests.tracking.campaign_mail_helpers import parts
from tests.worker.helpers import add_sender, run_until_drained
from worker.core.config import Settings
from worker.devtools.sink import RunningSink

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]


def footer_link(content: bytes) -> str:
    """The unsubscribe link in the text part's footer of a delivered email."""
    text, _ = parts(content)
    found = re.search(r"Unsubscribe: (http://\S+)", text)
    assert found is not None, text
    return found.group(1)


async def deliver(db_url: str, settings: Settings, sink: RunningSink, to: str) -> str:
    """Have the worker deliver one campaign email to the sink; the footer's unsubscribe link in it."""
    before = len(sink.messages)
    enqueue_one(db_url, settings, to=to)
    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05)
    assert await run_until_drained(db_url, fast) == 1
    assert len(sink.messages) == before + 1
    return footer_link(sink.messages[-1].content)


async def test_reader_unsubscribes_from_the_footer_link_on_a_phone(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    async with tracker_at_its_base_url(db_url, settings) as here:
        link = await deliver(db_url, here, smtp_sink, "Reader@Example.com")
        assert link.startswith(f"{here.base_url}/u/")
        context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        page = await context.new_page()
        try:
            response = await page.goto(link)
            assert response is not None and response.status == 200
            # The confirmation page asks; opening it (as a link scanner would) changes nothing.
            assert await page.title() == "Unsubscribe"
            assert "Stop sending these emails to" in await page.inner_text("body")
            assert "Reader@Example.com" not in await page.content()  # the address is masked
            assert not await scrolls_sideways(page)
            await page.reload()
            assert scalar(db_url, "SELECT count(*) FROM mailroom.unsubscribe_list") == 0
            answer = await press(page, page.get_by_role("button", name="Unsubscribe"), tap=True)
            assert answer is not None and answer.status == 200
            assert await page.title() == "Unsubscribed"
            assert "You will get no more of these emails." in await page.inner_text("body")
            assert not await scrolls_sideways(page)
            agent = await page.evaluate("navigator.userAgent")
            # Back to the link later: it says so, and offers no button.
            await page.goto(link)
            assert await page.title() == "Unsubscribed"
            assert await page.get_by_role("button").count() == 0
        finally:
            await context.close()
    row = scalar(
        db_url,
        "SELECT array[email, source, user_agent, host(ip_address)] FROM mailroom.unsubscribe_list",
    )
    assert row == ["reader@example.com", "link", agent, "127.0.0.1"]


async def test_unsubscribe_works_without_javascript_and_a_forged_link_names_nobody(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port, settings=settings)
    async with tracker_at_its_base_url(db_url, settings) as here:
        link = await deliver(db_url, here, smtp_sink, "grace@example.com")
        context = await browser.new_context(java_script_enabled=False, viewport=PHONE)
        page = await context.new_page()
        try:
            # A link whose token was changed: a page that says so, no button, nobody unsubscribed.
            forged = link[:-4] + ("0000" if not link.endswith("0000") else "1111")
            response = await page.goto(forged)
            assert response is not None and response.status == 404
            assert await page.title() == "Link not found"
            assert await page.get_by_role("button").count() == 0
            await page.goto(link)
            assert not await scrolls_sideways(page)
            await press(page, page.get_by_role("button", name="Unsubscribe"))
            assert await page.title() == "Unsubscribed"
        finally:
            await context.close()
    assert scalar(db_url, "SELECT array_agg(email) FROM mailroom.unsubscribe_list") == ["grace@example.com"]
