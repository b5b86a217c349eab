"""The worker's webhook dispatcher: claims due deliveries, POSTs each event signed, records what came
back.

A claim leases deliveries (`FOR UPDATE SKIP LOCKED`, so several workers share the work) and takes,
for each endpoint, no more than `MAILROOM_WEBHOOK_IN_FLIGHT` less what this process has in flight
there, and never an email's event while an earlier event of the same email is still pending for
that endpoint: an endpoint sees an email's events in order. Each POST is its own task with its own
timeout, so a receiver that hangs holds only its own slots; the email's delivery and the other
endpoints go on. Results are written in one statement per round. A process that dies leaves its
leases to expire: the event goes again, with the same `webhook-id`, which is what a receiver
de-duplicates on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import aiohttp
import psycopg
from psycopg.rows import dict_row

from worker.core.config import Settings
from worker.core.crypto import SecretBox, secret_box
from worker.hooks import addresses, signing

log = logging.getLogger("mailroom.webhooks")

# How much of an answer is read (for the error recorded): a receiver cannot make the worker read more.
ANSWER_BYTES = 1024
# How long a round waits for its POSTs to end before it records what ended and claims again.
ROUND_WAIT_SECONDS = 0.05
# Failed attempts in a row after which an endpoint is left alone for a while (its circuit opens).
CIRCUIT_AFTER = 5
CIRCUIT_CAP_SECONDS = 600.0

# A claim or a record lost to a crash costs a POST again with the same webhook-id, which receivers
# de-duplicate on: neither waits for the disk (or a standby).
ASYNCHRONOUS = "SET LOCAL synchronous_commit = off"

# Per endpoint that may be sent to now (active, circuit closed, room left in this process), its oldest
# due deliveries up to its room: one endpoint's backlog never hides another's events.
CLAIM = """
WITH used AS (
    SELECT * FROM unnest(%(busy_ids)s::bigint[], %(busy_counts)s::int[]) AS u(endpoint_id, n)
), open AS (
    SELECT p.id, %(cap)s - coalesce(u.n, 0) AS room
    FROM mailroom.webhook_endpoints p
    LEFT JOIN used u ON u.endpoint_id = p.id
    WHERE p.status = 'active' AND (p.circuit_until IS NULL OR p.circuit_until <= now())
      AND %(cap)s - coalesce(u.n, 0) > 0
), picked AS (
    SELECT due.row_id
    FROM open
    CROSS JOIN LATERAL (
        SELECT d.ctid AS row_id
        FROM mailroom.webhook_deliveries d
        WHERE d.endpoint_id = open.id AND d.status = 'pending' AND d.next_attempt_at <= now()
          AND (d.leased_until IS NULL OR d.leased_until < now())
          -- the email's first event still pending for this endpoint (a subquery per row, one probe
          -- of webhook_deliveries_email_order_idx each, whatever the table's statistics say)
          AND (d.email_id IS NULL OR d.event_id = (
              SELECT min(e.event_id) FROM mailroom.webhook_deliveries e
              WHERE e.endpoint_id = d.endpoint_id AND e.email_id = d.email_id AND e.status = 'pending'))
        ORDER BY d.endpoint_id, d.event_id  -- the order of webhook_deliveries_pending_idx
        LIMIT open.room
        FOR UPDATE OF d SKIP LOCKED
    ) due
)
-- The rows locked above, found again by their tuple ids (a scan of the table would grow with it).
UPDATE mailroom.webhook_deliveries d
SET leased_until = now() + make_interval(secs => %(lease)s),
    attempts = d.attempts + 1,
    first_attempt_at = coalesce(d.first_attempt_at, now())
FROM mailroom.webhook_events v, mailroom.webhook_endpoints p
WHERE d.ctid = ANY (ARRAY(SELECT row_id FROM picked))
  AND v.id = d.event_id AND p.id = d.endpoint_id
RETURNING d.endpoint_id, d.event_id, d.attempts, v.uid, v.type, v.occurred_at, v.email_id, v.owner,
          v.idempotency_key, v.recipient, v.data, p.url, p.owner_role, p.secret_encrypted, p.allow_private
"""

RECORD_DELIVERIES = """
UPDATE mailroom.webhook_deliveries d
SET status = CASE WHEN r.delivered THEN 'delivered'
                  WHEN NOT r.gone AND d.first_attempt_at < now() - make_interval(secs => %(window)s) THEN 'dead'
                  ELSE 'pending' END,
    finished_at = CASE WHEN r.delivered
                         OR (NOT r.gone AND d.first_attempt_at < now() - make_interval(secs => %(window)s))
                       THEN now() END,
    next_attempt_at = CASE WHEN r.delivered THEN d.next_attempt_at
                           ELSE now() + make_interval(secs => r.delay) END,
    leased_until = NULL, last_code = r.code, last_error = r.error
FROM unnest(%(endpoints)s::bigint[], %(events)s::bigint[], %(attempts)s::int[], %(delivered)s::boolean[],
            %(gone)s::boolean[], %(codes)s::smallint[], %(errors)s::text[], %(delays)s::float8[])
     AS r(endpoint_id, event_id, attempt, delivered, gone, code, error, delay)
-- Only the attempt this process claimed: a result held back past its lease (the database was away)
-- never overwrites what another worker's later attempt recorded.
WHERE d.endpoint_id = r.endpoint_id AND d.event_id = r.event_id AND d.status = 'pending' AND d.attempts = r.attempt
"""

RECORD_ENDPOINTS = """
UPDATE mailroom.webhook_endpoints p
SET failures = CASE WHEN r.ok THEN 0 ELSE p.failures + r.failed END,
    failing_since = CASE WHEN r.ok THEN NULL ELSE coalesce(p.failing_since, now()) END,
    last_success_at = CASE WHEN r.ok OR r.succeeded > 0 THEN now() ELSE p.last_success_at END,
    last_error = coalesce(r.error, p.last_error),
    circuit_until = CASE WHEN r.ok OR p.failures + r.failed < %(after)s THEN NULL
                         ELSE now() + make_interval(secs => least(%(cap)s,
                              %(base)s * power(2, least(p.failures + r.failed - %(after)s, 16)))) END,
    status = CASE WHEN r.gone AND p.status = 'active' THEN 'disabled' ELSE p.status END,
    status_reason = CASE WHEN r.gone AND p.status = 'active'
                         THEN 'the receiver answered 410 Gone at ' || now()::text ELSE p.status_reason END
FROM unnest(%(ids)s::bigint[], %(ok)s::boolean[], %(succeeded)s::int[], %(failed)s::int[],
            %(gone)s::boolean[], %(errors)s::text[])
     AS r(id, ok, succeeded, failed, gone, error)
WHERE p.id = r.id
"""


@dataclass(frozen=True)
class Result:
    """What one POST of one delivery came to."""

    endpoint_id: int
    event_id: int
    attempts: int
    code: int | None
    error: str | None

    @property
    def delivered(self) -> bool:
        """A 2xx answer: the receiver has it."""
        return self.code is not None and 200 <= self.code < 300

    @property
    def gone(self) -> bool:
        """410 Gone: the receiver asks for no more (the endpoint is disabled)."""
        return self.code == 410


def payload(row: Mapping[str, Any]) -> bytes:
    """The JSON body of one event for one endpoint: the recipient, the key and any reason only for the
    endpoint of the role that enqueued the email."""
    own = row["owner_role"] is not None and row["owner_role"] == row["owner"]
    data: dict[str, Any] = dict(row["data"] or {})
    if not own:  # a reason may quote the address, and a click's URL may carry it
        data.pop("reason", None)
        data.pop("url", None)
    if row["email_id"] is not None:
        data["email_id"] = row["email_id"]
        if own:
            data["recipient"] = row["recipient"]
            data["idempotency_key"] = row["idempotency_key"]
    occurred: datetime = row["occurred_at"]
    body = {"type": row["type"], "timestamp": occurred.isoformat(), "data": data}
    return json.dumps(body, separators=(",", ":"), sort_keys=True, default=str).encode()


def message_id(uid: Any) -> str:
    """The `webhook-id` of an event: the same on every attempt and every replay."""
    return f"evt_{uid.hex if hasattr(uid, 'hex') else uid}"


async def post(
    session: aiohttp.ClientSession,
    url: str,
    key: bytes,
    event_uid: Any,
    body: bytes,
    within: float,
    *,
    allow_private: bool,
) -> tuple[int | None, str | None]:
    """POST one signed event: (status code, None) on an answer, (code or None, error) otherwise."""
    try:
        addresses.check_literal(url, allow_private=allow_private)
        headers = signing.headers(key, message_id(event_uid), int(time.time()), body)
        client_timeout = aiohttp.ClientTimeout(total=within)
        async with session.post(
            url, data=body, headers=headers, allow_redirects=False, timeout=client_timeout
        ) as response:
            answer = await response.content.read(ANSWER_BYTES)
            if 200 <= response.status < 300:
                return response.status, None
            said = answer.decode("utf-8", "replace").strip().replace("\n", " ")[:200]
            if 300 <= response.status < 400:
                return response.status, f"HTTP {response.status}: redirects are not followed"
            return response.status, f"HTTP {response.status}" + (f": {said}" if said else "")
    except TimeoutError:
        return None, f"no answer within {within:g} s"
    except aiohttp.ClientConnectorError as exc:  # say why it could not connect (a refused address too)
        return None, f"cannot connect to {exc.host}:{exc.port}: {exc.os_error}"[:500]
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"[:500]


def backoff(attempts: int, settings: Settings) -> float:
    """How long a delivery waits after its `attempts`-th failed attempt: six times longer each, capped,
    with a tenth of jitter so a receiver back from an outage is not hit by everything at once."""
    delay = min(settings.webhook_retry_cap_seconds, settings.webhook_retry_base_seconds * 6 ** (attempts - 1))
    return float(delay * random.uniform(0.9, 1.1))


@dataclass
class Dispatcher:
    """One worker process's webhook deliveries: the POSTs in flight and the results not yet recorded."""

    in_flight: Counter[int] = field(default_factory=Counter)
    finished: list[Result] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    sessions: dict[bool, aiohttp.ClientSession] = field(default_factory=dict)
    keys: dict[tuple[int, bytes], bytes] = field(default_factory=dict)
    box: SecretBox | None = None

    async def run_once(self, conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
        """One round: record what ended, claim and start what is due; more than 0 while work is about."""
        recorded = await self.record(conn, settings)
        started = await self.claim(conn, settings)
        if self.tasks:
            # The POSTs just started usually end together: their results go in one statement. One that
            # hangs holds this wait no longer than the round's, and its endpoint's slots only.
            await asyncio.wait(self.tasks, timeout=ROUND_WAIT_SECONDS)
            recorded += await self.record(conn, settings)
        # POSTs still in flight, or ended since the record above: another round at once.
        return recorded + started + len(self.tasks) + len(self.finished)

    async def claim(self, conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
        """Lease what is due and start a POST for each."""
        busy = [(endpoint, n) for endpoint, n in self.in_flight.items() if n > 0]
        params = {
            "busy_ids": [b[0] for b in busy],
            "busy_counts": [b[1] for b in busy],
            "cap": settings.webhook_in_flight,
            "lease": settings.webhook_timeout_seconds + 30.0,
        }
        async with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(ASYNCHRONOUS)
            rows = await (await cur.execute(CLAIM, params)).fetchall()
        for row in sorted(rows, key=lambda r: r["event_id"]):
            self._start(row, settings)
        return len(rows)

    def _start(self, row: dict[str, Any], settings: Settings) -> None:
        endpoint = int(row["endpoint_id"])
        self.in_flight[endpoint] += 1
        task = asyncio.create_task(self._deliver(row, settings), name=f"webhook {endpoint}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _deliver(self, row: dict[str, Any], settings: Settings) -> None:
        endpoint = int(row["endpoint_id"])
        try:
            key = self._key(endpoint, bytes(row["secret_encrypted"]), settings)
            session = self._session(bool(row["allow_private"]))
            code, error = await post(
                session, row["url"], key, row["uid"], payload(row), settings.webhook_timeout_seconds,
                allow_private=bool(row["allow_private"]),
            )  # fmt: skip
        except Exception as exc:  # a key that does not decrypt, a bug: recorded, retried, never lost
            log.exception("webhook endpoint %s: could not post event %s", endpoint, row["event_id"])
            code, error = None, f"{type(exc).__name__}: {exc}"[:500]
        finally:
            self.in_flight[endpoint] -= 1
        self.finished.append(Result(endpoint, int(row["event_id"]), int(row["attempts"]), code, error))

    def _key(self, endpoint: int, encrypted: bytes, settings: Settings) -> bytes:
        cached = self.keys.get((endpoint, encrypted))
        if cached is None:
            self.box = self.box or secret_box(settings)
            cached = signing.secret_bytes(self.box.decrypt(encrypted))
            self.keys[(endpoint, encrypted)] = cached
        return cached

    def _session(self, allow_private: bool) -> aiohttp.ClientSession:
        session = self.sessions.get(allow_private)
        if session is None or session.closed:
            session = addresses.client_session(allow_private)
            self.sessions[allow_private] = session
        return session

    async def record(self, conn: psycopg.AsyncConnection[Any], settings: Settings) -> int:
        """Write the results of the POSTs that ended, in two statements; how many."""
        results, self.finished = self.finished, []
        if not results:
            return 0
        try:
            async with conn.transaction(), conn.cursor() as cur:
                await cur.execute(ASYNCHRONOUS)
                await cur.execute(RECORD_DELIVERIES, _delivery_params(results, settings))
                await cur.execute(RECORD_ENDPOINTS, _endpoint_params(results, settings))
        except BaseException:
            self.finished = results + self.finished  # not lost: the next round writes them
            raise
        for result in results:
            if not result.delivered:
                log.info(
                    "webhook endpoint %s: event %s attempt %s failed: %s",
                    result.endpoint_id, result.event_id, result.attempts, result.error,
                )  # fmt: skip
        return len(results)

    async def close(self) -> None:
        """Stop the POSTs in flight (their leases run out and they go again) and close the sessions."""
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for session in self.sessions.values():
            await session.close()
        self.sessions.clear()


def _delivery_params(results: list[Result], settings: Settings) -> dict[str, Any]:
    return {
        "endpoints": [r.endpoint_id for r in results],
        "events": [r.event_id for r in results],
        "attempts": [r.attempts for r in results],
        "delivered": [r.delivered for r in results],
        "gone": [r.gone for r in results],
        "codes": [r.code for r in results],
        "errors": [r.error[:1000] if r.error else None for r in results],
        "delays": [0.0 if r.delivered else backoff(r.attempts, settings) for r in results],
        "window": settings.webhook_retry_hours * 3600.0,
    }


def _endpoint_params(results: list[Result], settings: Settings) -> dict[str, Any]:
    """Per endpoint: whether its last result was a success, how many succeeded and failed, 410, last error."""
    last: dict[int, Result] = {}
    succeeded: Counter[int] = Counter()
    failed: Counter[int] = Counter()
    for r in results:
        last[r.endpoint_id] = r
        (succeeded if r.delivered else failed)[r.endpoint_id] += 1
    ids = sorted(last)
    return {
        "ids": ids,
        "ok": [last[i].delivered for i in ids],
        "succeeded": [succeeded[i] for i in ids],
        "failed": [failed[i] for i in ids],
        "gone": [any(r.gone for r in results if r.endpoint_id == i) for i in ids],
        "errors": [None if last[i].delivered else (last[i].error or "")[:1000] for i in ids],
        "after": CIRCUIT_AFTER,
        "cap": min(CIRCUIT_CAP_SECONDS, settings.webhook_retry_cap_seconds),
        "base": settings.webhook_retry_base_seconds,
    }
