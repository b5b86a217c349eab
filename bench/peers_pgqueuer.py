"""A small email sender built on pgqueuer, the way its documentation builds a worker, for bench.peers.

Run by the peers' virtualenv (pgqueuer is no dependency of Mailroom), with PEERS_DATABASE_URL and
PEERS_SMTP_PORT in the environment:

    python -m bench.peers_pgqueuer enqueue N        N jobs on the entrypoint "send_email", one statement
    python -m bench.peers_pgqueuer run BATCH        what `pgq run bench.peers_pgqueuer:create_pgqueuer
                                                    --mode drain --batch-size BATCH` does

`pgq run` itself fails before it starts with pgqueuer 1.6.0 beside typer 0.29 (its --log-level
reaches the logger as a string), so `run` calls the same supervisor through pgqueuer's documented
`pgqueuer.run(factory, ...)`, on uvloop as the command does, with pgqueuer's logger at WARNING.

The factory is an async context manager (as `pgq run` requires) that opens one asyncpg connection
and PEERS_SMTP_CONNECTIONS (default 4) SMTP connections with aiosmtplib, kept open for the whole run
and shared by the jobs through a queue (as Mailroom's `--concurrency 4` keeps four). Each job's payload is the email as
JSON; the entrypoint builds the message and sends it on a free connection. On exit it prints
`sent=S failed=F first=T0 last=T1 entered=T2 left=T3`: monotonic seconds of the first and last
accepted message, of the factory's start and of its end.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

import aiosmtplib
import asyncpg
import pgqueuer
import uvloop
from pgqueuer import AsyncpgDriver, Job, PgQueuer, Queries
from pgqueuer.core import logconfig
from pgqueuer.types import QueueExecutionMode

ENTRYPOINT = "send_email"


def _smtp() -> aiosmtplib.SMTP:
    return aiosmtplib.SMTP(hostname="127.0.0.1", port=int(os.environ["PEERS_SMTP_PORT"]), start_tls=False)


@asynccontextmanager
async def create_pgqueuer() -> AsyncIterator[PgQueuer]:
    """The PgQueuer `pgq run` drives: one entrypoint sending over pooled SMTP connections."""
    entered = time.monotonic()
    connection = await asyncpg.connect(os.environ["PEERS_DATABASE_URL"])
    pgq = PgQueuer(AsyncpgDriver(connection))
    pool: asyncio.Queue[aiosmtplib.SMTP] = asyncio.Queue()
    clients = [_smtp() for _ in range(int(os.environ.get("PEERS_SMTP_CONNECTIONS", "4")))]
    await asyncio.gather(*(client.connect() for client in clients))
    for client in clients:
        pool.put_nowait(client)
    counts = {"sent": 0, "failed": 0}
    times: list[float] = []

    @pgq.entrypoint(ENTRYPOINT)
    async def send_email(job: Job) -> None:
        data = json.loads(job.payload or b"{}")
        message = EmailMessage()
        message["From"] = data["from"]
        message["To"] = data["to"]
        message["Subject"] = data["subject"]
        message["Date"] = formatdate(localtime=False)
        message["Message-ID"] = make_msgid(domain="example.org")
        message.set_content(data["text"])
        client = await pool.get()
        try:
            await client.send_message(message)
        except Exception:
            counts["failed"] += 1
            with suppress(Exception):
                client.close()
            client = _smtp()  # a fresh connection for the next job; this one is retried by nobody
            with suppress(Exception):
                await client.connect()
            raise
        finally:
            pool.put_nowait(client)
        counts["sent"] += 1
        now = time.monotonic()
        if not times:
            times.append(now)
        times[1:] = [now]

    try:
        yield pgq
    finally:
        while not pool.empty():
            with suppress(Exception):
                await pool.get_nowait().quit()
        with suppress(Exception):
            await connection.close()
        first, last = (times[0], times[-1]) if times else (0.0, 0.0)
        print(
            f"sent={counts['sent']} failed={counts['failed']} first={first} last={last}"
            f" entered={entered} left={time.monotonic()}",
            flush=True,
        )


async def enqueue(n: int) -> None:
    """N jobs in one round trip through pgqueuer's own batch enqueue."""
    connection = await asyncpg.connect(os.environ["PEERS_DATABASE_URL"])
    try:
        queries = Queries(AsyncpgDriver(connection))
        payloads: list[bytes | None] = [
            json.dumps(
                {
                    "from": "bench@example.org",
                    "to": f"user{i}@example.com",
                    "subject": f"Benchmark message {i}",
                    "text": "Hello from the benchmark.\n",
                }
            ).encode()
            for i in range(n)
        ]
        await queries.enqueue([ENTRYPOINT] * n, payloads, [0] * n)
    finally:
        await connection.close()


def run(batch_size: int) -> None:
    """Drain the queue as `pgq run --mode drain` would."""
    logconfig.setup_fancy_logger(logconfig.LogLevel.WARNING)
    uvloop.run(pgqueuer.run(create_pgqueuer, mode=QueueExecutionMode.drain, batch_size=batch_size))


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("enqueue", "run"):
        sys.exit(__doc__)
    if sys.argv[1] == "enqueue":
        asyncio.run(enqueue(int(sys.argv[2])))
    else:
        run(int(sys.argv[2]))
