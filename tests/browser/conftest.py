"""Fixtures of the browser tests: one chromium per test module (launching costs about a second)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from playwright.async_api import Browser, async_playwright

from tests.browser.browser_helpers import launch


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    """A headless chromium shared by the module's tests; each test opens its own contexts (no shared
    cookies or storage). Tests using it run in the module's event loop: `asyncio(loop_scope="module")`."""
    async with async_playwright() as playwright:
        launched = await launch(playwright)
        try:
            yield launched
        finally:
            await launched.close()
