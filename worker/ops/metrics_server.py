"""The monitoring listener (`--metrics-listen HOST:PORT`): /metrics, /healthz and /readyz on a port of its own.

It runs in a thread beside whatever the process does (the worker's event loop, the tracker, the bounce
receiver), so a busy or stuck loop does not blind the scrape, and a scrape never blocks delivery.
`/healthz` says the process is alive and reaches the database; `/readyz` that it can do its work:
the database at this version's schema and, for a worker, none of the problems `mailroom health`
finds (no usable sender with email due, nothing sent while email waits, ...). Both answer JSON with
the reasons, 200 when fine and 503 when not. Nothing here is ever served on a public port: the
commands refuse a metrics address that is their public one. How the port is listened on (a
deadline for each request head, caps per client and in all, threads kept for the probes) is
`worker.ops.metrics_listener`'s.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import psycopg
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from worker.core.config import Settings
from worker.core.db import head_revision
from worker.core.failover import open_circuits
from worker.ops.metrics import DatabaseGauges
from worker.ops.metrics_listener import Limits, Listener, bind, responder

log = logging.getLogger(__name__)

# Probes come every few seconds; the health figures are read at most this often.
READY_CACHE_SECONDS = 5.0
# Answered on threads of their own: a scrape never queues an orchestrator's probe.
PROBE_PATHS = frozenset({b"/healthz", b"/readyz"})
PROBE_CONNECT_TIMEOUT = 3

WORKER, TRACKER, RECEIVER = "worker", "tracker", "bounce-receiver"

Verdict = tuple[bool, dict[str, Any]]


@dataclass
class Probes:
    """What /healthz and /readyz answer for one process (`role`: worker, tracker or bounce-receiver)."""

    url: str
    settings: Settings
    role: str
    cache_seconds: float = READY_CACHE_SECONDS
    # Under a supervisor: the roles of its children whose database circuit is open (their circuits
    # are theirs, not this process's; see `children_circuits`).
    children: Callable[[], list[str]] | None = None
    _head: str = field(default_factory=head_revision)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ready: tuple[float, Verdict] | None = None
    _alive: tuple[float, Verdict] | None = None

    def alive(self) -> Verdict:
        """The process answers and reaches the database (cached like `ready`: a flood of probes must not
        become a flood of database connections)."""
        with self._lock:
            now = time.monotonic()
            if self._alive is None or now - self._alive[0] >= self.cache_seconds:
                self._alive = (now, self._check_alive())
            return self._alive[1]

    def _check_alive(self) -> Verdict:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=PROBE_CONNECT_TIMEOUT) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            return False, {"ok": False, "role": self.role, "reasons": [_unreachable(exc)]}
        return True, {"ok": True, "role": self.role, "reasons": []}

    def ready(self) -> Verdict:
        """The process can do its work (cached for `cache_seconds`), and its database circuit is closed
        (read each time: it is the process's own state, free to read)."""
        with self._lock:
            now = time.monotonic()
            if self._ready is None or now - self._ready[0] >= self.cache_seconds:
                self._ready = (now, self._check_ready())
            ok, body = self._ready[1]
        from worker.ops.health import database_findings

        reasons = [f.line for f in database_findings(open_circuits())]
        if self.children is not None:
            reasons += [
                f"a {role} process under this supervisor has found the database unavailable again and again"
                " and waits before each try (its circuit is open)"
                for role in self.children()
            ]
        if not reasons:
            return ok, body
        return False, {**body, "ok": False, "reasons": reasons + list(body.get("reasons", []))}

    def _check_ready(self) -> Verdict:
        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=PROBE_CONNECT_TIMEOUT) as conn:
                problem = self._schema_problem(conn)
                if problem:
                    return False, {"ok": False, "role": self.role, "reasons": [problem], "warnings": []}
                if self.role != WORKER:
                    return True, {"ok": True, "role": self.role, "reasons": [], "warnings": []}
                from worker.ops.health import check_health

                report = check_health(conn, self.settings)
        except psycopg.Error as exc:
            return False, {"ok": False, "role": self.role, "reasons": [_unreachable(exc)], "warnings": []}
        return report.ok, {"role": self.role, **report.as_dict()}

    def _schema_problem(self, conn: psycopg.Connection[Any]) -> str | None:
        row = conn.execute("SELECT to_regclass('mailroom.alembic_version') IS NOT NULL").fetchone()
        current = None
        if row and row[0]:
            version = conn.execute("SELECT version_num FROM mailroom.alembic_version").fetchone()
            current = str(version[0]) if version else None
        if current == self._head:
            return None
        if current is None:
            return "Mailroom is not installed in this database; run: mailroom db upgrade"
        return f"the database schema is at {current}, this Mailroom needs {self._head}"


def _unreachable(exc: BaseException) -> str:
    # Not psycopg's words: they name the database's host, port and role to whoever reaches this port.
    log.warning(
        "metrics probe: database unreachable: %s", str(exc).strip().splitlines()[0] if str(exc) else exc
    )
    return f"database unreachable ({type(exc).__name__}; the process's log says more)"


class Identity(Collector):
    """`mailroom_exporter_info{host, role}`: which host and kind of process a scrape came from."""

    def __init__(self, role: str, host: str | None = None) -> None:
        self.role = role
        self.host = host or socket.gethostname()

    def collect(self) -> list[Metric]:
        """One series, always 1."""
        info = GaugeMetricFamily(
            "mailroom_exporter_info",
            "The host and role of the process serving these metrics",
            labels=["host", "role"],
        )
        info.add_metric([self.host, self.role], 1)
        return [info]


def _handler(registry: CollectorRegistry, probes: Probes) -> type[BaseHTTPRequestHandler]:
    routes: dict[str, Callable[[], Verdict]] = {"/healthz": probes.alive, "/readyz": probes.ready}

    class Handler(BaseHTTPRequestHandler):
        """The standard library's parsing of one request head (given whole), and the answer in bytes."""

        server_version = "mailroom-metrics"
        sys_version = ""

        def setup(self) -> None:
            """Read the head the listener collected, write into its buffer (never a socket)."""
            self.rfile, self.wfile = self.request.head, self.request.answer

        def finish(self) -> None:
            """Nothing to close: the listener sends the answer and closes the connection."""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry))
            elif path in routes:
                ok, body = routes[path]()
                self._send(200 if ok else 503, "application/json", json.dumps(body).encode())
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: /metrics, /healthz, /readyz\n")

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Scrapes every few seconds would flood the log: say nothing."""

    return Handler


@dataclass
class MetricsServer:
    """The listener, serving from a thread of its own until `close`."""

    listener: Listener
    gauges: DatabaseGauges

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the one the system chose for port 0)."""
        return self.listener.port

    @property
    def evicted(self) -> int:
        """Slow connections closed so far to make room for others."""
        return self.listener.connections.evicted

    def close(self) -> None:
        """Stop serving and close the database connection."""
        self.listener.close()
        self.gauges.close()


def start(
    host: str,
    port: int,
    registry: CollectorRegistry,
    url: str,
    settings: Settings,
    role: str,
    limits: Limits | None = None,
    children: Callable[[], list[str]] | None = None,
) -> MetricsServer:
    """Serve `registry` plus the database's gauges, the exporter's identity and the probes on HOST:PORT
    (`children`: see `Probes.children`)."""
    sock = bind(host, port)  # first: an address in use fails before anything is registered
    try:
        gauges = DatabaseGauges(url, settings)
        registry.register(gauges)
        registry.register(Identity(role))
        respond = responder(_handler(registry, Probes(url, settings, role, children=children)))
        listener = Listener(sock, respond, limits or Limits(), PROBE_PATHS)
        listener.start()
    except BaseException:
        sock.close()
        raise
    return MetricsServer(listener, gauges)


def serve_here(
    host: str, port: int, url: str, settings: Settings, role: str, limits: Limits | None = None
) -> MetricsServer:
    """Count in this process and serve its metrics (a single worker, the tracker, the bounce receiver)."""
    from worker.core import metrics

    registry = CollectorRegistry(auto_describe=False)
    metrics.enable(registry)
    return start(host, port, registry, url, settings, role, limits)


def serve_children(host: str, port: int, url: str, settings: Settings, directory: str) -> MetricsServer:
    """Serve what the worker processes under this supervisor count in `directory`, summed per series,
    with the database's gauges read once here (not once per process)."""
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    children = MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    return start(host, port, registry, url, settings, WORKER, children=lambda: children_circuits(children))


def children_circuits(children: Collector) -> list[str]:
    """The roles whose `mailroom_database_circuit_open` gauge is 1 in some child still running (the
    gauge's multiprocess mode keeps the highest value of the live processes; the supervisor forgets a
    dead child's files, `worker.core.metrics.child_gone`). Only the children's files are read: not the
    database's gauges, which a probe must never wait for."""
    return sorted(
        str(sample.labels.get("role", ""))
        for family in children.collect()
        if family.name == "mailroom_database_circuit_open"
        for sample in family.samples
        if sample.value >= 1
    )
