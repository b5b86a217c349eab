"""What 'database unavailable' is (worker.core.failover's one rule) and how a process's circuit paces
its tries, on a clock the tests move."""

from __future__ import annotations

import logging

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import PoolTimeout

from worker.core.failover import (
    OVERLOADED,
    READ_ONLY,
    SHUTTING_DOWN,
    UNREACHABLE,
    DatabaseCircuit,
    ReadOnlyServer,
    database_unavailable,
    unavailable_reason,
)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        # A primary demoted while it stays up, or a standby: every write refused.
        (errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"), READ_ONLY),
        (ReadOnlyServer("the server turned read-only"), READ_ONLY),
        # A server going away: fast or smart shutdown, a crash of a sibling process, a start-up.
        (errors.AdminShutdown("terminating connection due to administrator command"), SHUTTING_DOWN),
        (
            errors.CrashShutdown("terminating connection because of crash of another server process"),
            SHUTTING_DOWN,
        ),
        (errors.CannotConnectNow("the database system is starting up"), SHUTTING_DOWN),
        # No connection at all: refused, lost, no host of a multi-host URL taking writes, the pool empty.
        (psycopg.OperationalError("connection failed: session is read-only"), UNREACHABLE),
        (psycopg.InterfaceError("the connection is closed"), UNREACHABLE),
        (errors.ConnectionFailure("server closed the connection unexpectedly"), UNREACHABLE),
        (PoolTimeout("couldn't get a connection after 30.00 sec"), UNREACHABLE),
        (errors.TooManyConnections("sorry, too many clients already"), OVERLOADED),
    ],
)
def test_a_lost_read_only_or_shutting_down_server_is_database_unavailable(
    error: BaseException, reason: str
) -> None:
    assert unavailable_reason(error) == reason
    assert database_unavailable(error)


@pytest.mark.parametrize(
    "error",
    [
        errors.UniqueViolation("duplicate key value"),
        errors.CheckViolation("new row violates check constraint"),
        errors.InvalidTextRepresentation("invalid input syntax"),
        errors.UndefinedTable('relation "mailroom.email_queue" does not exist'),
        TimeoutError(),
        ValueError("a bug"),
    ],
)
def test_an_error_about_the_work_itself_is_not_database_unavailable(error: BaseException) -> None:
    assert unavailable_reason(error) is None


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_circuit_opens_after_repeated_failures_over_more_than_a_blip_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    circuit = DatabaseCircuit("worker", threshold=3, base_seconds=0.5, cap_seconds=4.0, clock=clock)
    lost = errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction")
    with caplog.at_level(logging.INFO, logger="mailroom.database"):
        for _ in range(5):  # every task of the process meets it at once: not yet an open circuit
            circuit.failed(lost)
        assert not circuit.opened and circuit.wait_seconds() == 0.5
        clock.now += 0.6
        circuit.failed(lost)
        assert circuit.opened
        assert circuit.wait_seconds() == pytest.approx(0.5)
        clock.now += 0.2
        circuit.failed(lost)  # a task that was still in flight: the wait does not grow
        assert circuit.wait_seconds() == pytest.approx(0.3)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert said[0].startswith("worker: database unavailable (read-only: cannot execute INSERT")
    assert "circuit open" in said[1] and "after 6 failures in 0.6s" in said[1]


def test_an_open_circuit_waits_longer_after_each_failed_try_up_to_its_cap() -> None:
    clock = Clock()
    circuit = DatabaseCircuit("tracker", threshold=1, base_seconds=0.5, cap_seconds=4.0, clock=clock)
    lost = psycopg.OperationalError("connection refused")
    circuit.failed(lost)
    waits = []
    for _ in range(6):
        clock.now += (
            circuit.wait_seconds() + 0.5
        )  # the first opens it; each later one is a try after the wait
        circuit.failed(lost)
        waits.append(circuit.wait_seconds())
    assert waits == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    view = circuit.view()
    assert view.open and view.failures == 7 and view.reason == UNREACHABLE
    assert view.error == "connection refused" and view.retry_in_seconds == 4.0


def test_the_first_success_closes_the_circuit_and_says_how_long_it_was_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    circuit = DatabaseCircuit("bounce-receiver", threshold=2, base_seconds=0.5, clock=clock)
    circuit.succeeded()  # nothing failed: nothing to say
    for _ in range(3):
        circuit.failed(errors.AdminShutdown("terminating connection due to administrator command"))
        clock.now += 1.0
    clock.now += 9.0
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mailroom.database"):
        circuit.succeeded()
        circuit.succeeded()
    assert [r.getMessage() for r in caplog.records] == [
        "bounce-receiver: database available again after 12.0s (3 failed tries)"
    ]
    assert circuit.view() == circuit.view().__class__(False, 0, 0.0, "", "", 0.0)
    assert not circuit.opened and circuit.wait_seconds() == 0.0
