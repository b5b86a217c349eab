"""Prometheus metrics and the health endpoints: scraped from real listeners, checked against the database."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from prometheus_client import generate_latest

from tests.cli import run
from tests.fixtures_db import restart_embedded_server
from tests.fixtures_smtp import SinkFactory
from tests.worker.helpers import add_sender, enqueue_many, statuses
from tests.worker.metrics_helpers import get, names, post, probe, start, value, wait_until
from worker.core import metrics
from worker.core.config import Settings
from worker.devtools.sink_script import RefuseShare
from worker.ops.metrics import EXACT_UP_TO, capped
from worker.ops.metrics_server import RECEIVER, TRACKER, WORKER, MetricsServer, serve_children, serve_here

ACTIVE = "SELECT count(*) FROM mailroom.email_queue WHERE status IN ('pending', 'assigned', 'unrendered')"


@pytest.fixture
def counting() -> Iterator[None]:
    """Metrics enabled by the test are disabled after it (they are a process global)."""
    yield
    metrics.disable()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bulk(db_url: str, n: int) -> None:
    statement = "COPY mailroom.email_queue (recipient_email, subject, text_body) FROM STDIN"
    with psycopg.connect(db_url) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
        for i in range(n):
            copy.write_row((f"m{i}@example.com", f"Metrics test {i}", "body"))


# -- end to end: two worker processes, one scrape -------------------------------------------------


@pytest.mark.e2e
def test_one_scrape_of_two_worker_processes_matches_the_database(
    db_url: str, cli_env: dict[str, str], smtp_sink_factory: SinkFactory
) -> None:
    sink = smtp_sink_factory(refuse_share=RefuseShare(permanent=0.1))
    add_sender(db_url, sink.port)
    _bulk(db_url, 300)
    with psycopg.connect(db_url) as conn:  # one address on the bounce list: suppressed at claim time
        conn.execute(
            "INSERT INTO mailroom.bounce_list (email, bounce_type) VALUES ('m7@example.com', 'hard')"
        )
    worker = start(
        ["worker", "--processes", "2", "--concurrency", "2", "--batch-size", "10", "--no-producers",
         "--metrics-listen", "127.0.0.1:0"],
        cli_env,
    )  # fmt: skip
    try:
        port = int(worker.wait_for(r"worker: metrics on http://127\.0\.0\.1:(\d+)").group(1))
        assert wait_until(db_url, ACTIVE, 0) == 0, worker.output[-3000:]
        status, content_type, text = get(f"http://127.0.0.1:{port}/metrics")
        ready, body = probe(f"http://127.0.0.1:{port}/readyz")
    finally:
        assert worker.stop() == 0, worker.output[-3000:]
    assert status == 200 and content_type.startswith("text/plain")
    db = statuses(db_url)
    # A 5.1.1 refusal at RCPT fails the email (status failed) and is counted as a bounce, the email's fault.
    assert db["sent"] > 0 and db["failed"] > 0 and db["suppressed"] == 1
    assert db["sent"] + db["failed"] + db["suppressed"] == 300

    # Counters and histograms of both processes, summed by the supervisor's listener.
    assert value(text, "mailroom_emails_total", outcome="sent", fault="none", sender="primary") == db["sent"]
    assert value(text, "mailroom_emails_total", outcome="bounced", fault="email") == db["failed"]
    assert value(text, "mailroom_emails_total", outcome="suppressed") == 1
    assert value(text, "mailroom_smtp_replies_total", **{"class": "2xx"}) == db["sent"]
    assert value(text, "mailroom_smtp_replies_total", **{"class": "5xx"}) == db["failed"]
    assert value(text, "mailroom_enqueue_to_accepted_seconds_count") == db["sent"]
    assert value(text, "mailroom_smtp_transaction_seconds_count") == db["sent"] + db["failed"]
    assert value(text, "mailroom_claim_size_emails_sum") == db["sent"] + db["failed"]
    assert value(text, "mailroom_lease_rescues_total") == 0

    # Gauges from the database, once per scrape (not once per process).
    for state in ("sent", "failed", "suppressed"):
        assert value(text, "mailroom_queue_emails", status=state) == db[state]
    assert value(text, "mailroom_queue_emails", status="pending") == 0
    assert value(text, "mailroom_queue_due_emails") == 0
    assert value(text, "mailroom_workers_alive") == 2
    assert value(text, "mailroom_sender_usable", sender="primary") == 1
    assert value(text, "mailroom_sender_circuit", sender="primary", state="closed") == 1
    with psycopg.connect(db_url) as conn:
        used = conn.execute("SELECT sum(sent) FROM mailroom.sender_usage").fetchone()
    assert used is not None
    assert value(text, "mailroom_sender_quota_used", sender="primary") == used[0]
    assert value(text, "mailroom_sender_quota_limit", sender="primary") == 10_000
    assert value(text, "mailroom_sender_hard_bounce_rate", sender="primary") == pytest.approx(
        db["failed"] / (db["sent"] + db["failed"])
    )
    assert [line for line in text.splitlines() if line.startswith("mailroom_workers_alive ")] == [
        "mailroom_workers_alive 2.0"
    ]
    assert value(text, "mailroom_exporter_info", role="worker") == 1
    # A tenth of the mailboxes bounced: over the 5% health holds a sender to, so the worker is not ready.
    assert ready == 503 and body["role"] == "worker"
    assert any("bounced hard" in reason for reason in body["reasons"]), body

    # Both processes sent: the figures above are the sum of two, not one process's own.
    per_process = [int(n) for n in re.findall(r"worker: sent (\d+) email\(s\)", worker.output)]
    assert len(per_process) == 2 and all(per_process) and sum(per_process) == db["sent"]


# -- health endpoints by state ------------------------------------------------------------------


@pytest.fixture
def listeners(counting: None) -> Iterator[list[MetricsServer]]:
    """Listeners a test starts, closed after it."""
    started: list[MetricsServer] = []
    yield started
    for server in started:
        server.close()


def _serve(started: list[MetricsServer], url: str, settings: Settings, role: str) -> str:
    server = serve_here("127.0.0.1", 0, url, settings, role)
    started.append(server)
    return f"http://127.0.0.1:{server.port}"


def test_probes_answer_200_when_the_database_is_reachable_and_nothing_is_wrong(
    db_url: str, settings: Settings, listeners: list[MetricsServer]
) -> None:
    base = _serve(listeners, db_url, settings, WORKER)
    assert probe(f"{base}/healthz") == (200, {"ok": True, "role": "worker", "reasons": []})
    status, body = probe(f"{base}/readyz")
    assert status == 200 and body["ok"] is True and body["reasons"] == []
    assert get(f"{base}/nothing")[0] == 404


def test_a_database_down_fails_both_probes_and_the_scrape_says_so(
    settings: Settings, listeners: list[MetricsServer]
) -> None:
    down = f"postgresql://mailroom@127.0.0.1:{_free_port()}/mailroom"
    base = _serve(listeners, down, settings, WORKER)
    for path in ("/healthz", "/readyz"):
        status, body = probe(base + path)
        assert status == 503 and body["ok"] is False
        assert body["reasons"][0].startswith("database unreachable")
        # Whoever reaches this port learns nothing of the database's address or role.
        assert "127.0.0.1" not in str(body) and "mailroom@" not in str(body) and "port" not in str(body)
    status, _, text = get(f"{base}/metrics")
    assert status == 200  # the scrape still answers: the figure says the database is gone
    assert value(text, "mailroom_database_up") == 0
    assert "mailroom_queue_emails" not in names(text)


# A worker process under a supervisor, as far as its database circuit goes: it counts into the
# supervisor's directory, meets a read-only server three times (its circuit opens), and closes the
# circuit when told. Each step is said on stdout.
_CHILD = """
import sys
from psycopg import errors
from worker.core import metrics
from worker.core.failover import DatabaseCircuit

metrics.enable_for_supervisor(sys.argv[1])
circuit = DatabaseCircuit("worker", threshold=2, base_seconds=0.0)
for _ in range(3):
    circuit.failed(errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"))
print("open", flush=True)
sys.stdin.readline()
circuit.succeeded()
print("closed", flush=True)
if sys.stdin.readline() == "open again\\n":
    for _ in range(3):
        circuit.failed(errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"))
    print("open", flush=True)
    sys.stdin.readline()
"""


def test_a_supervisor_is_unready_while_a_worker_process_under_it_has_its_database_circuit_open(
    db_url: str, settings: Settings, tmp_path: Path
) -> None:
    # The circuits are the children's: the supervisor's own probe connects anew and could not tell.
    directory = tmp_path / "metrics"
    directory.mkdir()
    server = serve_children("127.0.0.1", 0, db_url, settings, str(directory))
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(directory)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        base = f"http://127.0.0.1:{server.port}"
        assert child.stdout.readline() == "open\n"
        status, body = probe(f"{base}/readyz")
        assert status == 503 and body["ok"] is False, body
        assert body["reasons"][0].startswith(
            "a worker process under this supervisor has found the database"
        ), body
        assert probe(f"{base}/healthz")[0] == 200  # alive: restarting it would not help
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "closed\n"
        assert probe(f"{base}/readyz")[0] == 200
        # Killed with its circuit open: its value stays until the supervisor forgets the dead child.
        child.stdin.write("open again\n")
        child.stdin.flush()
        assert child.stdout.readline() == "open\n"
        child.kill()
        child.wait(timeout=30)
        assert probe(f"{base}/readyz")[0] == 503
        metrics.child_gone(str(directory), child.pid)  # what the supervisor does when it reaps it
        assert probe(f"{base}/readyz")[0] == 200
    finally:
        child.stdin.close()
        child.stdout.close()
        child.wait(timeout=30)
        server.close()


def test_no_usable_sender_with_email_due_makes_a_worker_unready_but_not_the_tracker(
    db_url: str, settings: Settings, listeners: list[MetricsServer]
) -> None:
    enqueue_many(db_url, 3)
    with psycopg.connect(db_url) as conn:  # due for long past the health grace period
        conn.execute("UPDATE mailroom.email_queue SET scheduled_for = now() - interval '2 hours'")
    worker = _serve(listeners, db_url, settings, WORKER)
    assert probe(f"{worker}/healthz")[0] == 200  # alive: restarting it would not help
    status, body = probe(f"{worker}/readyz")
    assert status == 503 and body["ok"] is False
    assert any("no sender can send them" in reason for reason in body["reasons"]), body
    tracker = _serve(listeners, db_url, settings, TRACKER)
    assert probe(f"{tracker}/readyz")[0] == 200  # the tracker can still do its work
    _, _, text = get(f"{worker}/metrics")
    assert value(text, "mailroom_queue_due_emails") == 3
    assert value(text, "mailroom_queue_oldest_due_seconds") >= 7200
    assert value(text, "mailroom_workers_alive") == 0


def test_a_schema_of_another_version_makes_every_role_unready(
    db_url: str, settings: Settings, listeners: list[MetricsServer]
) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE mailroom.alembic_version SET version_num = '0001'")
    for role in (WORKER, TRACKER, RECEIVER):
        base = _serve(listeners, db_url, settings, role)
        status, body = probe(f"{base}/readyz")
        assert status == 503 and "schema is at 0001" in body["reasons"][0], body
        assert probe(f"{base}/healthz")[0] == 200


def test_an_open_database_circuit_makes_the_process_unready_and_the_scrape_counts_why(
    db_url: str, settings: Settings, listeners: list[MetricsServer]
) -> None:
    from psycopg import errors

    from worker.core.failover import DatabaseCircuit

    base = _serve(listeners, db_url, settings, TRACKER)  # counting in this process from now on
    assert probe(f"{base}/readyz")[0] == 200
    # This process met a demoted primary again and again (its own probe, connecting anew, reaches one
    # that takes writes): it waits before each try, and says so.
    circuit = DatabaseCircuit("tracker", threshold=2, base_seconds=0.0)
    for _ in range(3):
        circuit.failed(errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"))
    status, body = probe(f"{base}/readyz")
    assert status == 503 and body["ok"] is False
    assert body["reasons"][0].startswith("this tracker process has found the database unavailable for "), body
    assert "(read-only: cannot execute INSERT in a read-only transaction); next try in " in body["reasons"][0]
    assert probe(f"{base}/healthz")[0] == 200  # alive: restarting it would not help
    _, _, text = get(f"{base}/metrics")
    assert value(text, "mailroom_database_unavailable_total", role="tracker", reason="read-only") == 3
    assert value(text, "mailroom_database_circuit_open", role="tracker") == 1
    circuit.succeeded()
    assert probe(f"{base}/readyz")[0] == 200
    assert value(get(f"{base}/metrics")[2], "mailroom_database_circuit_open", role="tracker") == 0


def test_database_gauges_are_read_once_per_cache_period(
    db_url: str, settings: Settings, listeners: list[MetricsServer]
) -> None:
    base = _serve(listeners, db_url, settings, TRACKER)
    first = get(f"{base}/metrics")[2]
    enqueue_many(db_url, 2)
    # Within the cache period a second scrape (another Prometheus) costs no read and sees the same.
    assert value(get(f"{base}/metrics")[2], "mailroom_queue_emails", status="pending") == value(
        first, "mailroom_queue_emails", status="pending"
    )
    listeners[0].gauges.cache_seconds = 0.0
    assert value(get(f"{base}/metrics")[2], "mailroom_queue_emails", status="pending") == 2


@pytest.mark.skipif(
    os.environ.get("MAILROOM_TEST_DATABASE_URL") is not None,
    reason="restarts the embedded server; an external one is not ours to restart",
)
def test_a_database_restart_between_scrapes_costs_no_scrape(
    db_url: str, pg_admin_url: str, settings: Settings, listeners: list[MetricsServer]
) -> None:
    base = _serve(listeners, db_url, settings, TRACKER)
    listeners[0].gauges.cache_seconds = 0.0
    assert value(get(f"{base}/metrics")[2], "mailroom_database_up") == 1
    restart_embedded_server(pg_admin_url)  # the listener's kept connection breaks
    assert value(get(f"{base}/metrics")[2], "mailroom_database_up") == 1


@pytest.mark.e2e
def test_a_single_worker_serves_its_own_counts(
    db_url: str, cli_env: dict[str, str], smtp_sink_factory: SinkFactory
) -> None:
    sink = smtp_sink_factory()
    add_sender(db_url, sink.port)
    _bulk(db_url, 20)
    worker = start(["worker", "--no-producers", "--metrics-listen", "127.0.0.1:0"], cli_env)
    try:
        port = int(worker.wait_for(r"worker: metrics on http://127\.0\.0\.1:(\d+)").group(1))
        assert wait_until(db_url, ACTIVE, 0) == 0, worker.output[-3000:]
        _, _, text = get(f"http://127.0.0.1:{port}/metrics")
    finally:
        assert worker.stop() == 0, worker.output[-3000:]
    assert statuses(db_url) == {"sent": 20}
    assert value(text, "mailroom_emails_total", outcome="sent") == 20
    assert value(text, "mailroom_queue_emails", status="sent") == 20
    assert value(text, "mailroom_workers_alive") == 1


# -- the tracker and the bounce receiver ----------------------------------------------------------


@pytest.mark.e2e
def test_the_public_tracker_port_does_not_serve_metrics_and_webhooks_are_counted(
    cli_env: dict[str, str],
) -> None:
    public = _free_port()
    tracker = start(["tracker", "--port", str(public), "--metrics-listen", "127.0.0.1:0"], cli_env)
    try:
        port = int(tracker.wait_for(r"tracker: metrics on 127\.0\.0\.1:(\d+)").group(1))
        tracker.wait_for(r"tracker listening on http://")  # logged once bound
        # The public port keeps only its own /healthz (for the load balancer in front of it).
        for path in ("/metrics", "/readyz"):
            assert get(f"http://127.0.0.1:{public}{path}")[0] == 404
        # No webhook secret is configured: the generic webhook answers 404, counted as not configured.
        assert post(f"http://127.0.0.1:{public}/webhooks/bounces", b"{}") == 404
        status, _, text = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        assert value(text, "mailroom_exporter_info", role="tracker") == 1
        assert (
            value(text, "mailroom_webhook_requests_total", provider="generic", result="not_configured") == 1
        )
        assert probe(f"http://127.0.0.1:{port}/readyz")[0] == 200
    finally:
        tracker.stop()


@pytest.mark.parametrize(
    "args",
    [
        ["tracker", "--port", "18025", "--metrics-listen", "127.0.0.1:18025"],
        ["tracker", "--host", "127.0.0.1", "--port", "18025", "--metrics-listen", "0.0.0.0:18025"],
        ["bounces", "receive", "--listen", "127.0.0.1:12525", "--domain", "b.example.org",
         "--metrics-listen", "[::]:12525"],
    ],
)  # fmt: skip
def test_metrics_on_the_public_port_are_refused(
    args: list[str], cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, *args)
    assert code == 2
    assert "is the public address" in err


def test_reports_are_counted_by_kind_and_outcome_and_a_failure_as_an_error(counting: None) -> None:
    from prometheus_client import CollectorRegistry

    from worker.producers.bounces.counting import counted
    from worker.producers.bounces.effects import Applied
    from worker.producers.bounces.intake import Outcome

    registry = CollectorRegistry()
    metrics.enable(registry)
    applied = (Applied("hard", "a@example.org", True), Applied("complaint", "b@example.org", True))
    answers = iter([Outcome("recorded", "two", applied), Outcome("quarantined", "forged token")])

    def process(raw: bytes, recipients: list[str], client: str) -> Outcome:
        answer = next(answers, None)
        if answer is None:
            raise RuntimeError("the database refused it")
        return answer

    handler = counted(process)
    for _ in range(2):
        handler(b"message", ["b+token@bounces.example.org"], "192.0.2.1")
    with pytest.raises(RuntimeError):
        handler(b"message", [], "192.0.2.1")
    text = generate_latest(registry).decode()
    assert value(text, "mailroom_reports_total", kind="hard", outcome="recorded") == 1
    assert value(text, "mailroom_reports_total", kind="complaint", outcome="recorded") == 1
    assert value(text, "mailroom_reports_total", kind="none", outcome="quarantined") == 1
    assert value(text, "mailroom_reports_total", kind="none", outcome="error") == 1


def test_webhook_results_by_status() -> None:
    from worker.tracking.webhook_counting import result

    assert [result(s) for s in (200, 202, 401, 403, 404, 400, 413, 500, 503)] == [
        "accepted", "accepted", "denied", "denied", "not_configured", "refused", "refused", "error", "error",
    ]  # fmt: skip


def test_the_listener_answers_only_get_and_never_echoes_the_request(
    db_url: str, settings: Settings, listeners: list[MetricsServer]
) -> None:
    base = _serve(listeners, db_url, settings, RECEIVER)
    assert post(f"{base}/metrics", b"x") == 501
    status, _, body = get(f"{base}/%3Cscript%3E?x=%3Cscript%3E")
    assert status == 404 and "script" not in body


async def test_lease_rescues_claims_and_expiry_are_counted(db_url: str, counting: None) -> None:
    from prometheus_client import CollectorRegistry
    from psycopg_pool import AsyncConnectionPool

    from worker.engine import claim as claiming
    from worker.engine import leases

    registry = CollectorRegistry()
    metrics.enable(registry)
    sender = add_sender(db_url, 2525)
    enqueue_many(db_url, 4)
    async with AsyncConnectionPool(db_url, open=False, kwargs={"autocommit": True}) as pool:
        await pool.open()
        await claiming.take(pool, claiming.Lease("dead:1", 60), sender, 3)  # a worker that then died
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("UPDATE mailroom.claims SET expires_at = now() - interval '1 second'")
        assert await leases.expire_pending(pool, 0.0) == 1  # the one not claimed: past a lifetime of 0 s
        assert len(await leases.rescue_once(pool, 60)) == 3
    text = generate_latest(registry).decode()
    assert value(text, "mailroom_lease_rescues_total") == 3
    assert value(text, "mailroom_emails_total", outcome="expired", fault="sender") == 1


@pytest.mark.parametrize(
    "command",
    [["worker", "--drain"], ["worker", "--drain", "--processes", "2"], ["tracker", "--port", "0"]],
)
def test_a_metrics_address_in_use_is_a_usage_error_naming_metrics_listen(
    command: list[str], cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        code, _, err = run(capsys, *command, "--metrics-listen", f"127.0.0.1:{taken}")
    assert code == 2
    # The option to change is the one that named the address (the worker has no --port at all).
    assert f"'--metrics-listen': 127.0.0.1:{taken} is already in use" in err, err
    assert "--port" not in err


# -- figures without a database -------------------------------------------------------------------


def test_counting_while_off_does_nothing() -> None:
    metrics.disable()
    metrics.count_email("primary", "sent", "none")
    metrics.count_webhook("ses", "accepted")
    assert not metrics.enabled()


def test_reply_classes() -> None:
    assert [metrics.reply_class(c) for c in (250, 421, 550, None, 999, 100)] == [
        "2xx",
        "4xx",
        "5xx",
        "none",
        "none",
        "none",
    ]


def test_a_status_count_is_exact_below_the_cap_and_the_estimate_above() -> None:
    assert capped(3, 1_000_000.0) == 3
    assert capped(EXACT_UP_TO, 1_000_000.0) == 1_000_000
    assert capped(EXACT_UP_TO, -1.0) == EXACT_UP_TO  # never analysed: the cap, not a negative estimate
    assert capped(EXACT_UP_TO, None) == EXACT_UP_TO


def test_liveness_is_read_from_the_database_once_per_cache_period(db_url: str, settings: Settings) -> None:
    from worker.ops.metrics_server import Probes

    probes = Probes(db_url, settings, TRACKER, cache_seconds=3600)
    checks: list[int] = []
    real = probes._check_alive

    def counted() -> tuple[bool, dict[str, object]]:
        checks.append(1)
        return real()

    probes._check_alive = counted  # type: ignore[method-assign]
    assert all(probes.alive()[0] for _ in range(20))
    assert checks == [1]
