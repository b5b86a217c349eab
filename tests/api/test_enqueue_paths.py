"""Every way into the queue tells the same: one email or many, synchronous or async, and the bulk
command's COPY, each given the same request, refuse it with the same words or store it the same way
(campaign policy, open tracking, suppression verdict, idempotency, content rules)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

import mailroom
from mailroom import EmailRequest
from tests.cli import run
from tests.fixtures_db import TEST_POSTAL_ADDRESS
from tests.ops.suppression_helpers import list_bounce
from worker.core.campaign_mail import MISSING_POSTAL

# ("refused", field, message) or ("stored", the earlier email's id?, what the caller is told of its
# suppression, status, track_opens, track_clicks); then the queue rows the call added (but the filler).
Outcome = tuple[Any, ...]
HTML = '<p>Spring is here. <a href="https://shop.example/sale">See the sale</a></p>'


@dataclass(frozen=True)
class Case:
    """One request, what the database holds before it, and what every path must make of it."""

    fields: dict[str, Any]
    expected: Outcome
    setup: Callable[[str], int | None] = lambda db_url: None  # its answer: an email stored before
    env: dict[str, str | None] = field(default_factory=dict)


def _campaign(name: str, **fields: Any) -> dict[str, Any]:
    return {"to": "reader@example.com", "subject": "Spring sale", "html": HTML, "campaign_id": name, **fields}


def _quiet_campaign(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO mailroom.campaigns (campaign_id, track_opens) VALUES ('quiet', false)")


def _bounced(db_url: str) -> None:
    list_bounce(db_url, "gone@example.com")


def _earlier(db_url: str) -> int:
    with psycopg.connect(db_url) as conn:
        return mailroom.enqueue(
            conn,
            EmailRequest(to="ada@example.com", subject="Order 42", text="Thanks", idempotency_key="order-42"),
        )


CASES = {
    "campaign email without a postal address": Case(
        _campaign("spring"),
        ("refused", "campaign_id", MISSING_POSTAL.format(campaign="spring"), 0),
        env={"MAILROOM_POSTAL_ADDRESS": None},
    ),
    "a campaign's open pixel switched off": Case(
        _campaign("quiet"),
        ("stored", False, None, "pending", False, True, 1),
        setup=lambda u: _quiet_campaign(u),
    ),
    "campaign email tracked by default": Case(
        _campaign("spring"), ("stored", False, None, "pending", True, True, 1)
    ),
    "an address on the bounce list": Case(
        {"to": "gone@example.com", "subject": "Your order", "text": "Thanks"},
        ("stored", False, "on the bounce list (hard)", "suppressed", False, False, 1),
        setup=lambda u: _bounced(u),
    ),
    "a line break in a header": Case(
        {
            "to": "ada@example.com",
            "subject": "Hi",
            "text": "b",
            "headers": {"X-Order": "42\r\nBcc: eve@evil.example"},
        },
        ("refused", "headers.X-Order", "control character '\\r' is not allowed in a header", 0),
    ),
    "an idempotency key stored before": Case(
        {"to": "bob@example.com", "subject": "Order 42", "text": "Thanks", "idempotency_key": "order-42"},
        ("stored", True, None, "pending", False, False, 0),
        setup=_earlier,
    ),
}


# Sent after the request by the batch paths, so that their many-row INSERT is the one that runs.
FILLER = EmailRequest(to="filler@example.com", subject="Another email", text="Of the same call")


def _count(db_url: str) -> int:
    """The queue's rows but the filler's."""
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM mailroom.email_queue WHERE recipient_email <> %s", (FILLER.to,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def _stored(db_url: str, email_id: int, told: str | None, earlier: int | None) -> Outcome:
    with psycopg.connect(db_url) as conn:
        row = conn.execute(
            "SELECT status, track_opens, track_clicks FROM mailroom.email_queue WHERE id = %s", (email_id,)
        ).fetchone()
    assert row is not None
    return ("stored", email_id == earlier, told, *row)


def _through_python(call: Callable[[list[EmailRequest]], list[mailroom.Enqueued]]) -> Callable[..., Outcome]:
    """A path of the Python API: `call` enqueues the requests it is given and returns their ids."""

    def path(db_url: str, fields: dict[str, Any], earlier: int | None, **_: Any) -> Outcome:
        try:
            got = call([EmailRequest(**fields), FILLER])[0]
        except mailroom.ValidationError as exc:
            return ("refused", exc.field, exc.message)
        return _stored(db_url, got, got.suppression_reason, earlier)

    return path


def _one(db_url: str, call: Callable[[Any, EmailRequest], Any]) -> Callable[[list[EmailRequest]], Any]:
    """`call(conn, request)` on the first request only, on a connection."""
    return lambda requests: [_connected(db_url, lambda c: call(c, requests[0]))]


def _one_async(db_url: str, call: Callable[[Any, EmailRequest], Any]) -> Callable[[list[EmailRequest]], Any]:
    return lambda requests: [asyncio.run(_connected_async(db_url, lambda c: call(c, requests[0])))]


def _connected(db_url: str, use: Callable[[psycopg.Connection[Any]], Any]) -> Any:
    with psycopg.connect(db_url) as conn:
        return use(conn)


async def _connected_async(db_url: str, use: Callable[[psycopg.AsyncConnection[Any]], Any]) -> Any:
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        return await use(conn)


def _bulk(
    db_url: str, fields: dict[str, Any], earlier: int | None, *, capsys: Any, monkeypatch: Any
) -> Outcome:
    """`mailroom enqueue`: the JSON line stored by COPY, or refused in its result line."""
    _, out, _ = run(capsys, "enqueue", "-", stdin=json.dumps(fields) + "\n", monkeypatch=monkeypatch)
    result = json.loads(out)
    if "error" in result:
        return ("refused", result["field"], result["error"].removeprefix(result["field"] + ": "))
    return _stored(db_url, result["id"], result.get("suppressed"), earlier)


def _paths(db_url: str) -> dict[str, Callable[..., Outcome]]:
    return {
        "enqueue": _through_python(_one(db_url, mailroom.enqueue)),
        "enqueue_async": _through_python(_one_async(db_url, mailroom.enqueue_async)),
        "enqueue_many": _through_python(
            lambda rs: _connected(db_url, lambda c: mailroom.enqueue_many(c, rs))
        ),
        "enqueue_many_async": _through_python(
            lambda rs: asyncio.run(_connected_async(db_url, lambda c: mailroom.enqueue_many_async(c, rs)))
        ),
        "mailroom enqueue (COPY)": _bulk,
    }


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_every_way_into_the_queue_gives_the_same_outcome(
    db_url: str,
    tmp_path: Path,
    secret_key: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: Case,
) -> None:
    for name in [n for n in os.environ if n.startswith("MAILROOM_")]:
        monkeypatch.delenv(name)
    env = {
        "MAILROOM_DATABASE_URL": db_url,
        "MAILROOM_HOME": str(tmp_path / "home"),
        "MAILROOM_SECRET_KEY": secret_key,
        "MAILROOM_POSTAL_ADDRESS": TEST_POSTAL_ADDRESS,
        **case.env,
    }
    for name, value in env.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    earlier = case.setup(db_url)
    outcomes: dict[str, Outcome] = {}
    for name, path in _paths(db_url).items():
        before = _count(db_url)
        outcome = path(db_url, case.fields, earlier, capsys=capsys, monkeypatch=monkeypatch)
        outcomes[name] = (*outcome, _count(db_url) - before)
    assert outcomes == dict.fromkeys(outcomes, case.expected)
