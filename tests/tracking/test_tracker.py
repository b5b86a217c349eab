"""The tracker over real HTTP: pixel, click redirect, RFC 8058 one-click unsubscribe, forged tokens, a flood."""

from __future__ import annotations

import asyncio
import re
import uuid

import aiohttp
import psycopg
from aiohttp.test_utils import TestServer
from psycopg import sql

from tests.tracking import email_row, enqueue_one, running_tracker, scalar
from worker.core.config import Settings
from worker.tracking.server import PIXEL, POOL

FLOOD = 1_000
CLICK = re.compile(r'href="http://localhost:8025(/c/[0-9a-f-]{36})"')


def _unsubscribed(db_url: str) -> list[tuple[str, str]]:
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT email, source FROM mailroom.unsubscribe_list ORDER BY email").fetchall()
    return [(str(e), str(s)) for e, s in rows]


async def test_pixel_records_an_open_and_is_never_cached(db_url: str, settings: Settings) -> None:
    email_id = enqueue_one(db_url, settings)
    token = email_row(db_url, email_id)["tracking_token"]
    path = f"/o/{token}.gif"
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        resp = await http.get(server.make_url(path), headers={"User-Agent": "Reader/1.0"})
        body = await resp.read()
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "image/gif"
        assert "no-store" in resp.headers["Cache-Control"] and "no-cache" in resp.headers["Cache-Control"]
        assert resp.headers["Pragma"] == "no-cache"
        # A HEAD (what some prefetchers send) gets the same answer and counts for nothing.
        head = await http.head(server.make_url(path))
        assert head.status == 200
    assert body == PIXEL
    with psycopg.connect(db_url) as conn:
        events = conn.execute(
            "SELECT email_id, campaign_id, host(ip_address), user_agent FROM mailroom.open_events"
        ).fetchall()
    assert events == [(email_id, "spring", "127.0.0.1", "Reader/1.0")]


async def test_unknown_or_malformed_pixel_token_gets_the_gif_and_records_nothing(
    db_url: str, settings: Settings
) -> None:
    untracked = email_row(db_url, enqueue_one(db_url, settings, track=False))
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        for path in (
            f"/o/{uuid.uuid4()}.gif",
            "/o/not-a-token.gif",
            f"/o/{untracked['unsubscribe_token']}.gif",
        ):
            async with http.get(server.make_url(path)) as resp:
                assert resp.status == 200
                assert await resp.read() == PIXEL
    assert scalar(db_url, "SELECT count(*) FROM mailroom.open_events") == 0


async def test_click_redirects_to_the_stored_destination_and_records_the_click(
    db_url: str, settings: Settings
) -> None:
    email_id = enqueue_one(db_url, settings)
    paths = CLICK.findall(email_row(db_url, email_id)["html_body"])
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        locations = []
        for path in paths:
            async with http.get(server.make_url(path), allow_redirects=False) as resp:
                assert resp.status == 302
                locations.append(resp.headers["Location"])
    assert locations == ["https://shop.example.com/sale?a=1&b=2", "http://example.org/blog"]
    with psycopg.connect(db_url) as conn:
        clicks = conn.execute(
            "SELECT email_id, url, campaign_id FROM mailroom.click_events ORDER BY id"
        ).fetchall()
    assert clicks == [(email_id, u, "spring") for u in locations]


async def test_click_destination_never_comes_from_the_request(db_url: str, settings: Settings) -> None:
    email_id = enqueue_one(db_url, settings)
    path = CLICK.findall(email_row(db_url, email_id)["html_body"])[0]
    attempts = [
        f"{path}?url=javascript:alert(document.cookie)",
        f"{path}?url=https://evil.example.net/&next=//evil.example.net",
        f"{path}/../../c/x?url=https://evil.example.net",
        f"/c/{uuid.uuid4()}?url=https://evil.example.net",
        "/c/javascript:alert(1)",
        "/c/https%3A%2F%2Fevil.example.net",
    ]
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        results = []
        for attempt in attempts:
            async with http.get(server.make_url(attempt), allow_redirects=False) as resp:
                results.append((resp.status, resp.headers.get("Location")))
    assert results[:2] == [(302, "https://shop.example.com/sale?a=1&b=2")] * 2
    assert all(status == 404 and location is None for status, location in results[2:])
    assert scalar(db_url, "SELECT count(*) FROM mailroom.click_events") == 2


async def test_one_click_post_form_encoded_unsubscribes_at_once(db_url: str, settings: Settings) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings))
    async with (
        running_tracker(db_url, settings) as server,
        aiohttp.ClientSession() as http,
        http.post(
            server.make_url(f"/u/{row['unsubscribe_token']}"),
            data={"List-Unsubscribe": "One-Click"},
            allow_redirects=False,
        ) as resp,
    ):
        assert resp.status == 200
        assert "Location" not in resp.headers
        assert resp.request_info.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert _unsubscribed(db_url) == [("reader@example.com", "one_click")]
    assert scalar(db_url, "SELECT campaign_id FROM mailroom.unsubscribe_list") == "spring"


async def test_an_unsubscribe_commits_durably_though_the_trackers_events_commit_asynchronously(
    db_url: str, settings: Settings
) -> None:
    # A trigger notes the commit level of the transaction that lists the address: the tracker's pool
    # runs with synchronous_commit off (opens and clicks), which a crash right after the "unsubscribed"
    # page, or a failover to a standby without the row, would turn into more email to that person.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.commit_levels (level text);"
            " CREATE FUNCTION public.note_commit_level() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN INSERT INTO public.commit_levels VALUES (current_setting('synchronous_commit')); RETURN NULL; END $$;"
            " CREATE TRIGGER note_commit_level AFTER INSERT ON mailroom.unsubscribe_list"
            " FOR EACH ROW EXECUTE FUNCTION public.note_commit_level()"
        )
    row = email_row(db_url, enqueue_one(db_url, settings))
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        async with http.post(
            server.make_url(f"/u/{row['unsubscribe_token']}"), data={"List-Unsubscribe": "One-Click"}
        ) as resp:
            assert resp.status == 200
        async with server.app[POOL].connection() as conn:
            level = await (await conn.execute("SHOW synchronous_commit")).fetchone()
    assert level == ("off",)  # the pool's own level: events stay cheap
    assert scalar(db_url, "SELECT string_agg(level, ',') FROM public.commit_levels") == "on"


async def test_one_click_post_multipart_unsubscribes_at_once(db_url: str, settings: Settings) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings))
    form = aiohttp.FormData()
    form.add_field("List-Unsubscribe", "One-Click")
    form.add_field("attachment", b"ignored", filename="x.bin")  # forces multipart/form-data
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        async with http.post(
            server.make_url(f"/u/{row['unsubscribe_token']}"), data=form, allow_redirects=False
        ) as resp:
            assert resp.status == 200
            assert resp.request_info.headers["Content-Type"].startswith("multipart/form-data")
        # A second POST (providers retry) is still a success and changes nothing more.
        async with http.post(
            server.make_url(f"/u/{row['unsubscribe_token']}"), data={"List-Unsubscribe": "One-Click"}
        ) as resp:
            assert resp.status == 200
    assert _unsubscribed(db_url) == [("reader@example.com", "one_click")]


async def test_get_shows_a_confirmation_page_and_never_unsubscribes(db_url: str, settings: Settings) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings))
    path = f"/u/{row['unsubscribe_token']}"
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        for _ in range(3):  # link scanners and prefetchers follow links, sometimes repeatedly
            async with http.get(server.make_url(path), allow_redirects=False) as resp:
                page = await resp.text()
                assert resp.status == 200
                # The confirm button cannot be framed by another site and clicked unawares.
                assert resp.headers["X-Frame-Options"] == "DENY"
                assert "frame-ancestors 'none'" in resp.headers["Content-Security-Policy"]
        assert _unsubscribed(db_url) == []
        assert 'method="post"' in page and f'action="{path}"' in page
        assert 'name="List-Unsubscribe" value="One-Click"' in page
        assert "Rea***@example.com" in page and "eader@" not in page  # the address is masked
        # The page's button is a POST that unsubscribes, recorded as a page confirmation.
        async with http.post(
            server.make_url(path), data={"List-Unsubscribe": "One-Click", "confirm": "page"}
        ) as resp:
            assert resp.status == 200
        async with http.get(server.make_url(path)) as resp:
            assert "is unsubscribed" in await resp.text()
    assert _unsubscribed(db_url) == [("reader@example.com", "link")]


async def test_forged_altered_and_borrowed_tokens_change_nothing(db_url: str, settings: Settings) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings))
    transactional = email_row(db_url, enqueue_one(db_url, settings, campaign_id=None, track=True))
    real = str(row["unsubscribe_token"])
    altered = real[:-1] + ("0" if real[-1] != "0" else "1")
    tokens = [
        altered,
        str(uuid.uuid4()),
        "00000000-0000-0000-0000-000000000000",
        "not-a-token",
        real + "0",
        str(row["tracking_token"]),  # the pixel's token must never unsubscribe
        str(transactional["tracking_token"]),
    ]
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        for token in tokens:
            async with http.post(
                server.make_url(f"/u/{token}"), data={"List-Unsubscribe": "One-Click"}
            ) as resp:
                assert resp.status == 404, token
            async with http.get(server.make_url(f"/u/{token}")) as resp:
                assert resp.status == 404, token
        # The right token without the RFC 8058 body is refused too.
        for data in ({}, {"List-Unsubscribe": "Yes"}, "List-Unsubscribe=One-Click-Not"):
            async with http.post(server.make_url(f"/u/{real}"), data=data) as resp:
                assert resp.status == 400
    assert _unsubscribed(db_url) == []


async def test_a_token_with_a_trailing_newline_is_no_token(db_url: str, settings: Settings) -> None:
    # `/u/TOKEN%0A` reaches the handler as 'TOKEN\n', which a pattern ending in `$` took for TOKEN.
    row = email_row(db_url, enqueue_one(db_url, settings))
    click = CLICK.findall(row["html_body"])[0]
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        for tail in ("%0A", "%0a"):
            unsubscribe = server.make_url(f"/u/{row['unsubscribe_token']}{tail}")
            async with http.post(unsubscribe, data={"List-Unsubscribe": "One-Click"}) as resp:
                assert resp.status == 404
            async with http.get(unsubscribe) as resp:
                assert resp.status == 404
            async with http.get(server.make_url(f"{click}{tail}"), allow_redirects=False) as resp:
                assert resp.status == 404 and "Location" not in resp.headers
    assert _unsubscribed(db_url) == []
    assert scalar(db_url, "SELECT count(*) FROM mailroom.click_events") == 0


async def _flood(server: TestServer, paths: list[str], concurrency: int = 64) -> list[int]:
    statuses: list[int] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        queue = iter(paths)

        async def worker() -> None:
            for path in queue:
                async with http.get(server.make_url(path), allow_redirects=False) as resp:
                    await resp.read()
                    statuses.append(resp.status)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return statuses


async def test_a_flood_of_concurrent_requests_is_answered_without_error(
    db_url: str, settings: Settings
) -> None:
    # 1,000 requests from 64 clients at once keep every connection of the pool busy; the rate of a
    # larger flood is measured by bench/tracker.py, not here.
    row = email_row(db_url, enqueue_one(db_url, settings))
    click = CLICK.findall(row["html_body"])[0]
    kinds = [
        f"/o/{row['tracking_token']}.gif",
        f"/o/{uuid.uuid4()}.gif",
        click,
        f"/u/{row['unsubscribe_token']}",
        f"/c/{uuid.uuid4()}?url=javascript:alert(1)",
    ]
    paths = [kinds[i % len(kinds)] for i in range(FLOOD)]
    async with running_tracker(db_url, settings) as server:
        statuses = await _flood(server, paths)
    expected = {0: 200, 1: 200, 2: 302, 3: 200, 4: 404}
    assert len(statuses) == FLOOD
    assert sorted(statuses) == sorted(expected[i % len(kinds)] for i in range(FLOOD))
    assert scalar(db_url, "SELECT count(*) FROM mailroom.open_events") == FLOOD // 5
    assert scalar(db_url, "SELECT count(*) FROM mailroom.click_events") == FLOOD // 5
    assert _unsubscribed(db_url) == []


async def _raw_request(server: TestServer, request: bytes) -> bytes:
    """Send bytes no HTTP client library would (a header that is not UTF-8); return the status line."""
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.readline()
    finally:
        writer.close()


async def test_a_user_agent_that_is_not_utf8_is_kept_and_stops_nothing(
    db_url: str, settings: Settings
) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings))
    agent = b"Mozilla/5.0 (caf\xe9; \xff\xfe)"  # Latin-1 and stray bytes, as old clients send
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        pixel = f"/o/{row['tracking_token']}.gif".encode()
        status = await _raw_request(
            server, b"GET " + pixel + b" HTTP/1.1\r\nHost: t\r\nUser-Agent: " + agent + b"\r\n\r\n"
        )
        assert status.startswith(b"HTTP/1.1 200")
        # The event writer is still alive: a later open is recorded too.
        async with http.get(server.make_url(pixel.decode()), headers={"User-Agent": "Reader/2"}) as resp:
            assert resp.status == 200
        body = b"List-Unsubscribe=One-Click"
        status = await _raw_request(
            server,
            f"POST /u/{row['unsubscribe_token']} HTTP/1.1\r\nHost: t\r\n".encode()
            + b"Content-Type: application/x-www-form-urlencoded\r\nUser-Agent: "
            + agent
            + f"\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body,
        )
        assert status.startswith(b"HTTP/1.1 200")
    with psycopg.connect(db_url) as conn:
        agents = [r[0] for r in conn.execute("SELECT user_agent FROM mailroom.open_events ORDER BY id")]
        listed = conn.execute("SELECT email, user_agent FROM mailroom.unsubscribe_list").fetchall()
    assert agents == ["Mozilla/5.0 (caf\ufffd; \ufffd\ufffd)", "Reader/2"]
    assert listed == [("reader@example.com", "Mozilla/5.0 (caf\ufffd; \ufffd\ufffd)")]


def _set_database_reachable(db_url: str, reachable: bool) -> None:
    """Refuse (and cut) or allow again connections to this test's own database: PostgreSQL 'down' for the tracker."""
    name = str(psycopg.conninfo.conninfo_to_dict(db_url)["dbname"])
    admin = psycopg.conninfo.make_conninfo(db_url, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} WITH ALLOW_CONNECTIONS {}").format(
                sql.Identifier(name), sql.SQL("true" if reachable else "false")
            )
        )
        if not reachable:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,))


async def test_database_down_is_a_quick_503_and_the_tracker_recovers(db_url: str, settings: Settings) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings))
    click = CLICK.findall(row["html_body"])[0]
    unsubscribe = f"/u/{row['unsubscribe_token']}"
    one_click = {"List-Unsubscribe": "One-Click"}
    _set_database_reachable(db_url, False)
    try:
        # The tracker starts without its database; what needs it is a 503 within the pool timeout.
        async with (
            running_tracker(db_url, settings, pool_timeout=0.5) as server,
            aiohttp.ClientSession() as http,
        ):
            async with http.get(server.make_url(f"/o/{row['tracking_token']}.gif")) as resp:
                assert resp.status == 200 and await resp.read() == PIXEL  # the open waits in memory

            async def status(method: str, path: str) -> tuple[int, str | None]:
                async with http.request(
                    method, server.make_url(path), data=one_click, allow_redirects=False
                ) as resp:
                    return resp.status, resp.headers.get("Retry-After")

            answers = await asyncio.gather(
                status("GET", click),
                status("GET", unsubscribe),
                status("POST", unsubscribe),
                status("GET", "/healthz"),
            )
            assert answers == [(503, "30")] * 4
            _set_database_reachable(db_url, True)
            # The pool reconnects on its own (with back-off): wait for health, bounded.
            for _ in range(40):
                if (await status("GET", "/healthz"))[0] == 200:
                    break
            assert await status("GET", click) == (302, None)
            assert await status("POST", unsubscribe) == (200, None)
    finally:
        _set_database_reachable(db_url, True)
    # The open taken while PostgreSQL was away is written (at the latest when the tracker stops).
    assert scalar(db_url, "SELECT count(*) FROM mailroom.open_events") == 1
    assert scalar(db_url, "SELECT count(*) FROM mailroom.click_events") == 1
    assert _unsubscribed(db_url) == [("reader@example.com", "one_click")]


async def test_a_stored_destination_no_redirect_can_carry_is_a_404(db_url: str, settings: Settings) -> None:
    email_id = enqueue_one(db_url, settings)
    token = uuid.uuid4()
    with psycopg.connect(db_url) as conn:  # written around the API: the database only checks the scheme
        conn.execute(
            "INSERT INTO mailroom.tracked_links (token, email_id, position, url) VALUES (%s, %s, 99, %s)",
            (token, email_id, "https://evil.example\\@good.example/"),
        )
    async with (
        running_tracker(db_url, settings) as server,
        aiohttp.ClientSession() as http,
        http.get(server.make_url(f"/c/{token}"), allow_redirects=False) as resp,
    ):
        assert (resp.status, resp.headers.get("Location")) == (404, None)


async def test_one_click_body_under_another_content_type_is_honoured_and_a_huge_one_is_413(
    db_url: str, settings: Settings
) -> None:
    row = email_row(db_url, enqueue_one(db_url, settings))
    path = f"/u/{row['unsubscribe_token']}"
    async with running_tracker(db_url, settings) as server, aiohttp.ClientSession() as http:
        huge = b"List-Unsubscribe=One-Click&pad=" + b"x" * 1_000_000
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        async with http.post(server.make_url(path), data=huge, headers=form) as resp:
            assert resp.status == 413
        assert _unsubscribed(db_url) == []
        for content_type in ("text/plain", "application/octet-stream"):
            async with http.post(
                server.make_url(path),
                data=b"List-Unsubscribe=One-Click\r\n",
                headers={"Content-Type": content_type},
            ) as resp:
                assert resp.status == 200, content_type
                assert "Location" not in resp.headers
        async with http.post(
            server.make_url(path), data=b"unsubscribe me", headers={"Content-Type": "text/plain"}
        ) as resp:
            assert resp.status == 400
    assert _unsubscribed(db_url) == [("reader@example.com", "one_click")]
