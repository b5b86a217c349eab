"""`mailroom webhooks` as an operator runs it, and what health and metrics say of endpoints."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.cli import run
from worker.core.config import Settings
from worker.ops.health import check_health
from worker.ops.metrics import DatabaseGauges


def _endpoints(db_url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(
            "SELECT id, url, status, owner_role, events FROM mailroom.webhook_endpoints"
        ).fetchall()


@pytest.mark.usefixtures("cli_env")
def test_add_list_pause_resume_replay_and_remove(capsys: pytest.CaptureFixture[str], db_url: str) -> None:
    code, out, err = run(capsys, "webhooks", "add", "http://127.0.0.1:9/hooks", "--events", "sent")
    assert code == 2 and "loopback" in err and "--allow-private" in err and _endpoints(db_url) == []
    code, out, err = run(capsys, "webhooks", "add", "https://app.example.com/h", "--events", "sent,delivered")
    assert code == 2 and "'delivered' is no event" in err and _endpoints(db_url) == []
    code, out, err = run(
        capsys, "webhooks", "add", "https://app.example.com/h", "--events", "sent,bounced,signed"
    )
    assert code == 0, err
    secret = out.split("secret (shown this once; the receiver verifies each POST with it): ")[1].strip()
    assert secret.startswith("whsec_")
    with psycopg.connect(db_url) as conn:
        stored = conn.execute("SELECT secret_encrypted FROM mailroom.webhook_endpoints").fetchone()
    assert stored is not None and secret.encode() not in bytes(stored[0])  # encrypted at rest
    assert _endpoints(db_url) == [
        (1, "https://app.example.com/h", "active", None, ["email.sent", "email.bounced", "document.signed"])
    ]
    code, out, _ = run(capsys, "webhooks", "list")
    assert code == 0 and "https://app.example.com/h" in out and "sent,bounced,signed" in out
    assert secret not in out  # shown once, never again
    code, out, _ = run(capsys, "webhooks", "list", "--json")
    assert json.loads(out)[0]["status"] == "active" and secret not in out
    assert run(capsys, "webhooks", "pause", "1", "--reason", "deploying the receiver")[0] == 0
    assert _endpoints(db_url)[0][2] == "paused"
    assert run(capsys, "webhooks", "resume", "1")[0] == 0 and _endpoints(db_url)[0][2] == "active"
    assert run(capsys, "webhooks", "pause", "7")[0] == 2
    code, _, err = run(capsys, "webhooks", "replay", "--since", "yesterday")
    assert code == 2 and "ISO 8601" in err
    code, _, err = run(capsys, "webhooks", "replay", "--since", "2026-01-01", "--endpoint", "9")
    assert code == 2 and "no webhook endpoint 9" in err
    code, out, _ = run(capsys, "webhooks", "replay", "--since", "2026-01-01")
    assert code == 0 and "0 deliveries due again to 1 endpoint(s)" in out
    assert run(capsys, "webhooks", "remove", "1")[0] == 0 and _endpoints(db_url) == []
    with psycopg.connect(db_url) as conn:
        actions = [r[0] for r in conn.execute("SELECT action FROM mailroom.audit_log ORDER BY id").fetchall()]
    assert [a for a in actions if a.startswith("webhooks.")] == [
        "webhooks.add", "webhooks.pause", "webhooks.resume", "webhooks.replay", "webhooks.remove"
    ]  # fmt: skip


@pytest.mark.usefixtures("cli_env")
def test_health_warns_of_an_endpoint_failing_for_an_hour_and_metrics_show_it(
    capsys: pytest.CaptureFixture[str], db_url: str, settings: Settings
) -> None:
    assert run(capsys, "webhooks", "add", "https://app.example.com/h", "--events", "all")[0] == 0
    assert run(capsys, "webhooks", "add", "https://app.example.com/g", "--events", "all")[0] == 0
    assert run(capsys, "webhooks", "add", "https://app.example.com/p", "--events", "all")[0] == 0
    assert run(capsys, "webhooks", "pause", "3", "--reason", "receiver moving")[0] == 0
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "UPDATE mailroom.webhook_endpoints SET failures = 40, failing_since = now() - interval '2 hours',"
            " last_error = 'HTTP 503' WHERE id = 1"
        )
        conn.execute(
            "UPDATE mailroom.webhook_endpoints SET status = 'disabled', status_reason = 'gone' WHERE id = 2"
        )
        conn.execute(
            "INSERT INTO mailroom.webhook_events (type, email_id) VALUES ('email.sent', NULL)"
        )  # a delivery for each endpoint but the disabled one: endpoint 3's waits while it is paused
        report = check_health(conn, settings)
    kinds = {f.kind: f for f in report.findings}
    assert "failed for 2.0 h" in kinds["webhook_failing"].text and "HTTP 503" in kinds["webhook_failing"].text
    assert kinds["webhook_disabled"].advice.startswith("mailroom webhooks resume 2")
    assert "paused (receiver moving); 1 events wait" in kinds["webhook_paused"].text
    assert report.ok  # warnings: email is not held up by a receiver
    gauges = DatabaseGauges(db_url, settings)
    try:
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for m in gauges.collect() for s in m.samples
        }
    finally:
        gauges.close()
    assert samples[("mailroom_webhook_failures", (("endpoint", "1"),))] == 40
    assert samples[("mailroom_webhook_endpoint_active", (("endpoint", "2"),))] == 0
