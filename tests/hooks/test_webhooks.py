"""Events back to the application, through the real doors: a worker sending over SMTP to the sink,
a receiver on a real socket, signatures checked by the Standard Webhooks reference library."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import mailroom
from tests.fixtures_db import drop_roles, role_url
from tests.hooks.receiver import Post, Receiver, verified
from tests.worker.helpers import add_sender, enqueue_many, statuses
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.devtools.sink import RunningSink
from worker.engine.delivery import Worker, WorkerOptions
from worker.hooks import endpoints
from worker.hooks.addresses import GuardedResolver, UnsafeAddress
from worker.hooks.events import EVENT_TYPES
from worker.hooks.producer import producer
from worker.ops import roles, webhook_endpoints


@pytest.fixture
def fast(settings: Settings) -> Settings:
    """Retries in a fraction of a second, so an outage plays out in a test."""
    return replace(
        settings, webhook_retry_base_seconds=0.05, webhook_retry_cap_seconds=0.2, webhook_timeout_seconds=30.0
    )


@pytest.fixture
async def receivers() -> AsyncIterator[list[Receiver]]:
    made: list[Receiver] = []
    yield made
    for receiver in made:
        await receiver.stop()


async def receiver(made: list[Receiver], **how: Any) -> Receiver:
    made.append(Receiver(**how))
    return await made[-1].start()


def add_endpoint(
    db_url: str,
    settings: Settings,
    url: str,
    events: list[str] | None = None,
    *,
    role: str | None = None,
    allow_private: bool = True,
) -> endpoints.Added:
    """An endpoint as `mailroom webhooks add` stores it (a loopback receiver needs --allow-private)."""
    assert settings.secret_key is not None
    with psycopg.connect(db_url) as conn:
        return endpoints.add(
            conn, SecretBox(settings.secret_key), url, events or list(EVENT_TYPES), role=role,
            allow_private=allow_private, actor="tester",
        )  # fmt: skip


@asynccontextmanager
async def worker(db_url: str, settings: Settings, *, interval: float = 2.0) -> AsyncIterator[Worker]:
    """A worker delivering email and webhooks until the block ends."""
    hooks = producer(interval)
    running = Worker(db_url, settings, WorkerOptions(concurrency=1, poll_seconds=0.2), producers=[hooks])
    task = asyncio.create_task(running.run())
    try:
        yield running
    finally:
        running.stop()
        await task


def _current_user(db_url: str) -> str:
    with psycopg.connect(db_url) as conn:
        row = conn.execute("SELECT session_user").fetchone()
    assert row is not None
    return str(row[0])


def _rows(db_url: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(query, params).fetchall()


async def test_outcomes_arrive_signed_and_the_reference_library_verifies_them(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver]
) -> None:
    mine = await receiver(receivers)
    operators = await receiver(receivers)
    own = add_endpoint(db_url, fast, mine.url, role=_current_user(db_url))
    everyone = add_endpoint(db_url, fast, operators.url, ["email.sent", "email.cancelled"])
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 3)
    with psycopg.connect(db_url) as conn:
        cancelled = mailroom.enqueue(
            conn, mailroom.EmailRequest(to="later@example.com", subject="s", text="b", idempotency_key="k-1",
                                        scheduled_for=datetime.now(UTC) + timedelta(days=1)),
        )  # fmt: skip
        assert mailroom.cancel(conn, cancelled)
    async with worker(db_url, fast):
        got = await mine.until(lambda posts: len(posts) >= 4)
        theirs = await operators.until(lambda posts: len(posts) >= 4)
    events = [verified(own.secret, post) for post in got]
    assert sorted(e["type"] for e in events) == ["email.cancelled", *["email.sent"] * 3]
    sent = {e["data"]["email_id"]: e["data"] for e in events if e["type"] == "email.sent"}
    assert sorted(sent) == sorted(ids)
    assert {d["recipient"] for d in sent.values()} == {f"u{i}@example.com" for i in range(3)}
    cancel = next(e["data"] for e in events if e["type"] == "email.cancelled")
    assert cancel["email_id"] == cancelled and cancel["idempotency_key"] == "k-1"
    # An operator's endpoint is told what happened, never to whom.
    told = [verified(everyone.secret, post) for post in theirs]
    assert sorted(e["data"]["email_id"] for e in told) == sorted([*ids, cancelled])
    assert not any("recipient" in e["data"] or "idempotency_key" in e["data"] for e in told)
    with pytest.raises(Exception, match="signature"):
        verified(own.secret, theirs[0])  # one endpoint's secret verifies nothing of another's
    assert statuses(db_url) == {"sent": 3, "cancelled": 1}


async def test_a_receiver_down_for_a_while_then_back_gets_every_event_once_by_id(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver]
) -> None:
    outage = {"left": 12}

    def answer(post: Post) -> int:
        outage["left"] -= 1
        return 503 if outage["left"] >= 0 else 200

    flaky = await receiver(receivers, answer=answer)
    added = add_endpoint(db_url, fast, flaky.url, ["email.sent"])
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 10)
    async with worker(db_url, fast):
        await flaky.until(lambda posts: len({p.id for p in posts if p.status == 200}) >= 10)
        await _until_rows(db_url, DELIVERED, 10)
    delivered = flaky.delivered()
    assert sorted(verified(added.secret, p)["data"]["email_id"] for p in delivered.values()) == sorted(ids)
    # Retries carry the same id; nothing else came twice as new.
    assert {p.id for p in flaky.posts} == set(delivered)
    assert sum(1 for p in flaky.posts if p.status == 200) == 10
    rows = _rows(db_url, "SELECT status, count(*) FROM mailroom.webhook_deliveries GROUP BY status")
    assert rows == [("delivered", 10)]
    (endpoint,) = _rows(
        db_url, "SELECT failures, failing_since, last_success_at FROM mailroom.webhook_endpoints"
    )
    assert endpoint[0] == 0 and endpoint[1] is None and endpoint[2] is not None


def test_a_change_that_rolled_back_writes_no_event_and_no_endpoint_means_no_event(
    db_url: str, settings: Settings
) -> None:
    (first,) = enqueue_many(db_url, 1)
    with psycopg.connect(db_url) as conn:
        mailroom.cancel(conn, first)  # no endpoint yet: nothing is written
    assert _rows(db_url, "SELECT count(*) FROM mailroom.webhook_events") == [(0,)]
    add_endpoint(db_url, settings, "https://hooks.example.com/mail")
    (second,) = enqueue_many(db_url, 1, start=1)
    with psycopg.connect(db_url) as conn:
        assert mailroom.cancel(conn, second)
        assert _rows(db_url, "SELECT count(*) FROM mailroom.webhook_events") == [(0,)]  # not committed yet
        conn.rollback()
    assert _rows(db_url, "SELECT count(*) FROM mailroom.webhook_events") == [(0,)]
    assert statuses(db_url) == {"cancelled": 1, "pending": 1}
    with psycopg.connect(db_url) as conn:
        mailroom.cancel(conn, second)
    assert _rows(db_url, "SELECT type, email_id FROM mailroom.webhook_events") == [
        ("email.cancelled", second)
    ]
    assert _rows(db_url, "SELECT count(*) FROM mailroom.webhook_deliveries") == [(1,)]


@pytest.fixture
def tenants(db_url: str, role_lock: None) -> Iterator[tuple[str, str]]:
    names = ("mr_hook_shop", "mr_hook_blog")
    with psycopg.connect(db_url) as conn:
        for name in names:
            roles.grant(conn, "app", name, create=True, actor="tester")
    try:
        yield names
    finally:
        drop_roles(db_url, *names)


async def test_one_roles_endpoint_never_receives_another_roles_events(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver], tenants: tuple[str, str]
) -> None:
    shop, blog = tenants
    shop_hooks, blog_hooks = await receiver(receivers), await receiver(receivers)
    shop_secret = add_endpoint(db_url, fast, shop_hooks.url, ["email.sent"], role=shop).secret
    add_endpoint(db_url, fast, blog_hooks.url, ["email.sent"], role=blog)
    add_sender(db_url, smtp_sink.port)
    enqueued: dict[str, list[int]] = {}
    for role, count in ((shop, 3), (blog, 2)):
        with psycopg.connect(role_url(db_url, role)) as conn:
            made = mailroom.enqueue_many(
                conn,
                [
                    mailroom.EmailRequest(to=f"{role}{i}@example.com", subject="s", text="b")
                    for i in range(count)
                ],
            )
            enqueued[role] = [int(m) for m in made]
    async with worker(db_url, fast):
        await shop_hooks.until(lambda posts: len(posts) >= 3)
        await blog_hooks.until(lambda posts: len(posts) >= 2)
        await asyncio.sleep(0)  # nothing more is due: both endpoints' deliveries are all recorded below
    shop_events = [verified(shop_secret, p)["data"] for p in shop_hooks.posts]
    assert sorted(e["email_id"] for e in shop_events) == sorted(enqueued[shop])
    assert all(e["recipient"].startswith(shop) for e in shop_events)
    assert sorted(p.event["data"]["email_id"] for p in blog_hooks.posts) == sorted(enqueued[blog])
    deliveries = _rows(
        db_url,
        "SELECT p.owner_role, q.enqueued_by FROM mailroom.webhook_deliveries d"
        " JOIN mailroom.webhook_endpoints p ON p.id = d.endpoint_id JOIN mailroom.email_queue q ON q.id = d.email_id",
    )
    assert len(deliveries) == 5 and all(owner == by for owner, by in deliveries)


async def test_a_receiver_that_hangs_delays_neither_email_nor_the_other_endpoints(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver]
) -> None:
    stuck = await receiver(receivers, hang=True)
    healthy = await receiver(receivers)
    add_endpoint(db_url, fast, stuck.url, ["email.sent"])
    add_endpoint(db_url, fast, healthy.url, ["email.sent"])
    add_sender(db_url, smtp_sink.port)
    ids = enqueue_many(db_url, 20)
    few = replace(fast, webhook_in_flight=4)  # fewer slots than events: the cap is seen to hold
    async with worker(db_url, few):  # the hanging POSTs' timeout (30 s) never passes in this test
        await stuck.until(lambda posts: len(posts) >= few.webhook_in_flight)
        got = await healthy.until(lambda posts: len(posts) >= 20)  # rounds after rounds meanwhile
        assert statuses(db_url) == {"sent": 20}
        assert sorted(p.event["data"]["email_id"] for p in got) == sorted(ids)
        assert len(stuck.posts) == few.webhook_in_flight  # its own slots, and no more, are taken
        pending = _rows(
            db_url,
            "SELECT count(*) FROM mailroom.webhook_deliveries d JOIN mailroom.webhook_endpoints p"
            " ON p.id = d.endpoint_id WHERE p.url = %s AND d.status = 'pending'",
            stuck.url,
        )
        assert pending == [(20,)]


async def test_a_410_disables_the_endpoint_and_a_redirect_is_not_followed(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver]
) -> None:
    elsewhere = await receiver(receivers)
    gone = await receiver(receivers, answer=lambda post: 410)
    moved = await receiver(receivers, answer=lambda post: 307, location=elsewhere.url)
    add_endpoint(db_url, fast, gone.url, ["email.sent"])
    add_endpoint(db_url, fast, moved.url, ["email.sent"])
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 1)
    async with worker(db_url, fast):
        await gone.until(lambda posts: len(posts) >= 1)
        await moved.until(lambda posts: len(posts) >= 2)  # tried again: a redirect is a failed attempt
    assert elsewhere.posts == []
    states = dict(_rows(db_url, "SELECT url, status FROM mailroom.webhook_endpoints"))
    assert states == {gone.url: "disabled", moved.url: "active"}
    errors = _rows(
        db_url, "SELECT last_code, last_error FROM mailroom.webhook_deliveries ORDER BY endpoint_id"
    )
    assert errors[0][0] == 410
    assert errors[1][0] == 307 and "redirects are not followed" in errors[1][1]


async def test_private_addresses_are_refused_when_added_and_when_resolved(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver]
) -> None:
    for url in ("http://127.0.0.1:9/x", "http://169.254.169.254/latest/meta-data", "http://[::1]/x",
                "http://10.0.0.8/x", "http://[::ffff:127.0.0.1]/x"):  # fmt: skip
        with pytest.raises(endpoints.EndpointError, match="allow-private"):
            add_endpoint(db_url, fast, url, allow_private=False)
    for url in ("ftp://example.com/x", "https://user:pw@example.com/x", "https://example.com/x y",
                # what aiohttp's URL parser reads as 127.0.0.1 and 169.254.169.254 (found by a review)
                "http://127\u30020\u30020\u30021/x", "http://\uff11\uff12\uff17.0.0.1/x",
                "http://169\u3002254\u3002169\u3002254/latest/meta-data"):  # fmt: skip
        with pytest.raises(endpoints.EndpointError):
            add_endpoint(db_url, fast, url, allow_private=False)
        with psycopg.connect(db_url) as conn, pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(  # nor written around the command line
                "INSERT INTO mailroom.webhook_endpoints (url, events, secret_encrypted) VALUES (%s, '{email.sent}', 'x')",
                (url,),
            )
    with pytest.raises(UnsafeAddress, match="loopback"):
        await GuardedResolver().resolve("localhost", 80)
    # A name that resolves to loopback passes the check at add time, and is refused at each POST.
    target = await receiver(receivers)
    port = target.url.split(":")[2].split("/")[0]
    add_endpoint(db_url, fast, f"http://localhost:{port}/hooks", ["email.sent"], allow_private=False)
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 1)
    async with worker(db_url, fast):
        await _until_rows(db_url, "SELECT 1 FROM mailroom.webhook_deliveries WHERE attempts >= 2")
    assert target.posts == []
    (error,) = _rows(db_url, "SELECT last_error FROM mailroom.webhook_deliveries")
    assert "loopback" in error[0]


DELIVERED = "SELECT 1 FROM mailroom.webhook_deliveries WHERE status = 'delivered' HAVING count(*) >= %s"


async def _until_rows(db_url: str, query: str, *params: Any, seconds: float = 60.0) -> None:
    """Wait until `query` returns a row (the worker runs meanwhile; each look is one query)."""
    async with asyncio.timeout(seconds):
        # What is awaited is a row another connection commits: nothing in this process to wait on.
        while not _rows(db_url, query, *params):  # noqa: ASYNC110
            await asyncio.sleep(0.05)


async def test_an_emails_events_arrive_in_order_even_when_the_first_is_retried(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver]
) -> None:
    first_time = {"sent": True}

    def answer(post: Post) -> int:
        if post.event["type"] == "email.failed" and first_time["sent"]:
            first_time["sent"] = False
            return 500
        return 200

    ordered = await receiver(receivers, answer=answer)
    add_endpoint(db_url, fast, ordered.url, ["email.failed", "email.cancelled"])
    (email,) = enqueue_many(db_url, 1)
    with psycopg.connect(db_url) as conn:  # failed, then cancelled, in two transactions, before any POST
        conn.execute(
            "UPDATE mailroom.email_queue SET status = 'failed', last_error = '550 no such mailbox' WHERE id = %s",
            (email,),
        )
        conn.commit()
        conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = %s", (email,))
    async with worker(db_url, fast):
        await ordered.until(lambda posts: sum(p.status == 200 for p in posts) >= 2)
    assert [(p.event["type"], p.status) for p in ordered.posts] == [
        ("email.failed", 500), ("email.failed", 200), ("email.cancelled", 200)
    ]  # fmt: skip


async def test_replay_sends_the_same_ids_again(
    db_url: str, fast: Settings, smtp_sink: RunningSink, receivers: list[Receiver]
) -> None:
    hooks = await receiver(receivers)
    add_endpoint(db_url, fast, hooks.url, ["email.sent"])
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 3)
    async with worker(db_url, fast):
        first = await hooks.until(lambda posts: len(posts) >= 3)
        await _until_rows(db_url, DELIVERED, 3)
        with psycopg.connect(db_url) as conn:
            ids = webhook_endpoints.known_ids(conn, None)
            again = webhook_endpoints.replay(
                conn, ids, datetime.now(UTC) - timedelta(hours=1), actor="tester"
            )
        assert again == 3
        both = await hooks.until(lambda posts: len(posts) >= 6)
    assert sorted(p.id for p in both[3:]) == sorted(p.id for p in first)


def test_keys_rotate_re_encrypts_the_signing_secrets(db_url: str, settings: Settings) -> None:
    from worker.core.crypto import generate_key
    from worker.ops.keys import rotate_secrets

    added = add_endpoint(db_url, settings, "https://hooks.example.com/mail")
    assert settings.secret_key is not None
    new_key = generate_key()
    with psycopg.connect(db_url) as conn:
        rotation = rotate_secrets(conn, SecretBox(settings.secret_key), SecretBox(new_key), new_key)
    assert rotation.webhook_secrets == 1
    (stored,) = _rows(db_url, "SELECT secret_encrypted FROM mailroom.webhook_endpoints")
    assert SecretBox(new_key).decrypt(bytes(stored[0])) == added.secret
    assert added.secret.encode() not in bytes(stored[0])


def test_the_event_types_are_the_ones_the_database_accepts(db_url: str, settings: Settings) -> None:
    add_endpoint(db_url, settings, "https://hooks.example.com/a", list(EVENT_TYPES))
    with pytest.raises(psycopg.errors.CheckViolation):
        add_endpoint(db_url, settings, "https://hooks.example.com/b", ["email.delivered"])


async def test_a_backlog_goes_out_round_after_round_without_waiting_for_the_timer(
    db_url: str, fast: Settings, receivers: list[Receiver]
) -> None:
    """Found by bench.webhooks: a round whose POSTs ended while it claimed reported no work, and the
    dispatcher slept its interval with results unrecorded: four events every two seconds."""
    hooks = await receiver(receivers)
    add_endpoint(db_url, fast, hooks.url, ["email.cancelled"])
    ids = enqueue_many(db_url, 60)
    with psycopg.connect(db_url) as conn:  # 60 events, all due before the worker starts
        conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = ANY(%s)", (ids,))
    async with worker(db_url, fast, interval=3600):  # its timer never fires in this test
        got = await hooks.until(lambda posts: len(posts) >= 60)
        await _until_rows(db_url, DELIVERED, 60)
    assert sorted(p.event["data"]["email_id"] for p in got) == sorted(ids)


def test_privacy_reaches_webhook_events_and_maintenance_gives_up_then_deletes_old_ones(
    db_url: str, settings: Settings
) -> None:
    from worker.ops.privacy import erase_address, export_address
    from worker.ops.retention import run_maintenance

    add_endpoint(db_url, settings, "https://hooks.example.com/mail", role=_current_user(db_url))
    ids = enqueue_many(db_url, 3)
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE mailroom.email_queue SET status = 'cancelled' WHERE id = ANY(%s)", (ids[:2],))
        conn.execute(
            "UPDATE mailroom.webhook_events SET data = data || jsonb_build_object('url', 'https://x.example/?u=' ||"
            " recipient)"
        )
    with psycopg.connect(db_url) as conn:
        exported = export_address(conn, "u0@example.com", actor="tester")
        assert [e["email_id"] for e in exported["webhook_events"]] == [ids[0]]
        erase_address(conn, "u2@example.com", actor="tester")  # unsent: cancelled, its event erased at once
        erase_address(conn, "u0@example.com", actor="tester")
    rows = _rows(
        db_url, "SELECT email_id, recipient, data::text FROM mailroom.webhook_events ORDER BY email_id"
    )
    assert [r[0] for r in rows] == [ids[0], ids[1], ids[2]]
    assert rows[1][1] == "u1@example.com" and "u1@example.com" in rows[1][2]  # another person's: kept
    for _, recipient, data in (rows[0], rows[2]):
        assert "u0@example.com" not in recipient + data and "u2@example.com" not in recipient + data
    # Past the retention: events go with their deliveries, one still pending given up first (an endpoint
    # paused for a month must not grow the tables without end); a recent pending event stays.
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE mailroom.webhook_events SET occurred_at = now() - interval '31 days'")
        conn.execute(
            "UPDATE mailroom.webhook_deliveries SET status = 'delivered', finished_at = now() WHERE email_id <> %s",
            (ids[1],),
        )
    (recent,) = enqueue_many(db_url, 1, start=3)
    with psycopg.connect(db_url) as conn:
        mailroom.cancel(conn, recent)
    with psycopg.connect(db_url, autocommit=True) as conn:
        report = run_maintenance(conn, settings)
    (step,) = [s for s in report.steps if s.name == "purge_webhook_events"]
    assert step.rows == 3 and "still pending past the retention: 1" in step.details[-1]
    assert _rows(db_url, "SELECT email_id FROM mailroom.webhook_events") == [(recent,)]
    assert _rows(db_url, "SELECT email_id, status FROM mailroom.webhook_deliveries") == [(recent, "pending")]


async def test_a_result_held_back_past_its_lease_never_overwrites_a_later_attempt(
    db_url: str, settings: Settings
) -> None:
    """Found by a review: a failure recorded late (the database was away) turned another worker's
    delivered row back to pending, and the event went again after the email's later events."""
    from worker.hooks.dispatch import Dispatcher, Result

    add_endpoint(db_url, settings, "https://hooks.example.com/mail")
    (email,) = enqueue_many(db_url, 1)
    with psycopg.connect(db_url) as conn:
        mailroom.cancel(conn, email)
        # This process's attempt 1 outlived its lease; another worker's attempt 2 was delivered.
        conn.execute(
            "UPDATE mailroom.webhook_deliveries SET attempts = 2, status = 'delivered', finished_at = now(),"
            " first_attempt_at = now(), last_code = 204"
        )
        (endpoint, event) = conn.execute(
            "SELECT endpoint_id, event_id FROM mailroom.webhook_deliveries"
        ).fetchone()
    dispatcher = Dispatcher()
    dispatcher.finished = [Result(endpoint, event, 1, 503, "HTTP 503")]
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        assert await dispatcher.record(conn, settings) == 1
    assert _rows(db_url, "SELECT status, attempts, last_code FROM mailroom.webhook_deliveries") == [
        ("delivered", 2, 204)
    ]


def test_an_endpoint_being_removed_gets_no_new_event_and_an_operators_endpoint_no_click_url(
    db_url: str, settings: Settings
) -> None:
    from uuid import uuid4

    from worker.hooks.dispatch import payload

    gone = add_endpoint(db_url, settings, "https://hooks.example.com/gone").id
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE mailroom.webhook_endpoints SET status = 'removing' WHERE id = %s", (gone,))
    (email,) = enqueue_many(db_url, 1)
    with psycopg.connect(db_url) as conn:
        mailroom.cancel(conn, email)
    assert _rows(db_url, "SELECT count(*) FROM mailroom.webhook_events") == [(0,)]  # nobody listens
    with psycopg.connect(db_url) as conn:
        assert webhook_endpoints.remove(conn, gone, actor="tester")
    assert _rows(db_url, "SELECT count(*) FROM mailroom.webhook_endpoints") == [(0,)]
    (detail,) = _rows(
        db_url, "SELECT detail->>'url' FROM mailroom.audit_log WHERE action = 'webhooks.remove'"
    )
    assert detail == ("https://hooks.example.com",)  # a path may be the receiver's secret: not kept
    click = {"type": "email.clicked", "occurred_at": datetime.now(UTC), "email_id": 7, "owner": "shop",
             "idempotency_key": "k", "recipient": "ada@example.com", "uid": uuid4(),
             "data": {"url": "https://x.example/?u=ada@example.com", "reason": "r"}}  # fmt: skip
    told = {
        role: json.loads(payload({**click, "owner_role": role}))["data"] for role in ("shop", None, "blog")
    }
    assert told["shop"]["url"].endswith("ada@example.com") and told["shop"]["recipient"] == "ada@example.com"
    for other in (told[None], told["blog"]):
        assert set(other) == {"email_id"}
