"""Launching Debian's chromium through Playwright, and what the browser tests ask of a page.

Playwright's own browser download is not used (nor reachable everywhere): the tests drive the
`chromium` Debian installs (`apt-get install -y chromium`; the test command installs it in CI).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

import pytest
from aiohttp import web
from playwright.async_api import Browser, Locator, Page, Playwright, Response, ViewportSize

from worker.core.config import Settings
from worker.tracking.server import make_app

APT = "apt-get install -y chromium"

# Headless and quiet: no GPU, no sandbox (containers run as root), and nothing that reaches the
# network on its own (updates, sync, first-run pages), so a test sees only the requests it makes.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)

# A phone's screen (an iPhone 12 to 15, in CSS pixels).
PHONE: ViewportSize = {"width": 390, "height": 844}


def chromium_path() -> str:
    """Debian's chromium; the test fails without it under CI, else skips with the apt-get line."""
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"chromium is not installed: {APT}")
        pytest.skip(f"chromium is not installed: {APT}")
    return found


async def launch(playwright: Playwright) -> Browser:
    """A headless chromium; Playwright gives it a fresh temporary profile (user-data dir) of its own."""
    return await playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=list(CHROMIUM_FLAGS)
    )


async def scrolls_sideways(page: Page) -> bool:
    """Whether the page is wider than its viewport (a reader on a phone would scroll sideways)."""
    return bool(
        await page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    )


@asynccontextmanager
async def tracker_at_its_base_url(
    db_url: str, settings: Settings, *, signing: bool = False, host: str = "127.0.0.1"
) -> AsyncIterator[Settings]:
    """The tracker served on a free local port, and the settings whose MAILROOM_BASE_URL is that port.

    The port is bound before the application is made, so the links the worker writes into emails and
    the addresses the tracker builds for itself (redirects, a login's callback) all name this server.
    `signing`: with the signing page, as `mailroom tracker` serves it.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    here = replace(settings, base_url=f"http://{host}:{port}")
    desk = None
    if signing:
        from worker.producers.documents.desk import signing_desk

        desk = signing_desk(db_url, here)
    runner = web.AppRunner(make_app(db_url, here, pool_size=4, signing=desk))
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield here
    finally:
        await runner.cleanup()


async def press(page: Page, button: Locator, *, tap: bool = False) -> Response | None:
    """Press a form's button (tap it, on a touch screen) and wait for the page the form answers with."""
    async with page.expect_navigation() as navigation:
        await (button.tap() if tap else button.click())
    return await navigation.value


@asynccontextmanager
async def another_site(html_text: str) -> AsyncIterator[str]:
    """A page on another site (`localhost`, where Mailroom's is `127.0.0.1`): its URL while it is served."""

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=html_text, content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield f"http://localhost:{port}/"
    finally:
        await runner.cleanup()
