"""The tracker: a small aiohttp server for open pixels, click redirects and RFC 8058 one-click unsubscribe.

It shares the database and configuration with the worker. Every answer depends only on a token
looked up in PostgreSQL: a redirect goes to the destination stored for the link when the email
was enqueued (never to anything in the request), and a token that is unknown, altered or
malformed changes nothing.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
from aiohttp import web

from worker.core.config import Settings
from worker.core.db import connection_kwargs
from worker.core.failover import DatabaseCircuit, Pool, database_unavailable
from worker.core.links import ONE_CLICK
from worker.core.masking import mask_address
from worker.core.return_path import optional_bounce_key
from worker.core.signing_desk import SigningDesk
from worker.core.webhook_events import EventSink
from worker.tracking.listener import listen, request_deadline
from worker.tracking.pages import COMMON, NO_CACHE, POOL, client, page
from worker.tracking.unsubscribe import find_target, is_unsubscribed
from worker.tracking.unsubscribe import unsubscribe as unsubscribe_target

log = logging.getLogger("mailroom.tracker")

# The smallest transparent 1x1 GIF (43 bytes).
PIXEL = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")

# Events are written in batches (see `EventWriter`); unknown tokens simply join to nothing.
RECORD_OPENS = """
INSERT INTO mailroom.open_events (occurred_at, email_id, campaign_id, ip_address, user_agent)
SELECT e.at, q.id, q.campaign_id, e.ip, e.ua
FROM unnest(%(tokens)s::uuid[], %(at)s::timestamptz[], %(ip)s::inet[], %(ua)s::text[]) AS e(token, at, ip, ua)
JOIN mailroom.email_queue q ON q.tracking_token = e.token AND q.track_opens
"""

RECORD_CLICKS = """
INSERT INTO mailroom.click_events (occurred_at, email_id, link_token, url, campaign_id, ip_address, user_agent)
SELECT e.at, l.email_id, l.token, l.url, q.campaign_id, e.ip, e.ua
FROM unnest(%(tokens)s::uuid[], %(at)s::timestamptz[], %(ip)s::inet[], %(ua)s::text[]) AS e(token, at, ip, ua)
JOIN mailroom.tracked_links l ON l.token = e.token
JOIN mailroom.email_queue q ON q.id = l.email_id
"""

LINK_DESTINATION = "SELECT url FROM mailroom.tracked_links WHERE token = %s"

# One event: (token, time, ip, user agent).
Event = tuple[uuid.UUID, datetime, str | None, str | None]


class EventWriter:
    """Group commit for opens and clicks: requests queue events, one task writes what has queued in one statement.

    An idle tracker writes each event at once (a batch of one); under load the batches grow, so a
    burst costs a few statements instead of one per request. Events still queued when the process
    is killed are lost; a clean shutdown writes them first.
    """

    def __init__(self, pool: Pool, max_queued: int = 100_000) -> None:
        self.pool = pool
        self.max_queued = max_queued
        self._queued: dict[str, list[Event]] = {RECORD_OPENS: [], RECORD_CLICKS: []}
        self._wake = asyncio.Event()
        self._closing = False
        self.dropped = 0

    def add(self, statement: str, event: Event) -> None:
        """Queue one event for `RECORD_OPENS` or `RECORD_CLICKS`."""
        queued = self._queued[statement]
        if len(queued) >= self.max_queued:
            self.dropped += 1  # PostgreSQL has been unreachable for a while: shed load, say so below
            return
        queued.append(event)
        self._wake.set()

    async def flush(self) -> None:
        """Write everything queued so far."""
        for statement, queued in self._queued.items():
            if not queued:
                continue
            batch, self._queued[statement] = queued, []
            columns = [list(column) for column in zip(*batch, strict=True)]
            params = {"tokens": columns[0], "at": columns[1], "ip": columns[2], "ua": columns[3]}
            try:
                async with self.pool.connection() as conn:
                    await conn.execute(statement, params)
            except Exception as exc:  # the writer task must outlive any one bad batch
                if database_unavailable(exc):
                    self._queued[statement] = batch + self._queued[statement]
                    raise
                # Not the database being away: trying again would fail the same way. Say so loudly.
                log.error("dropped %d tracking event(s): %s", len(batch), str(exc)[:300])

    def close(self) -> None:
        """Ask `run` to write what is queued and return (never cancelled mid-write, so nothing is lost)."""
        self._closing = True
        self._wake.set()

    async def run(self) -> None:
        """Write events as they come until closed; on a database error keep them and try again."""
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except psycopg.Error as exc:
                # Unavailable (the pool's circuit says so in the log); anything else kept them too.
                log.debug("tracking events not written yet (%s); retrying", exc)
                await asyncio.sleep(max(self.pool.circuit.wait_seconds(), 1.0))
                self._wake.set()
            if self.dropped:
                log.warning("dropped %d tracking event(s): too many waiting for the database", self.dropped)
                self.dropped = 0


class LinkCache:
    """Link token -> stored destination, least recently used first out; a link never changes once stored."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._urls: OrderedDict[uuid.UUID, str | None] = OrderedDict()

    async def destination(self, pool: Pool, token: uuid.UUID) -> str | None:
        """The stored URL of a link, or None for a token that is not one."""
        if token in self._urls:
            self._urls.move_to_end(token)
            return self._urls[token]
        async with pool.connection() as conn:
            row = await (await conn.execute(LINK_DESTINATION, (token,))).fetchone()
        url = str(row[0]) if row else None
        self._urls[token] = url
        if len(self._urls) > self.size:
            self._urls.popitem(last=False)
        return url


WRITER = web.AppKey("writer", EventWriter)
LINKS = web.AppKey("links", LinkCache)
# The return-path key, which signs each recipient's unsubscribe link (None: only plain links work).
KEY: web.AppKey[bytes | None] = web.AppKey("key")


def _token(request: web.Request) -> uuid.UUID | None:
    try:
        return uuid.UUID(request.match_info["token"])
    except ValueError:
        return None


async def open_pixel(request: web.Request) -> web.Response:
    """GET /o/{token}.gif: record an open (GET only, known token, tracked email) and answer the pixel."""
    token = _token(request)
    # HEAD is what some prefetchers send: it counts for nothing. The reader never waits for the write.
    if token is not None and request.method == "GET":
        request.app[WRITER].add(RECORD_OPENS, (token, datetime.now(UTC), *client(request)))
    return web.Response(body=PIXEL, content_type="image/gif", headers={**NO_CACHE, **COMMON})


async def click(request: web.Request) -> web.Response:
    """GET /c/{token}: record a click and redirect to the destination stored for this link."""
    token = _token(request)
    url = None
    if token is not None:
        url = await request.app[LINKS].destination(request.app[POOL], token)
        if url is not None and request.method == "GET":
            request.app[WRITER].add(RECORD_CLICKS, (token, datetime.now(UTC), *client(request)))
    # The stored destination was checked at enqueue and by the database; check it again all the same.
    if url is not None and url.lower().startswith(("http://", "https://")):
        try:
            redirect = web.HTTPFound(location=url, headers={"Cache-Control": "no-store", **COMMON})
        except ValueError:  # stored before enqueue checked what a redirect can carry
            log.warning("link %s has a destination no redirect can carry", token)
        else:
            raise redirect
    return page("Link not found", "<p>This link is not valid or has expired.</p>", status=404)


async def unsubscribe_page(request: web.Request) -> web.Response:
    """GET /u/{token}: never unsubscribes (scanners follow links); shows a button that POSTs."""
    async with request.app[POOL].connection() as conn:
        target = await find_target(conn, request.match_info["token"], request.app[KEY])
        done = target is not None and await is_unsubscribed(conn, target)
    if target is None:
        return page("Link not found", "<p>This unsubscribe link is not valid.</p>", status=404)
    who = html.escape(mask_address(target.address))
    if done:
        return page("Unsubscribed", f"<p>{who} is unsubscribed and gets no more of these emails.</p>")
    action = html.escape(request.path, quote=True)
    name, _, value = ONE_CLICK.partition("=")
    form = (
        f'<form method="post" action="{action}">'
        f'<input type="hidden" name="{name}" value="{value}">'
        '<input type="hidden" name="confirm" value="page">'
        '<button type="submit">Unsubscribe</button></form>'
    )
    return page("Unsubscribe", f"<p>Stop sending these emails to {who}?</p>{form}")


_FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


async def _one_click(request: web.Request) -> tuple[bool, bool]:
    """(the body asks for RFC 8058 one-click, it came from our confirmation page's button).

    RFC 8058 names two encodings; a body that is exactly `List-Unsubscribe=One-Click` under any
    other (or no) content type is honoured too, since refusing it would ignore someone's request.
    A body over the size limit is a 413.
    """
    key, _, value = ONE_CLICK.partition("=")
    if request.content_type in _FORM_TYPES:
        try:
            form = await request.post()
        except web.HTTPRequestEntityTooLarge:
            raise
        except (ValueError, web.HTTPException):
            return False, False
        return form.get(key) == value, form.get("confirm") == "page"
    return (await request.read()).strip() == ONE_CLICK.encode("ascii"), False


async def unsubscribe(request: web.Request) -> web.Response:
    """POST /u/{token} with `List-Unsubscribe=One-Click` (form-encoded or multipart): unsubscribe now, 200.

    No cookie, session or second step is asked for (RFC 8058 §3.2), and the answer is never a redirect.
    """
    one_click, from_page = await _one_click(request)
    if not one_click:
        return web.Response(
            text=f"expected a form body with {ONE_CLICK}\n", status=400, headers={**NO_CACHE, **COMMON}
        )
    ip, agent = client(request)
    async with request.app[POOL].connection() as conn:
        target = await find_target(conn, request.match_info["token"], request.app[KEY])
        if target is not None:
            await unsubscribe_target(
                conn,
                target,
                source="link" if from_page else "one_click",
                reason="unsubscribe page" if from_page else "RFC 8058 one-click",
                ip=ip,
                user_agent=agent,
            )
    if target is None:
        return page("Link not found", "<p>This unsubscribe link is not valid.</p>", status=404)
    log.info("unsubscribed via %s", "page" if from_page else "one-click")
    return page("Unsubscribed", "<p>You will get no more of these emails.</p>")


async def health(request: web.Request) -> web.Response:
    """GET /healthz: the tracker is up and reaches PostgreSQL."""
    async with request.app[POOL].connection() as conn:
        await conn.execute("SELECT 1")
    return web.Response(text="ok\n", headers=NO_CACHE)


@web.middleware
async def _database_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """PostgreSQL unavailable: 503, so mailbox providers retry a one-click POST later."""
    try:
        response: web.StreamResponse = await handler(request)
    except (psycopg.Error, TimeoutError) as exc:
        if not (database_unavailable(exc) or isinstance(exc, TimeoutError)):
            raise
        log.info("%s %s: database unavailable (%s)", request.method, request.path, exc)
        return web.Response(text="temporarily unavailable\n", status=503, headers={"Retry-After": "30"})
    return response


def _pool_context(
    url: str, settings: Settings, pool_size: int, pool_timeout: float
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The app's connection pool and event writer: opened with the app, flushed and closed with it."""

    async def pool_context(app: web.Application) -> AsyncIterator[None]:
        pool = Pool(
            url,
            circuit=DatabaseCircuit("tracker"),
            min_size=1,
            max_size=pool_size,
            open=False,
            timeout=pool_timeout,
            kwargs=connection_kwargs(settings, asynchronous_commit=True),
        )
        await pool.open(wait=False)
        writer = EventWriter(pool)
        app[POOL], app[WRITER], app[LINKS] = pool, writer, LinkCache()
        task = asyncio.create_task(writer.run(), name="tracking-events")
        try:
            yield
        finally:
            writer.close()
            with contextlib.suppress(psycopg.Error, TimeoutError):
                await asyncio.wait_for(task, timeout=10)
            try:
                await writer.flush()
            except psycopg.Error as exc:
                log.error("tracking events lost at shutdown: %s", exc)
            await pool.close()

    return pool_context


def make_app(
    url: str,
    settings: Settings,
    *,
    pool_size: int = 10,
    pool_timeout: float = 5.0,
    bounce_sink: EventSink | None = None,
    signing: SigningDesk | None = None,
) -> web.Application:
    """The tracker's application; its connection pool opens with the app and closes with it.

    With a `bounce_sink` (what applies bounces: the command line passes the bounce producers') it
    also serves the bounce and complaint webhooks of `worker.tracking.webhooks`.

    The tracker starts, and keeps answering, while PostgreSQL is unreachable: pixels are still
    served (their events wait in memory), and what needs the database is a 503 after at most
    `pool_timeout` seconds, so a provider's one-click POST is retried instead of hanging.
    """
    # Bodies: forms up to 64 KiB here, webhooks read their own up to theirs; each request, its
    # body included, within the deadline (a body trickled a byte a minute holds nothing for long).
    deadline = request_deadline(settings.tracker_request_timeout_seconds)
    app = web.Application(client_max_size=64 * 1024, middlewares=[deadline, _database_errors])
    app.cleanup_ctx.append(_pool_context(url, settings, pool_size, pool_timeout))
    app[KEY] = optional_bounce_key(settings)
    app.router.add_get("/o/{token}.gif", open_pixel)
    app.router.add_get("/c/{token}", click)
    app.router.add_get("/u/{token}", unsubscribe_page)
    app.router.add_post("/u/{token}", unsubscribe)
    app.router.add_get("/healthz", health)
    from worker.tracking.oidc import add_routes as add_login_routes

    add_login_routes(app, url, settings)
    if bounce_sink is not None:
        from worker.tracking.webhooks import add_routes

        add_routes(app, url, settings, bounce_sink)
    if signing is not None:  # the signing page: the command line hands over the signatures domain's desk
        from worker.tracking import signing as signing_page

        signing_page.add_routes(app, settings, signing)
    return app


async def run_tracker(
    url: str,
    settings: Settings,
    host: str,
    port: int,
    bounce_sink: EventSink | None = None,
    signing: SigningDesk | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT, with the limits of `worker.tracking.listener` (timeouts, connections per client)."""
    import signal

    app = make_app(url, settings, bounce_sink=bounce_sink, signing=signing)
    listening = await listen(app, settings, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    log.info("tracker listening on http://%s:%d (public base URL %s)", host, port, settings.base_url)
    if not settings.base_url.startswith("https://"):
        log.warning(
            "MAILROOM_BASE_URL is %s: mailbox providers expect an https List-Unsubscribe URL",
            settings.base_url,
        )
    try:
        await stop.wait()
    finally:
        await listening.close()
