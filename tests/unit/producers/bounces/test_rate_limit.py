"""The receiver's rate limit and client networks, without a server: a flood of new clients wipes no one's bucket."""

from __future__ import annotations

from worker.core.connection_gate import ConnectionGate, client_key
from worker.core.rate_limit import DEFAULT_CLIENTS, RateLimiter


class Clock:
    """A clock that stands still unless the test moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_exhausted_client_stays_limited_through_a_flood_of_twice_as_many_new_clients_as_are_kept() -> None:
    clock = Clock()
    limiter = RateLimiter(per_minute=60, burst=2, clock=clock)
    assert [limiter.allow("198.51.100.7") for _ in range(3)] == [True, True, False]
    flood = [
        limiter.allow(f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}") for n in range(2 * DEFAULT_CLIENTS)
    ]
    assert limiter.allow("198.51.100.7") is False  # its bucket was not forgotten
    assert limiter.remembered() == DEFAULT_CLIENTS  # memory stays bounded
    # those that found no room shared one bucket: the flood got little more than the room there was
    assert sum(flood) <= DEFAULT_CLIENTS + 2
    clock.now += 1.0  # one token back at sixty a minute
    assert limiter.allow("198.51.100.7") is True


def test_refilled_buckets_make_room_for_new_clients() -> None:
    clock = Clock()
    limiter = RateLimiter(per_minute=60, burst=2, clock=clock, clients=3)
    for client in ("192.0.2.1", "192.0.2.2", "192.0.2.3"):
        assert limiter.allow(client)
    clock.now += 2.0  # every bucket full again: forgetting one loses nothing
    assert [limiter.allow(f"192.0.2.{n}") for n in range(4, 7)] == [True] * 3
    assert limiter.remembered() == 3
    assert limiter.allow("192.0.2.1")  # forgotten while full: it starts full again, as it was


def test_a_client_cannot_escape_its_limit_by_walking_its_ipv6_64() -> None:
    limiter = RateLimiter(per_minute=60, burst=2, clock=Clock())
    replies = [limiter.allow(f"2001:db8:1:2::{n:x}") for n in range(1, 6)]
    assert replies == [True, True, False, False, False]
    assert limiter.allow("2001:db8:1:3::1") is True  # another /64 is another client


def test_client_networks_are_ipv4_addresses_and_ipv6_64s() -> None:
    assert client_key("192.0.2.10") == "192.0.2.10"
    assert client_key("2001:db8:1:2:aaaa::1") == "2001:db8:1:2::/64"
    assert client_key("::ffff:192.0.2.10") == "192.0.2.10"
    assert client_key("fe80::1%eth0") == "fe80::/64"
    assert client_key("/run/mailroom.sock") == "/run/mailroom.sock"


def test_the_gate_counts_each_client_up_to_its_cap_and_frees_a_place_on_close() -> None:
    gate = ConnectionGate(per_client=2, refusal=b"421\r\n")
    assert [gate.enter("192.0.2.1") for _ in range(3)] == [True, True, False]
    assert gate.enter("192.0.2.2")
    gate.leave("192.0.2.1")
    assert gate.enter("192.0.2.1")
    assert gate.refused == 1
    unlimited = ConnectionGate(per_client=0, refusal=b"")
    assert all(unlimited.enter("192.0.2.1") for _ in range(1000))
