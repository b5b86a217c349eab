"""The psycopg connection an enqueue writes with, found under what the caller passed: joining its transaction.

A psycopg connection is used as it is. Under a SQLAlchemy `Connection` or `Session` (or their async
twins) on the psycopg 3 dialect, it is the driver connection of the caller's transaction: the one the
session's statements run on, so the email commits, rolls back, or leaves with a savepoint, with them.

SQLAlchemy is never imported here: an object of one of its classes cannot exist before the module that
defines the class was imported, so `import mailroom` stays as light as it was.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import psycopg

if TYPE_CHECKING:
    import sqlalchemy
    import sqlalchemy.ext.asyncio
    import sqlalchemy.orm
    from sqlalchemy.engine.interfaces import Dialect

_C = TypeVar("_C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])

ACCEPTED = "a psycopg Connection, or a SQLAlchemy Connection or Session on the psycopg dialect"
ACCEPTED_ASYNC = (
    "a psycopg AsyncConnection, or a SQLAlchemy AsyncConnection or AsyncSession on the psycopg dialect"
)


def psycopg_connection(given: object, function: str) -> psycopg.Connection[Any]:
    """The psycopg connection under `given` (what `function`'s caller passed), in the caller's transaction.

    A SQLAlchemy `Session` begins its transaction if it has none (`Session.connection()`); a `Connection`
    outside one begins it as its own first statement would, so its `commit()` and `rollback()` decide.
    """
    if isinstance(given, psycopg.Connection):
        return given
    if _is_scoped_session(given):
        given = given()  # the registry's Session (Flask-SQLAlchemy's `db.session` is one)
    if _is_session(given):
        _check_dialect(given.get_bind().dialect, function, is_async=False, what="Session")
        connection = given.connection()
    elif _is_connection(given):
        _check_dialect(given.dialect, function, is_async=False, what="Connection")
        if not given.in_transaction():
            given.begin()
        connection = given
    else:
        raise _refused(given, function, is_async=False)
    return _driver(connection.connection.driver_connection, psycopg.Connection, function)


async def psycopg_async_connection(given: object, function: str) -> psycopg.AsyncConnection[Any]:
    """Async twin of `psycopg_connection`: the psycopg `AsyncConnection` under `given`, in its transaction."""
    if isinstance(given, psycopg.AsyncConnection):
        return given
    if _is_async_scoped_session(given):
        given = given()
    if _is_async_session(given):
        _check_dialect(given.get_bind().dialect, function, is_async=True, what="AsyncSession")
        connection = await given.connection()
    elif _is_async_connection(given):
        _check_dialect(given.dialect, function, is_async=True, what="AsyncConnection")
        if not given.in_transaction():
            await given.begin()
        connection = given
    else:
        raise _refused(given, function, is_async=True)
    raw = await connection.get_raw_connection()
    return _driver(raw.driver_connection, psycopg.AsyncConnection, function)


def _driver(driver: object, expected: type[_C], function: str) -> _C:
    """The driver connection, checked: a dialect that calls itself psycopg could wrap another driver."""
    if not isinstance(driver, expected):
        raise TypeError(f"{function} needs a psycopg driver connection; SQLAlchemy holds {_name(driver)}")
    return driver


def _check_dialect(dialect: Dialect, function: str, *, is_async: bool, what: str) -> None:
    """Refuse a SQLAlchemy object on another driver, or on the psycopg dialect of the other kind (async)."""
    if (dialect.name, dialect.driver) != ("postgresql", "psycopg"):
        raise TypeError(
            f"{function} needs SQLAlchemy's psycopg 3 dialect, an engine made from a URL starting"
            f" postgresql+psycopg://; this {what} is on {dialect.name}+{dialect.driver}"
        )
    if dialect.is_async != is_async:
        raise TypeError(_wrong_kind(function, f"a {what} of an async engine", is_async=is_async))


def _refused(given: object, function: str, *, is_async: bool) -> TypeError:
    """The error for an object `function` does not take, saying what it takes (or which twin does)."""
    name = _name(given)
    if _is_sync_kind(given) if is_async else _is_async_kind(given):
        return TypeError(_wrong_kind(function, name, is_async=is_async))
    accepted = ACCEPTED_ASYNC if is_async else ACCEPTED
    hint = ""
    if _is_engine(given):
        handles = (
            "an AsyncConnection from `await engine.connect()`, or an AsyncSession"
            if is_async
            else "a Connection from engine.connect() or engine.begin(), or a Session"
        )
        hint = f" (pass {handles}: the email joins its transaction)"
    return TypeError(f"{function} takes {accepted}; got {name}{hint}")


def _name(given: object) -> str:
    kind = type(given)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _wrong_kind(function: str, got: str, *, is_async: bool) -> str:
    if is_async:
        return f"{function} takes an async connection or session; got {got}: use {function.removesuffix('_async')}"
    return f"{function} takes a synchronous connection or session; got {got}: use await {function}_async"


# Each test looks the class up among the modules already imported (see the module's docstring).


def _instance_of(given: object, module: str, name: str) -> bool:
    loaded = sys.modules.get(module)
    cls = getattr(loaded, name, None)
    return isinstance(cls, type) and isinstance(given, cls)


def _is_connection(given: object) -> TypeGuard[sqlalchemy.Connection]:
    return _instance_of(given, "sqlalchemy.engine.base", "Connection")


def _is_session(given: object) -> TypeGuard[sqlalchemy.orm.Session]:
    return _instance_of(given, "sqlalchemy.orm.session", "Session")


def _is_scoped_session(given: object) -> TypeGuard[sqlalchemy.orm.scoped_session[Any]]:
    return _instance_of(given, "sqlalchemy.orm.scoping", "scoped_session")


def _is_async_connection(given: object) -> TypeGuard[sqlalchemy.ext.asyncio.AsyncConnection]:
    return _instance_of(given, "sqlalchemy.ext.asyncio.engine", "AsyncConnection")


def _is_async_session(given: object) -> TypeGuard[sqlalchemy.ext.asyncio.AsyncSession]:
    return _instance_of(given, "sqlalchemy.ext.asyncio.session", "AsyncSession")


def _is_async_scoped_session(
    given: object,
) -> TypeGuard[sqlalchemy.ext.asyncio.async_scoped_session[Any]]:
    return _instance_of(given, "sqlalchemy.ext.asyncio.scoping", "async_scoped_session")


def _is_engine(given: object) -> bool:
    return _instance_of(given, "sqlalchemy.engine.base", "Engine") or _instance_of(
        given, "sqlalchemy.ext.asyncio.engine", "AsyncEngine"
    )


def _is_sync_kind(given: object) -> bool:
    """A synchronous connection or session that the sync functions take."""
    return (
        isinstance(given, psycopg.Connection)
        or _is_connection(given)
        or _is_session(given)
        or _is_scoped_session(given)
    )


def _is_async_kind(given: object) -> bool:
    """An async connection or session that the async functions take."""
    return (
        isinstance(given, psycopg.AsyncConnection)
        or _is_async_connection(given)
        or _is_async_session(given)
        or _is_async_scoped_session(given)
    )
