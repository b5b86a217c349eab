"""The metrics listener over real sockets: clients that trickle, hold or flood never shut out a probe."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry

from tests.worker.metrics_helpers import get, post, probe
from worker.core.config import Settings
from worker.ops.metrics_listener import Limits
from worker.ops.metrics_server import TRACKER, MetricsServer, start

Serve = Callable[..., MetricsServer]
# Loopback is a whole /8: each of these is a client network of its own to the listener.
PROBER, SLOW, OTHER = "127.0.0.1", "127.0.0.2", "127.0.0.3"


@pytest.fixture
def serve(db_url: str, settings: Settings) -> Iterator[Serve]:
    """Start listeners (with the limits given) on free ports; all closed after the test."""
    started: list[MetricsServer] = []

    def serve_one(limits: Limits | None = None) -> MetricsServer:
        registry = CollectorRegistry(auto_describe=False)
        server = start("127.0.0.1", 0, registry, db_url, settings, TRACKER, limits)
        started.append(server)
        return server

    yield serve_one
    for server in started:
        server.close()


def _slow(server: MetricsServer, source: str) -> socket.socket:
    """A connection from `source` that has sent the start of a request head and no more (a slow loris)."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10, source_address=(source, 0))
    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\nX-Slow: ")
    return sock


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the listener closes `sock` within `within` seconds (0: has it already)."""
    readable, _, _ = select.select([sock], [], [], within)
    if not readable:
        return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _healthz(server: MetricsServer) -> int:
    return probe(f"http://{PROBER}:{server.port}/healthz")[0]


def test_eight_slow_clients_do_not_shut_out_healthz(serve: Serve) -> None:
    server = serve()
    # As in the report: eight connections in the middle of their request heads.
    slow = [_slow(server, SLOW) for _ in range(8)]
    try:
        assert [_healthz(server) for _ in range(20)] == [200] * 20
        assert probe(f"http://{PROBER}:{server.port}/readyz")[0] == 200
        assert not any(_closed(sock, 0) for sock in slow)  # still held: the probes took no one's place
    finally:
        for sock in slow:
            sock.close()


def test_a_head_must_be_whole_within_the_deadline_however_it_trickles(serve: Serve) -> None:
    server = serve(Limits(head_seconds=0.5))
    sock = _slow(server, SLOW)
    begun, sent = time.monotonic(), 0
    try:
        # A byte every 0.1 s: no single read waits long, yet the head never ends.
        while not _closed(sock, 0.1):
            assert time.monotonic() - begun < 10, "a trickling head kept its connection"
            try:
                sock.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
    finally:
        sock.close()
    assert sent >= 3  # it kept sending: the deadline, not an idle timeout, closed it
    assert time.monotonic() - begun < 5
    assert _healthz(server) == 200


def test_one_client_holds_at_most_its_cap_and_its_oldest_slow_connection_makes_room(serve: Serve) -> None:
    server = serve(Limits(per_client=3))
    first, *held = [_slow(server, SLOW) for _ in range(3)]
    others = [_slow(server, OTHER) for _ in range(3)]
    try:
        newest = _slow(server, SLOW)  # over its client's cap: its own oldest slow connection gives way
        held.append(newest)
        assert _closed(first, 5)
        assert not any(_closed(sock, 0) for sock in [*held, *others])  # another client is not counted
        assert _healthz(server) == 200
        assert server.evicted == 1
    finally:
        for sock in [first, *held, *others]:
            sock.close()


def test_a_probe_from_the_slow_clients_own_address_is_answered(serve: Serve) -> None:
    # Behind a NAT or a container's port proxy, the prober and the slow clients share one address.
    server = serve(Limits(per_client=4))
    slow = [_slow(server, PROBER) for _ in range(4)]
    try:
        assert _healthz(server) == 200
        assert _closed(slow[0], 5) and not any(_closed(sock, 0) for sock in slow[1:])
    finally:
        for sock in slow:
            sock.close()


def test_when_every_connection_is_taken_a_probe_takes_the_place_of_the_oldest_slow_one(
    serve: Serve,
) -> None:
    server = serve(Limits(per_client=2, connections=4))
    slow = [_slow(server, source) for source in (SLOW, SLOW, OTHER, OTHER)]
    try:
        assert [_healthz(server) for _ in range(3)] == [200] * 3
        assert _closed(slow[0], 5)
        assert server.evicted >= 1
    finally:
        for sock in slow:
            sock.close()


def test_metrics_and_refusals_are_answered_as_before(serve: Serve) -> None:
    server = serve()
    base = f"http://{PROBER}:{server.port}"
    status, content_type, body = get(f"{base}/metrics")
    assert status == 200 and content_type.startswith("text/plain") and "mailroom_exporter_info" in body
    assert post(f"{base}/metrics", b"x" * 1000) == 501
    status, _, body = get(f"{base}/%3Cscript%3E?x=%3Cscript%3E")
    assert status == 404 and "script" not in body
    with socket.create_connection((PROBER, server.port), timeout=10) as sock:
        sock.sendall(b"GET /" + b"a" * 20_000)  # a head past the cap ends the connection, unanswered
        assert _closed(sock, 5)
