"""OpenTelemetry traces: one trace from an order event to the relay's reply, across processes; stored
trace context checked by the database and again by the worker; JSON logs that carry the ids."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.producers.bounces.corpus import FIXTURE_KEY, load, readdress, sent_email
from tests.scripted_smtp import ScriptedServer
from tests.worker.helpers import add_sender, run_until_drained, statuses
from tests.worker.tracing_helpers import Collector, Span, by_name, from_sdk, in_memory_tracing
from worker.core import tracing
from worker.core.config import Settings
from worker.core.logs import JsonFormatter
from worker.devtools.sink import RunningSink
from worker.producers.bounces import ingest
from worker.producers.inbox import EventTrace, event_trace, ingest_event

ORDER = {
    "customer_email": "alice.customer@example.com",
    "customer_name": "Alice Customer",
    "order_number": "A-1001",
    "items": [{"name": "Teapot", "quantity": 1, "unit_price": "25.00"}],
    "total": "25.00",
    "currency": "EUR",
}
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _no_address(spans: list[Span]) -> None:
    for span in spans:
        for key, value in span.attributes.items():
            assert "@" not in str(value), (span.name, key, value)
            assert "alice" not in str(value).lower(), (span.name, key, value)


def _parent(spans: list[Span], name: str, child: Span) -> Span:
    [parent] = [s for s in spans if s.span_id == child.parent_id]
    assert parent.name == name, (child.name, parent.name)
    return parent


@pytest.mark.e2e
def test_an_order_event_and_its_delivery_by_another_process_are_one_trace(
    db_url: str, cli_env: dict[str, str], smtp_sink: RunningSink, settings: Settings
) -> None:
    add_sender(db_url, smtp_sink.port)
    with in_memory_tracing() as exporter:
        # The shop's own span: the order event carries its context, as a message bus would.
        with tracing.span("shop.checkout"):
            context = tracing.current_context()
        assert context is not None
        with psycopg.connect(db_url) as conn:
            got = ingest_event(
                conn,
                "msg-1",
                "shop",
                "order_placed",
                ORDER,
                settings=settings,
                trace=EventTrace(traceparent=context[0], correlation_id="order-A-1001"),
            )
    shop_side = from_sdk(exporter)
    [shop] = by_name(shop_side, "shop.checkout")
    [inbox] = by_name(shop_side, "mailroom.inbox.event")
    [enqueue] = by_name(shop_side, "mailroom.enqueue")
    assert inbox.parent_id == shop.span_id and inbox.trace_id == shop.trace_id
    assert enqueue.parent_id == inbox.span_id
    assert inbox.attributes["mailroom.email.id"] == got.email_id
    with psycopg.connect(db_url) as conn:
        stored = conn.execute(
            "SELECT traceparent, correlation_id FROM mailroom.email_queue WHERE id = %s", (got.email_id,)
        ).fetchone()
    assert stored == (f"00-{shop.trace_id}-{enqueue.span_id}-01", "order-A-1001")

    # The worker is another process: its spans reach a collector in this one over OTLP/HTTP.
    with Collector() as collector:
        env = {
            **cli_env,
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_SERVICE_NAME": "test-worker",
        }
        script = Path(sys.executable).with_name("mailroom")
        done = subprocess.run(
            [str(script), "worker", "--drain", "--concurrency", "1"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert statuses(db_url) == {"sent": 1}
    worker_side = collector.spans
    [deliver] = by_name(worker_side, "mailroom.deliver")
    assert deliver.trace_id == shop.trace_id
    assert deliver.parent_id == enqueue.span_id  # across processes, through the database
    assert deliver.attributes["mailroom.email.id"] == got.email_id
    assert deliver.attributes["mailroom.correlation_id"] == "order-A-1001"
    assert deliver.attributes["mailroom.outcome"] == "sent"
    [send] = by_name(worker_side, "mailroom.send")
    assert _parent(worker_side, "mailroom.deliver", send) and send.attributes["smtp.reply.code"] == 250
    [record] = by_name(worker_side, "mailroom.record")
    _parent(worker_side, "mailroom.deliver", record)
    [build] = by_name(worker_side, "mailroom.message.build")
    assert build.trace_id == shop.trace_id and build.parent_id == enqueue.span_id
    claims = [c for c in by_name(worker_side, "mailroom.claim") if c.attributes["mailroom.claim.size"] == 1]
    assert [c.span_id for c in claims] == list(deliver.links)
    assert claims[0].trace_id != shop.trace_id  # a claim serves many traces: linked, not a parent
    _no_address(shop_side + worker_side)


def test_the_python_api_enqueues_inside_the_applications_trace(db_url: str) -> None:
    import mailroom

    request = mailroom.EmailRequest(to="c@example.com", subject="Hi", text="Body")
    with psycopg.connect(db_url) as conn:
        untraced = mailroom.enqueue(conn, request)
        with in_memory_tracing() as exporter, tracing.span("app.signup"):
            traced = mailroom.enqueue(conn, request)
            [*many] = mailroom.enqueue_many(conn, [request, request])
        after = mailroom.enqueue(conn, request)  # the trace's settings do not outlive its enqueue
        stored: dict[int, Any] = dict(
            conn.execute("SELECT id, traceparent FROM mailroom.email_queue").fetchall()
        )
    spans = from_sdk(exporter)
    [app] = by_name(spans, "app.signup")
    enqueues = by_name(spans, "mailroom.enqueue")
    assert [e.parent_id for e in enqueues] == [app.span_id, app.span_id]
    assert stored[untraced] is None and stored[after] is None
    # The flags are the span's (sampled, and the SDK's random trace id flag of W3C Trace Context 2).
    assert stored[traced][:-3] == f"00-{app.trace_id}-{enqueues[0].span_id}"
    assert {stored[i][:-3] for i in many} == {f"00-{app.trace_id}-{enqueues[1].span_id}"}


def test_sql_enqueue_takes_the_trace_context_of_its_transaction(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "SELECT set_config('mailroom.traceparent', %s, true), set_config('mailroom.tracestate', 'k=v', true),"
            " set_config('mailroom.correlation_id', 'order-7', true)",
            (TRACEPARENT,),
        )
        row = conn.execute("SELECT mailroom.enqueue(ARRAY['a@example.com'], 'Hi', 'Body')").fetchone()
        assert row is not None
        stored = conn.execute(
            "SELECT traceparent, tracestate, correlation_id FROM mailroom.email_queue WHERE id = %s",
            (row[0],),
        ).fetchone()
    assert stored == (TRACEPARENT, "k=v", "order-7")


@pytest.mark.parametrize(
    ("setting", "value", "constraint"),
    [
        ("traceparent", "garbage", "email_queue_traceparent_format"),
        ("traceparent", "00-" + "0" * 32 + "-b7ad6b7169203331-01", "email_queue_traceparent_format"),
        (
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-" + "0" * 16 + "-01",
            "email_queue_traceparent_format",
        ),
        ("traceparent", TRACEPARENT.upper(), "email_queue_traceparent_format"),
        ("traceparent", TRACEPARENT + "\n", "email_queue_traceparent_format"),
        ("traceparent", "ff" + TRACEPARENT[2:], "email_queue_traceparent_format"),
        ("tracestate", "k=v", "email_queue_tracestate_format"),  # no traceparent beside it
        ("correlation_id", "order\r\nX-Injected: 1", "email_queue_correlation_id_format"),
        ("correlation_id", "x" * 256, "email_queue_correlation_id_format"),
    ],
)
def test_sql_enqueue_refuses_a_malformed_trace_context(
    db_url: str, setting: str, value: str, constraint: str
) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute("SELECT set_config('mailroom.' || %s, %s, true)", (setting, value))
        with pytest.raises(psycopg.errors.CheckViolation) as refused:
            conn.execute("SELECT mailroom.enqueue(ARRAY['a@example.com'], 'Hi', 'Body')")
    assert refused.value.diag.constraint_name == constraint


HOSTILE = [
    ("x" * 5000, None, "order\nX-Evil: 1"),
    ("00-" + "0" * 32 + "-b7ad6b7169203331-01", "k=v", None),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "\x01\x02" + "=" * 600, None),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-zz", None, "ok-id"),
]


def test_the_worker_ignores_a_stored_trace_context_it_cannot_read(
    db_url: str, settings: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    with psycopg.connect(db_url) as conn:
        # Written around the checks (a table owner can drop them): the worker must still deliver.
        conn.execute(
            "ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_traceparent_format,"
            " DROP CONSTRAINT email_queue_tracestate_format, DROP CONSTRAINT email_queue_correlation_id_format"
        )
        for traceparent, tracestate, correlation_id in HOSTILE:
            conn.execute(
                "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, traceparent, tracestate,"
                " correlation_id) VALUES ('b@example.com', 'Hi', 'Body', %s, %s, %s)",
                (traceparent, tracestate, correlation_id),
            )
    with in_memory_tracing() as exporter:
        sent = asyncio.run(run_until_drained(db_url, settings))
    assert sent == len(HOSTILE)
    delivered = by_name(from_sdk(exporter), "mailroom.deliver")
    assert len(delivered) == len(HOSTILE)
    # The readable one continues its trace (the malformed ones start their own).
    assert [d.parent_id for d in delivered if d.parent_id is not None] == ["b7ad6b7169203331"]
    correlations = {d.attributes.get("mailroom.correlation_id") for d in delivered}
    assert correlations == {None, "ok-id"}  # the one with a line break is not carried into logs or spans


def test_a_bounce_intake_is_a_span_that_names_no_address(db_url: str) -> None:
    unknown = "no-such-user@mta.example.net"
    email = sent_email(db_url, unknown)
    raw = readdress(load("postfix-unknown-user.eml"), email["id"], unknown, FIXTURE_KEY)
    with psycopg.connect(db_url, autocommit=True) as auto, in_memory_tracing() as exporter:
        assert ingest(auto, raw, FIXTURE_KEY).verdict == "recorded"
        assert ingest(auto, b"not a report at all", FIXTURE_KEY).verdict == "quarantined"
    spans = by_name(from_sdk(exporter), "mailroom.bounce.intake")
    assert [s.attributes["mailroom.report.verdict"] for s in spans] == ["recorded", "quarantined"]
    assert spans[0].attributes["mailroom.report.kinds"] == "hard"
    assert spans[0].attributes["mailroom.report.applied"] == 1
    _no_address(spans)


def test_an_event_line_with_a_malformed_traceparent_starts_a_new_trace() -> None:
    assert event_trace({"traceparent": "not-a-traceparent", "correlation_id": "c-1"}) == EventTrace(
        correlation_id="c-1"
    )
    assert event_trace({"traceparent": TRACEPARENT, "tracestate": 7}) == EventTrace(TRACEPARENT)
    with pytest.raises(ValueError, match="correlation_id"):
        event_trace({"correlation_id": "a\nb"})


def test_json_log_lines_carry_the_email_correlation_and_trace_ids() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("mailroom.worker", logging.INFO, __file__, 1, "working", None, None)
    assert set(json.loads(formatter.format(record))) == {"time", "level", "logger", "message"}
    with in_memory_tracing(), tracing.span("mailroom.deliver") as span, tracing.about_email(42, "order-9"):
        line: dict[str, Any] = json.loads(formatter.format(record))
        context = span.get_span_context()
    assert line["email_id"] == 42 and line["correlation_id"] == "order-9"
    assert line["trace_id"] == f"{context.trace_id:032x}" and line["span_id"] == f"{context.span_id:016x}"


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


async def test_a_workers_log_lines_about_an_email_carry_its_ids(db_url: str, settings: Settings) -> None:
    server = await ScriptedServer({"body": "451 4.3.0 try again later, b@example.com"}).start()
    try:
        add_sender(db_url, server.port)
        with psycopg.connect(db_url) as conn:
            conn.execute(
                "INSERT INTO mailroom.email_queue (recipient_email, subject, text_body, traceparent, correlation_id)"
                " VALUES ('b@example.com', 'Hi', 'Body', %s, 'order-77')",
                (TRACEPARENT,),
            )
        handler = _Lines()
        logging.getLogger().addHandler(handler)
        try:
            with in_memory_tracing():
                await run_until_drained(db_url, settings)
        finally:
            logging.getLogger().removeHandler(handler)
    finally:
        await server.stop()
    [failed] = [line for line in handler.lines if line.get("event") == "attempt_failed"]
    assert failed["correlation_id"] == "order-77"
    assert failed["trace_id"] == TRACEPARENT[3:35]  # the enqueuing code's trace, from the stored context
    assert isinstance(failed["email_id"], int) and failed["recipient"] != "b@example.com"


def test_tracing_is_on_only_when_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_SDK_DISABLED",
        "MAILROOM_TRACING",
        "OTEL_TRACES_EXPORTER",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert not tracing.wanted()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    assert tracing.wanted()
    monkeypatch.setenv("MAILROOM_TRACING", "false")
    assert not tracing.wanted()
    monkeypatch.setenv("MAILROOM_TRACING", "true")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not tracing.wanted()
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    monkeypatch.delenv("MAILROOM_TRACING")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert not tracing.wanted()


def test_without_tracing_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys, mailroom, worker.engine.delivery, worker.producers.inbox, worker.core.logs\n"
        "from worker.core import tracing\n"
        "with tracing.span('x') as s: assert s is None\n"
        "assert tracing.current_context() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
