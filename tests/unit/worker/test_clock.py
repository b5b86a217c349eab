"""The engine's clock (`worker.engine.clock`) and what this worker knows of its own leases on it
(`worker.engine.leases.HeldLeases`), without a database."""

from __future__ import annotations

import uuid
from datetime import timedelta

from worker.engine.clock import SYSTEM, MovedClock
from worker.engine.leases import HeldLeases


def test_the_system_clock_leaves_due_times_to_the_database_and_a_moved_one_runs_ahead() -> None:
    clock = MovedClock()
    assert SYSTEM.ahead == 0.0 == clock.ahead
    before = SYSTEM.now()
    clock.advance(3600.0)
    steady = clock.monotonic()
    assert clock.ahead == 3600.0
    assert clock.now() - before >= timedelta(seconds=3600)
    # A wall clock that jumps leaves the steady one be: deadlines and lease renewal do not jump with it.
    assert clock.monotonic() - steady < 60


def test_a_process_that_stood_still_sees_steady_time_move_but_not_due_times() -> None:
    clock = MovedClock()
    steady = clock.monotonic()
    clock.stand_still(90.0)
    assert clock.monotonic() - steady >= 90.0
    assert clock.ahead == 0.0  # the database's clock moved on too: nothing is due earlier


def test_a_lease_is_fresh_until_half_of_it_may_have_passed_and_a_renewal_makes_it_fresh_again() -> None:
    clock = MovedClock()
    held = HeldLeases(60.0, clock)
    token, other = uuid.uuid4(), uuid.uuid4()
    held.add(token, clock.monotonic())
    assert held.fresh(token) and not held.fresh(other) and held.tokens() == [token]
    clock.stand_still(31.0)
    assert not held.fresh(token)
    held.renewed([token, other], clock.monotonic())  # `other` ended meanwhile: not taken back
    assert held.fresh(token) and held.tokens() == [token]
    held.renewed([token], clock.monotonic() - 59.0)  # an older renewal never moves it back
    assert held.fresh(token)
    held.discard(token)
    assert not held and not held.fresh(token)
