"""`mailroom.enqueue` from SQLAlchemy: a Connection, Session, AsyncConnection or AsyncSession on the psycopg 3
dialect lends its transaction to the email, which commits, rolls back or leaves with a savepoint with it."""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import sqlalchemy
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker
from sqlalchemy.pool import NullPool

import mailroom
from mailroom import EmailRequest
from tests.fixtures_db import drop_roles, role_url
from worker.ops import roles

KINDS = ["Connection", "Session", "AsyncConnection", "AsyncSession"]
TAKES = "takes a psycopg Connection, or a SQLAlchemy Connection or Session on the psycopg dialect; got "


@pytest.fixture(autouse=True)
def _default_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public API reads `MAILROOM_*` itself: each test starts from the defaults."""
    for name in [n for n in os.environ if n.startswith("MAILROOM_")]:
        monkeypatch.delenv(name)


def sqlalchemy_url(conninfo: str) -> sqlalchemy.URL:
    """A libpq DSN (URL or key=value) as SQLAlchemy's `postgresql+psycopg` URL, every parameter kept."""
    params = {key: str(value) for key, value in conninfo_to_dict(conninfo).items()}
    port = params.pop("port", None)
    return sqlalchemy.URL.create(
        "postgresql+psycopg",
        username=params.pop("user", None),
        password=params.pop("password", None),
        host=params.pop("host", None),
        port=int(port) if port else None,
        database=params.pop("dbname", None),
        query=params,
    )


@pytest.fixture(params=["owner", "app role"])
def app_url(request: pytest.FixtureRequest, db_url: str) -> Iterator[sqlalchemy.URL]:
    """The URL the application's engine connects with: the test database's owner, and a least-privilege
    role made by `mailroom db grant app` (no privilege on any table: every case goes through the door).

    Every case below connects through this fixture alone and reads what was stored as the owner (`db_url`).
    """
    if request.param == "owner":
        yield sqlalchemy_url(db_url)
        return
    request.getfixturevalue("role_lock")
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "app", "mr_sqla_app", create=True, actor="tester")
    try:
        yield sqlalchemy_url(role_url(db_url, "mr_sqla_app"))
    finally:
        drop_roles(db_url, "mr_sqla_app")


def _email(to: str = "ada@example.com") -> EmailRequest:
    return EmailRequest(to=to, subject="Order 42 received", text="Thank you.")


def _stored(db_url: str) -> list[tuple[Any, ...]]:
    """Committed queue rows (id, recipient, status), seen from another connection."""
    with psycopg.connect(db_url) as other:
        return other.execute(
            "SELECT id, recipient_email, status FROM mailroom.email_queue ORDER BY id"
        ).fetchall()


async def _settled(result: Any) -> Any:
    """The result of a call on a sync or an async handle: awaited when it is awaitable."""
    return await result if inspect.isawaitable(result) else result


@dataclass
class Caller:
    """An application's SQLAlchemy handle of one kind, driven the same way whatever the kind."""

    handle: Any
    is_async: bool

    async def enqueue(self, request: EmailRequest) -> int:
        if self.is_async:
            return await mailroom.enqueue_async(self.handle, request)
        return mailroom.enqueue(self.handle, request)

    async def enqueue_many(self, requests: Iterable[EmailRequest]) -> list[int]:
        if self.is_async:
            return list(await mailroom.enqueue_many_async(self.handle, requests))
        return list(mailroom.enqueue_many(self.handle, requests))

    async def call(self, method: str, *args: Any) -> Any:
        """`handle.method(*args)`, awaited on an async handle (`commit`, `rollback`, `begin_nested`, ...)."""
        return await _settled(getattr(self.handle, method)(*args))


@pytest.fixture(params=KINDS)
async def caller(request: pytest.FixtureRequest, app_url: sqlalchemy.URL) -> AsyncIterator[Caller]:
    """A fresh handle of each kind, on an engine of `app_url`, outside any transaction."""
    kind = request.param
    if kind.startswith("Async"):
        async_engine = create_async_engine(app_url, poolclass=NullPool)
        handle: Any = (
            await async_engine.connect() if kind == "AsyncConnection" else AsyncSession(async_engine)
        )
        yield Caller(handle, is_async=True)
        await handle.close()
        await async_engine.dispose()
    else:
        engine = sqlalchemy.create_engine(app_url, poolclass=NullPool)
        handle = engine.connect() if kind == "Connection" else Session(engine)
        yield Caller(handle, is_async=False)
        handle.close()
        engine.dispose()


async def test_an_email_exists_once_the_callers_transaction_commits(caller: Caller, db_url: str) -> None:
    email_id = await caller.enqueue(_email())
    seen = await caller.call("execute", text("SELECT id FROM mailroom.my_emails"))
    assert seen.scalars().all() == [email_id]  # the caller's own transaction sees it
    assert _stored(db_url) == []  # nobody else, before the commit
    await caller.call("commit")
    assert _stored(db_url) == [(email_id, "ada@example.com", "pending")]


async def test_an_email_vanishes_when_the_callers_transaction_rolls_back(caller: Caller, db_url: str) -> None:
    await caller.call("execute", text("SELECT 1"))
    await caller.enqueue(_email())
    await caller.call("rollback")
    await caller.call("commit")
    assert _stored(db_url) == []


async def test_a_rolled_back_savepoint_takes_only_its_own_email(caller: Caller, db_url: str) -> None:
    outer = await caller.enqueue(_email("outer@example.com"))
    savepoint = await caller.call("begin_nested")
    await caller.enqueue(_email("inner@example.com"))
    await _settled(savepoint.rollback())
    released = await caller.call("begin_nested")
    kept = await caller.enqueue(_email("kept@example.com"))
    await _settled(released.commit())
    await caller.call("commit")
    assert _stored(db_url) == [(outer, "outer@example.com", "pending"), (kept, "kept@example.com", "pending")]


async def test_enqueue_many_joins_the_callers_transaction(caller: Caller, db_url: str) -> None:
    ids = await caller.enqueue_many([_email("a@example.com"), _email("b@example.com")])
    assert _stored(db_url) == []
    await caller.call("commit")
    assert _stored(db_url) == [(ids[0], "a@example.com", "pending"), (ids[1], "b@example.com", "pending")]


def test_a_scoped_session_as_flask_sqlalchemy_gives_it_is_its_current_session(
    app_url: sqlalchemy.URL, db_url: str
) -> None:
    engine = sqlalchemy.create_engine(app_url, poolclass=NullPool)
    session = scoped_session(sessionmaker(engine))
    try:
        email_id = mailroom.enqueue(session, _email())
        assert _stored(db_url) == []
        session.commit()
    finally:
        session.remove()
        engine.dispose()
    assert _stored(db_url) == [(email_id, "ada@example.com", "pending")]


def test_on_an_autocommit_connection_each_call_is_its_own_transaction(
    app_url: sqlalchemy.URL, db_url: str
) -> None:
    engine = sqlalchemy.create_engine(app_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        email_id = mailroom.enqueue(connection, _email())
        assert _stored(db_url) == [(email_id, "ada@example.com", "pending")]
    engine.dispose()


def test_a_sqlalchemy_engine_on_another_driver_is_refused_naming_the_url_scheme() -> None:
    engine = sqlalchemy.create_engine("sqlite://")
    with engine.connect() as connection, Session(engine) as session:
        for handle, what in [(connection, "Connection"), (session, "Session")]:
            with pytest.raises(TypeError) as refused:
                mailroom.enqueue(handle, _email())
            assert str(refused.value) == (
                "mailroom.enqueue needs SQLAlchemy's psycopg 3 dialect, an engine made from a URL starting"
                f" postgresql+psycopg://; this {what} is on sqlite+pysqlite"
            )
    engine.dispose()


def test_an_object_that_is_no_connection_is_refused_saying_what_is_taken() -> None:
    with pytest.raises(TypeError) as refused:
        mailroom.enqueue(object(), _email())  # type: ignore[arg-type]
    assert str(refused.value) == f"mailroom.enqueue {TAKES}object"
    with pytest.raises(TypeError) as refused:
        mailroom.enqueue_many(sqlalchemy.create_engine("sqlite://"), [_email()])  # type: ignore[arg-type]
    assert str(refused.value) == (
        f"mailroom.enqueue_many {TAKES}sqlalchemy.engine.base.Engine (pass a Connection from engine.connect()"
        " or engine.begin(), or a Session: the email joins its transaction)"
    )


async def test_an_async_function_refuses_what_is_not_a_connection() -> None:
    with pytest.raises(TypeError) as refused:
        await mailroom.enqueue_many_async("postgresql+psycopg://db/shop", [_email()])  # type: ignore[arg-type]
    assert str(refused.value) == (
        "mailroom.enqueue_many_async takes a psycopg AsyncConnection, or a SQLAlchemy AsyncConnection or"
        " AsyncSession on the psycopg dialect; got str"
    )


async def test_each_twin_points_to_the_other_when_given_the_other_kind(app_url: sqlalchemy.URL) -> None:
    async_engine = create_async_engine(app_url, poolclass=NullPool)
    engine = sqlalchemy.create_engine(app_url, poolclass=NullPool)
    async with AsyncSession(async_engine) as async_session:
        with pytest.raises(TypeError, match=r"got .*AsyncSession: use await mailroom\.enqueue_async$"):
            mailroom.enqueue(async_session, _email())  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"use await mailroom\.enqueue_many_async$"):
            mailroom.enqueue_many(async_session.sync_session, [_email()])
    with Session(engine) as session, pytest.raises(TypeError, match=r"got .*Session: use mailroom\.enqueue$"):
        await mailroom.enqueue_async(session, _email())  # type: ignore[arg-type]
    await async_engine.dispose()
    engine.dispose()
