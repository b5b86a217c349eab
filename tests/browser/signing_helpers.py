"""A document with expected signers, its reminders delivered by the worker, and what the tests read
back: the signer's link in the delivered email, the signature rows, the console's figures."""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.rows import dict_row

from console.live import LiveFeed
from console.queries import ConsoleData
from tests.tracking.campaign_mail_helpers import parts
from tests.worker.helpers import run_until_drained
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.producers.documents.records import add_document, expect_signer
from worker.producers.documents.reminders import send_reminders

DOC_ID = "lease-42"
TITLE = "Lease agreement, flat 3"
DOC_URL = "https://docs.example.com/lease-42.pdf"
CHECKSUM = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
SIGNERS = {"ada@example.com": "Ada Lovelace", "grace@example.com": "Grace Hopper"}


def add_lease(
    db_url: str, settings: Settings, *, require_login: bool = False, title: str = TITLE, locale: str = "en"
) -> None:
    """The document with its two expected signers (in `locale`), committed."""
    with psycopg.connect(db_url) as conn:
        add_document(conn, DOC_ID, title=title, url=DOC_URL, checksum=CHECKSUM)
        for email, name in SIGNERS.items():
            expect_signer(conn, DOC_ID, email, name=name, locale=locale, settings=settings)
        if require_login:
            conn.execute("UPDATE mailroom.documents SET require_login = true WHERE doc_id = %s", (DOC_ID,))


async def deliver_reminders(db_url: str, settings: Settings, sink: RunningSink) -> dict[str, str]:
    """Queue reminders, have the worker deliver them to the sink; each signer's link from their email."""
    with psycopg.connect(db_url) as conn:
        result = send_reminders(conn, DOC_ID, settings=settings, requested_by="test")
    before = len(sink.messages)
    assert await deliver(db_url, settings) == result.queued
    links = {}
    for sent in sink.messages[before:]:
        text, _ = parts(sent.content)
        found = re.search(r"(http://\S+/s/[0-9a-z.]+)", text)
        assert found is not None, text
        links[str(sent.message["To"]).rpartition("<")[2].rstrip(">").lower()] = found.group(1)
    return links


async def deliver(db_url: str, settings: Settings) -> int:
    """Run the worker until the queue is empty; how many emails it sent."""
    fast = replace(settings, retry_base_seconds=0.01, retry_cap_seconds=0.05)
    return await run_until_drained(db_url, fast)


def signatures(db_url: str) -> list[dict[str, Any]]:
    """The document's signatures, as stored, oldest first."""
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT id, signer_email, user_sub, referer, host(ip_address) AS ip, user_agent, payload_hash,"
            " signed_at, seq FROM mailroom.signatures WHERE doc_id = %s ORDER BY seq",
            (DOC_ID,),
        ).fetchall()


class ConsoleWatch:
    """The console's view of signing: its live feed (LISTEN) and its query for signature completion."""

    def __init__(self, db_url: str) -> None:
        self.data = ConsoleData(db_url)
        self.listening = asyncio.Event()
        self.signed = asyncio.Event()
        self.feed = LiveFeed(db_url, self._changed, lambda state: None)
        self._task: asyncio.Task[None] | None = None

    def _changed(self, tables: set[str]) -> None:
        self.listening.set()  # the first call is the full refresh after LISTEN
        if "signatures" in tables:
            self.signed.set()

    async def start(self) -> None:
        """Listen as the console does; return once the feed is live."""
        self._task = asyncio.create_task(self.feed.run())
        await asyncio.wait_for(self.listening.wait(), timeout=10)

    async def completion(self) -> tuple[int, int]:
        """(signed, expected) of the document, as the console's overview shows them."""
        [row] = [r for r in await self.data.documents() if r["doc_id"] == DOC_ID]
        return int(row["signed"]), int(row["expected"])

    async def missing(self) -> list[str]:
        """The expected signers the console lists as not signed yet."""
        return [str(r["email"]) for r in await self.data.missing_signers(DOC_ID)]

    async def stop(self) -> None:
        """Stop listening and close the console's connection."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.data.close()
