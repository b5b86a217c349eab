"""A document that requires an OpenID Connect login, signed in a real browser: the signer's link sends
the browser to the issuer (a local one in the test process), it comes back logged in as the expected
signer and signs with the issuer's subject; someone logged in as another person signs nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import psycopg
import pytest
from playwright.async_api import Browser, Page

from tests.browser.browser_helpers import PHONE, press, scrolls_sideways, tracker_at_its_base_url
from tests.browser.signing_helpers import TITLE, add_lease, deliver_reminders, signatures
from tests.tracking.oidc_server import CLIENT_ID, CLIENT_SECRET, Issuer, running_issuer
from tests.worker.helpers import add_sender
from worker.core.config import Settings
from worker.devtools.sink import RunningSink

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

ADA_SUB = "issuer-subject-ada-7f3e"


@asynccontextmanager
async def signing_with_login(
    db_url: str, settings: Settings, sink: RunningSink, idp: Issuer
) -> AsyncIterator[dict[str, str]]:
    """The issuer, the tracker configured to log in with it, the document requiring a login, and each
    signer's link from the reminder the worker delivered."""
    add_sender(db_url, sink.port, settings=settings)
    async with running_issuer(idp):
        configured = replace(
            settings, oidc_issuer=idp.issuer, oidc_client_id=CLIENT_ID, oidc_client_secret=CLIENT_SECRET
        )
        add_lease(db_url, configured, require_login=True)
        async with tracker_at_its_base_url(db_url, configured, signing=True) as here:
            yield await deliver_reminders(db_url, here, sink)


async def log_in(page: Page) -> None:
    """Press the page's "Sign in to sign" and follow the issuer's redirects to wherever they end."""
    await press(page, page.get_by_role("link", name="Sign in to sign"))
    await page.wait_for_load_state()


async def test_the_expected_signer_logs_in_at_the_issuer_and_signs_with_its_subject(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    idp = Issuer(sub=ADA_SUB, email="ada@example.com")
    async with signing_with_login(db_url, settings, smtp_sink, idp) as links:
        link = links["ada@example.com"]
        context = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        page = await context.new_page()
        try:
            await page.goto(link)
            # The link alone is not enough: the page shows the document and asks for a login first.
            assert await page.title() == f"Sign “{TITLE}”"
            assert "sign in first" in await page.inner_text("body")
            assert await page.get_by_role("checkbox").count() == 0
            assert not await scrolls_sideways(page)
            await log_in(page)
            # Back from the issuer, on the same link, logged in: now the form is there.
            assert page.url == link
            cookie = {c["name"]: c for c in await context.cookies()}["mailroom_session"]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
            assert await page.evaluate("document.cookie") == ""
            [asked] = idp.authorize_requests
            assert asked["code_challenge_method"] == "S256" and asked["login_hint"] == "ada@example.com"
            await page.get_by_role("checkbox").check()
            signed = await press(page, page.get_by_role("button", name="Sign"), tap=True)
            assert signed is not None and signed.status == 200
            assert await page.title() == f"You signed “{TITLE}”"
            agent = await page.evaluate("navigator.userAgent")
            # The session is this browser's: another browser with the same link is asked to log in.
            other = await browser.new_context()
            try:
                elsewhere = await other.new_page()
                await elsewhere.goto(links["grace@example.com"])
                assert await elsewhere.get_by_role("link", name="Sign in to sign").count() == 1
            finally:
                await other.close()
        finally:
            await context.close()
    [row] = signatures(db_url)
    assert (row["signer_email"], row["user_sub"]) == ("ada@example.com", ADA_SUB)
    with psycopg.connect(db_url) as conn:
        session = conn.execute(
            "SELECT user_sub, user_agent, host(ip_address), refresh_token_encrypted FROM mailroom.oauth_sessions"
        ).fetchone()
    assert session is not None and session[:3] == (ADA_SUB, agent, "127.0.0.1")
    # The issuer's refresh token is kept, encrypted: its text is nowhere in the stored bytes.
    [refresh] = idp.live_refresh_tokens
    assert session[3] is not None and refresh.encode("ascii") not in bytes(session[3])


async def test_someone_logged_in_as_another_person_signs_nothing(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    # Mallory holds Ada's link (a forwarded email) and logs in at the issuer as herself.
    idp = Issuer(sub="issuer-subject-mallory", email="mallory@example.com")
    async with signing_with_login(db_url, settings, smtp_sink, idp) as links:
        link = links["ada@example.com"]
        context = await browser.new_context(java_script_enabled=False)
        page = await context.new_page()
        try:
            await page.goto(link)
            await log_in(page)
            assert await page.title() == "Another account"
            assert "mallory@example.com" in await page.inner_text("body")
            # Back on the link: still asked to log in, no form to sign with.
            await page.goto(link)
            assert await page.get_by_role("checkbox").count() == 0
            assert await page.get_by_role("link", name="Sign in to sign").count() == 1
        finally:
            await context.close()
    assert signatures(db_url) == []
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.oauth_sessions").fetchone() == (0,)


async def test_a_session_cookie_taken_to_another_browser_is_ended_and_proves_nothing(
    browser: Browser, db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    idp = Issuer(sub=ADA_SUB, email="ada@example.com")
    async with signing_with_login(db_url, settings, smtp_sink, idp) as links:
        link = links["ada@example.com"]
        phone = await browser.new_context(viewport=PHONE, user_agent="Mozilla/5.0 (Ada's phone)")
        thief = await browser.new_context(user_agent="Mozilla/5.0 (Someone else's laptop)")
        try:
            page = await phone.new_page()
            await page.goto(link)
            await log_in(page)
            assert await page.get_by_role("checkbox").count() == 1
            # Ada's session proves Ada, not Grace: Grace's link asks for Grace's login.
            await page.goto(links["grace@example.com"])
            assert await page.get_by_role("checkbox").count() == 0
            # The cookie copied into a browser with another user agent: the theft rule ends the session.
            taken = await phone.cookies()
            await thief.add_cookies(
                [
                    {"name": c["name"], "value": c["value"], "domain": c["domain"], "path": c["path"]}
                    for c in taken
                ]
            )
            stolen = await thief.new_page()
            await stolen.goto(link)
            assert await stolen.get_by_role("checkbox").count() == 0
            assert await stolen.get_by_role("link", name="Sign in to sign").count() == 1
            with psycopg.connect(db_url) as conn:
                assert conn.execute("SELECT count(*) FROM mailroom.oauth_sessions").fetchone() == (0,)
            # Ada logs in again on her phone and signs.
            await page.goto(link)
            assert await page.get_by_role("checkbox").count() == 0
            await log_in(page)
            await page.get_by_role("checkbox").check()
            signed = await press(page, page.get_by_role("button", name="Sign"))
            assert signed is not None and signed.status == 200
        finally:
            await thief.close()
            await phone.close()
    [row] = signatures(db_url)
    assert (row["user_sub"], row["user_agent"]) == (ADA_SUB, "Mozilla/5.0 (Ada's phone)")
