"""DMARC reports as a flood, played through `mailroom dmarc ingest` and the bounce receiver over SMTP: a
stranger's report of 50,000 records is refused on its header, cheaply; mailed reports are capped far
lower than a file; and a DSN is answered within a second while reports pour into dmarc@."""

from __future__ import annotations

import asyncio
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from tests.cli import run
from tests.producers.bounces import corpus
from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY, readdress, sent_email
from tests.producers.bounces.receivers import Clock, send_report
from tests.producers.dmarc_helpers import add_sender, big_report, count, gzipped, mailed
from worker.core.return_path import return_path
from worker.producers.bounces.intake import Outcome
from worker.producers.bounces.receiver import (
    ACCEPTED,
    REPORTS_BUSY,
    BounceHandler,
    BounceServer,
    RateLimiter,
    database_processor,
)

DMARC = f"dmarc@{BOUNCE_DOMAIN}"
UNKNOWN = "nobody@example.net"
STRANGER = "stranger.example"
NEUTRAL = ACCEPTED.removeprefix("250 ")
BUSY = (451, REPORTS_BUSY.removeprefix("451 "))
BOUND = 20.0  # every wait on the server is cut off here (the unbounded receiver took minutes)


class Watched:
    """The real processor, telling the test (on its event loop) when a report starts being read and how
    many are being read at once."""

    def __init__(self, process: Callable[[bytes, list[str], str], Outcome]) -> None:
        self.process = process
        self.loop = asyncio.get_running_loop()
        self.started = asyncio.Event()
        self.reading = 0
        self.lock = threading.Lock()
        # Cleared: a report being read waits here, so the test decides how long the lane is busy.
        self.go_on = threading.Event()
        self.go_on.set()

    def __call__(self, raw: bytes, recipients: list[str], client: str) -> Outcome:
        report = DMARC in recipients
        if report:
            with self.lock:
                self.reading += 1
            self.loop.call_soon_threadsafe(self.started.set)
            self.go_on.wait(BOUND)
        try:
            return self.process(raw, recipients, client)
        finally:
            if report:
                with self.lock:
                    self.reading -= 1


def test_a_strangers_report_of_50000_records_is_refused_on_its_header_at_a_fraction_of_the_cost(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_sender(db_url)
    path = tmp_path / "report.xml.gz"
    path.write_bytes(gzipped(big_report(50_000, domain=STRANGER)))
    assert path.stat().st_size < 100_000  # 19 MB of XML
    tracemalloc.start()
    cpu = time.process_time()
    try:
        code, out, err = run(capsys, "dmarc", "ingest", str(path))
        cpu = time.process_time() - cpu
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (code, out) == (1, "")
    assert f"the report is for {STRANGER}, which is not the From domain of any sender account" in err
    # parsedmarc read all of it first: 23 s of CPU and 348 MB (tracemalloc counts Python's share).
    assert peak < 16 << 20
    assert cpu < 2.0
    assert count(db_url, "dmarc_reports") == 0


async def test_mailed_reports_are_capped_at_5000_records_where_a_file_may_hold_50000(
    db_url: str, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    add_sender(db_url)
    xml = big_report(5_001, distinct=True)
    handler = BounceHandler(
        database_processor(db_url, FIXTURE_KEY), frozenset({BOUNCE_DOMAIN}), RateLimiter(600, 100, Clock())
    )
    server = BounceServer(handler, "127.0.0.1", 0)
    port = await server.start()
    try:
        assert await send_report(port, mailed(xml), DMARC) == (250, NEUTRAL)
    finally:
        await server.close()
    with psycopg.connect(db_url) as conn:
        reason = conn.execute("SELECT reason FROM mailroom.bounce_quarantine").fetchone()
    assert reason == ("DMARC report refused: more than 5000 records",)
    path = tmp_path / "report.xml"
    path.write_bytes(xml)
    code, out, _ = run(capsys, "dmarc", "ingest", str(path))
    assert code == 0 and "(5001 records, 5001 messages): stored" in out


async def test_a_dsn_is_answered_while_reports_flood_dmarc_and_one_is_being_read(db_url: str) -> None:
    add_sender(db_url)
    email = sent_email(db_url, UNKNOWN)
    dsn_to = return_path(email["id"], UNKNOWN, BOUNCE_DOMAIN, "bounces", FIXTURE_KEY)
    dsn = readdress(corpus.load("postfix-unknown-user.eml"), email["id"], UNKNOWN, FIXTURE_KEY)
    watched = Watched(database_processor(db_url, FIXTURE_KEY))
    handler = BounceHandler(watched, frozenset({BOUNCE_DOMAIN}), RateLimiter(600, 100, Clock()))
    server = BounceServer(handler, "127.0.0.1", 0)
    port = await server.start()
    try:
        # Six strangers' reports of 50,000 records from one address: each answered, none stored.
        strangers = mailed(big_report(50_000, domain=STRANGER))
        tracemalloc.start()
        try:
            async with asyncio.timeout(BOUND):
                replies = await asyncio.gather(*(send_report(port, strangers, DMARC) for _ in range(6)))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert set(replies) <= {(250, NEUTRAL), BUSY} and (250, NEUTRAL) in replies
        assert peak < 32 << 20  # the receiver went from 41 MiB to 1.2 GiB
        # Our own domain's reports, more of them than the default executor has threads, held in the middle
        # of reading until the bounce sent among them is answered: the bounce must not queue behind them
        # (no clock: if it did, it would wait for the reports' release, which comes only after its answer).
        ours = [mailed(big_report(500, report_id=f"r{i}", distinct=True), f"r{i}") for i in range(8)]
        watched.go_on.clear()
        flood = [asyncio.create_task(send_report(port, raw, DMARC)) for raw in ours]
        try:
            async with asyncio.timeout(BOUND):
                await watched.started.wait()
            async with asyncio.timeout(BOUND):
                reply = await send_report(port, dsn, dsn_to)
            still_reading = watched.reading
        finally:
            watched.go_on.set()
        async with asyncio.timeout(BOUND):
            flooded = await asyncio.gather(*flood)
    finally:
        await server.close()
    assert reply == (250, NEUTRAL)
    assert still_reading == 1  # answered while a report was being read, one at a time
    assert set(flooded) <= {(250, NEUTRAL), BUSY} and (250, NEUTRAL) in flooded
    with psycopg.connect(db_url) as conn:
        status = conn.execute(
            "SELECT status FROM mailroom.email_queue WHERE id = %s", (email["id"],)
        ).fetchone()
        quarantined = conn.execute(
            "SELECT count(*) FROM mailroom.bounce_quarantine WHERE reason LIKE %s", (f"%is for {STRANGER}%",)
        ).fetchone()
    assert status == ("bounced",)
    assert quarantined == (1,)  # the same message, kept once
    assert count(db_url, "dmarc_reports") == flooded.count((250, NEUTRAL))
