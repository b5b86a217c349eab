"""Health: backlog, oldest pending email and sending silence, each against its threshold."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue
from worker.ops.health import check_health


@pytest.fixture(autouse=True)
def sender_and_worker(conn: psycopg.Connection[Any]) -> None:
    """A usable sender and a live worker: what the queue checks below take for granted."""
    conn.execute(
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security, daily_limit)"
        " VALUES ('main', 'noreply@example.com', 'localhost', 25, 'none', 1000)"
    )
    conn.execute("INSERT INTO mailroom.workers (name) VALUES ('host:1')")
    conn.commit()


def pending(
    conn: psycopg.Connection[Any], settings: Settings, n: int, *, waited: str = "0 seconds"
) -> list[int]:
    ids = [
        enqueue(conn, EmailRequest(to=f"h{i}@example.com", subject="Hi", text="x"), settings=settings)
        for i in range(n)
    ]
    conn.execute(
        "UPDATE mailroom.email_queue SET scheduled_for = now() - %s::interval WHERE id = ANY(%s)",
        (waited, ids),
    )
    conn.commit()
    return ids


def sent(conn: psycopg.Connection[Any], settings: Settings, ago: str) -> None:
    [email_id] = pending(conn, settings, 1)
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 't', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 hour' WHERE id = %s",
        (email_id,),
    )
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'sent', sent_at = now() - %s::interval WHERE id = %s",
        (ago, email_id),
    )
    conn.commit()


def test_empty_queue_is_healthy(conn: psycopg.Connection[Any], settings: Settings) -> None:
    report = check_health(conn, settings)
    assert report.ok and report.pending == 0 and report.last_sent_at is None


def test_backlog_over_the_threshold_is_unhealthy(conn: psycopg.Connection[Any], settings: Settings) -> None:
    sent(conn, settings, "1 minute")
    pending(conn, settings, 4)
    assert check_health(conn, replace(settings, health_max_pending=4)).ok
    report = check_health(conn, replace(settings, health_max_pending=3))
    assert report.reasons == ["4 emails pending, more than the threshold of 3 (MAILROOM_HEALTH_MAX_PENDING)"]


def test_email_waiting_over_an_hour_is_unhealthy(conn: psycopg.Connection[Any], settings: Settings) -> None:
    sent(conn, settings, "1 minute")
    pending(conn, settings, 1, waited="59 minutes")
    assert check_health(conn, settings).ok
    pending(conn, settings, 1, waited="61 minutes")
    report = check_health(conn, settings)
    assert len(report.reasons) == 1 and "oldest pending email has waited 1.0 h" in report.reasons[0]
    assert report.oldest_pending_seconds is not None and report.oldest_pending_seconds > 3600


def test_silence_while_email_is_pending_is_unhealthy(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    sent(conn, settings, "20 minutes")
    assert check_health(conn, settings).ok  # nothing to send: silence is fine
    [later] = pending(conn, settings, 1)
    conn.execute(
        "UPDATE mailroom.email_queue SET scheduled_for = now() + interval '1 day' WHERE id = %s", (later,)
    )
    conn.commit()
    assert check_health(conn, settings).ok  # scheduled for tomorrow: not pending yet
    pending(conn, settings, 1, waited="2 minutes")
    report = check_health(conn, settings)
    assert len(report.reasons) == 1 and report.reasons[0].startswith(
        "nothing was sent in 20 min while 1 emails are pending, some for over 1 min"
    )
    sent(conn, settings, "5 minutes")
    assert check_health(conn, settings).ok


def test_fresh_email_after_a_quiet_spell_gets_the_grace_before_it_counts(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    sent(conn, settings, "3 hours")
    [fresh] = pending(conn, settings, 1, waited="10 seconds")
    report = check_health(conn, settings)
    assert report.ok and report.pending == 1 and report.thresholds["idle_grace_seconds"] == 60
    # Past the grace (the database clock moved on), or with a shorter grace, the silence counts.
    db_now = conn.execute("SELECT now() AS now").fetchone()
    assert db_now is not None
    later = check_health(conn, settings, now=db_now["now"] + timedelta(seconds=55))
    assert len(later.reasons) == 1 and later.reasons[0].startswith("nothing was sent in 3.0 h")
    assert not check_health(conn, replace(settings, health_idle_grace_seconds=5)).ok
    # An email in a worker's hands for longer than the grace counts too; a fresh claim does not.
    conn.execute(
        "UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 't', lease_token = gen_random_uuid(),"
        " lease_expires_at = now() + interval '1 hour' WHERE id = %s",
        (fresh,),
    )
    conn.commit()
    assert check_health(conn, settings).ok
    later = check_health(conn, settings, now=db_now["now"] + timedelta(minutes=2))
    assert len(later.reasons) == 1 and "the worker may be down" in later.reasons[0]


def test_clock_can_be_given(conn: psycopg.Connection[Any], settings: Settings) -> None:
    sent(conn, settings, "1 minute")
    pending(conn, settings, 1)
    db_now = conn.execute("SELECT now() AS now").fetchone()
    assert db_now is not None
    report = check_health(conn, settings, now=db_now["now"] + timedelta(hours=2))
    assert len(report.reasons) == 2


def test_health_cli_exit_status_and_reasons(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from worker.cli.main import main

    assert main(["health"]) == 0
    assert "healthy" in capsys.readouterr().out
    pending(conn, settings, 3, waited="2 hours")
    monkeypatch.setenv("MAILROOM_HEALTH_MAX_PENDING", "2")
    assert main(["health"]) == 1
    out, err = capsys.readouterr()
    assert "pending 3" in out
    assert err.count("unhealthy:") == 3
    assert main(["health", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["pending"] == 3 and len(report["reasons"]) == 3
    assert report["thresholds"]["max_pending"] == 2


def test_unreachable_database_is_unhealthy(
    cli_env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.cli.main import main

    monkeypatch.setenv("MAILROOM_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")
    assert main(["health", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is False and report["reasons"][0].startswith("database unreachable")


def test_due_email_with_every_sender_suspended_names_each_sender_and_why(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    conn.execute("UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = 'auth failed'")
    conn.execute(
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
        " daily_limit, status, status_reason, limit_reached_on) VALUES ('bulk', 'b@example.com', 'h', 25,"
        " 'none', 10, 'paused_limit_reached', 'daily limit of 10 reached', (now() AT TIME ZONE 'UTC')::date)"
    )
    conn.commit()
    pending(conn, settings, 2, waited="5 minutes")
    report = check_health(conn, settings)
    [reason] = [r for r in report.reasons if "no sender can send" in r]
    assert "main suspended (auth failed)" in reason
    assert "bulk paused_limit_reached (daily limit of 10 reached)" in reason
    assert reason.startswith("2 emails are due")


def test_an_unreachable_sender_with_due_email_is_unhealthy_until_its_circuit_closes(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    pending(conn, settings, 3)
    conn.execute(
        "SELECT mailroom.open_circuit(id, 'connect: no reply Connection refused', 10, 60) FROM mailroom.sender_accounts"
    )
    conn.commit()
    report = check_health(conn, settings)
    # Said at once, without the idle grace: nothing can send while the only sender's circuit is open.
    assert [f.kind for f in report.findings] == ["no_sender", "sender_unreachable"]
    assert [r for r in report.reasons if r.startswith("sender main")] == [
        f"sender main is unreachable since {report.senders[0]['since']}: connect: no reply Connection refused;"
        " 3 emails are due"
    ]
    conn.execute("SELECT mailroom.close_circuit(id) FROM mailroom.sender_accounts")
    conn.commit()
    assert check_health(conn, settings).ok


def test_a_high_attempt_failure_rate_is_unhealthy_with_the_figures(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    conn.execute(
        "INSERT INTO mailroom.send_logs (email_id, recipient_email, attempt, outcome, response, worker)"
        " SELECT g, 'x@example.com', 1, CASE WHEN g <= 12 THEN 'transient' ELSE 'sent' END, 'r', 'w'"
        " FROM generate_series(1, 30) g"
    )
    conn.commit()
    report = check_health(conn, settings)
    assert report.attempts == 30 and report.attempt_failure_rate == 0.4
    assert report.reasons == [
        "40% of the last 30 attempts failed in 15 min, more than 25% (MAILROOM_HEALTH_MAX_ATTEMPT_FAILURE_RATE)"
    ]
    # Too few attempts say nothing about a rate.
    assert check_health(conn, replace(settings, health_min_attempts=31)).ok


def test_due_email_and_no_live_worker_is_unhealthy(conn: psycopg.Connection[Any], settings: Settings) -> None:
    sent(conn, settings, "1 minute")
    conn.execute("UPDATE mailroom.workers SET seen_at = now() - interval '5 minutes'")
    conn.commit()
    pending(conn, settings, 1)
    assert check_health(conn, settings).ok  # a fresh email gets the grace
    pending(conn, settings, 1, waited="2 minutes")
    assert check_health(conn, settings).reasons == [
        "2 emails are due and no worker has been alive in the last 60 s; start one: mailroom worker"
    ]


def test_no_usable_sender_is_said_at_once_without_the_idle_grace(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    # The grace is for "idle" (a worker may be about to send), not for "impossible".
    conn.execute(
        "UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = 'authentication failed'"
    )
    conn.commit()
    pending(conn, settings, 1)
    report = check_health(conn, settings)
    assert [f.kind for f in report.findings] == ["no_sender"]
    assert report.reasons == [
        "1 emails are due and no sender can send them: main suspended (authentication failed);"
        " resume or fix a sender (mailroom senders list / resume)"
    ]


def test_a_suspended_sender_with_due_email_is_a_warning_while_another_sends(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    conn.execute(
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
        " daily_limit, status, status_reason) VALUES ('bulk', 'b@example.com', 'h', 25, 'none', 10,"
        " 'suspended', 'auth failed')"
    )
    conn.commit()
    sent(conn, settings, "1 minute")
    pending(conn, settings, 2, waited="5 minutes")
    report = check_health(conn, settings)
    assert report.ok
    assert report.warnings == [
        "sender bulk is suspended (auth failed) while 2 emails are due; mailroom senders resume bulk"
    ]
    assert [(f.kind, f.sender) for f in report.findings] == [("sender_suspended", "bulk")]


def test_the_health_command_prints_a_warning_and_still_exits_healthy(
    conn: psycopg.Connection[Any],
    settings: Settings,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    from worker.cli.main import main

    conn.execute(
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security,"
        " daily_limit, status, status_reason) VALUES ('bulk', 'b@example.com', 'h', 25, 'none', 10,"
        " 'suspended', 'auth failed')"
    )
    conn.commit()
    sent(conn, settings, "1 minute")
    pending(conn, settings, 2, waited="5 minutes")
    assert main(["health"]) == 0
    out, err = capsys.readouterr()
    assert "healthy" in out
    assert "warning: sender bulk is suspended (auth failed) while 2 emails are due" in err


def _deliveries(
    conn: psycopg.Connection[Any], sender: str, first_id: int, n: int, *, older: bool = False
) -> None:
    """`n` deliveries by `sender` of emails `first_id`..; `older` ones were attempted a day earlier."""
    conn.execute(
        "INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, attempt,"
        " outcome, response, worker)"
        " SELECT now() - %s::interval + g * interval '1 second', g,"
        " (SELECT id FROM mailroom.sender_accounts WHERE name = %s), 'x' || g || '@example.com', 1, 'sent',"
        " 'ok', 'w' FROM generate_series(%s::bigint, %s::bigint) g",
        ("1 day" if older else "1 hour", sender, first_id, first_id + n - 1),
    )


def _reported(conn: psycopg.Connection[Any], kind: str, email_ids: range) -> None:
    conn.execute(
        "INSERT INTO mailroom.bounce_events (email_id, recipient, kind, source, raw_size, dedupe_key)"
        " SELECT g, 'x' || g || '@example.com', %s, 'dsn', 1, %s || g FROM unnest(%s::bigint[]) g",
        (kind, kind, list(email_ids)),
    )


def test_a_sender_whose_last_deliveries_bounce_or_draw_complaints_is_unhealthy(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    """Per sender, over its last deliveries: a refusal at once and a DSN later are both hard bounces; a
    clean sender beside it is fine; bounces older than the window no longer count."""
    conn.execute(
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security, daily_limit)"
        " VALUES ('bulk', 'b@example.com', 'h', 25, 'none', 1000)"
    )
    _deliveries(conn, "main", 1, 100)
    _deliveries(conn, "bulk", 1001, 50, older=True)  # outside a window of 100
    _deliveries(conn, "bulk", 2001, 100)
    _reported(conn, "hard", range(1001, 1051))  # every older delivery bounced
    conn.execute("UPDATE mailroom.send_logs SET outcome = 'bounced' WHERE email_id BETWEEN 2001 AND 2003")
    _reported(conn, "hard", range(2004, 2007))
    _reported(conn, "complaint", range(2010, 2011))
    conn.commit()
    report = check_health(conn, replace(settings, health_reputation_deliveries=100))
    by_name = {r.sender: r for r in report.reputations}
    assert (by_name["bulk"].deliveries, by_name["bulk"].hard_bounces, by_name["bulk"].complaints) == (
        100,
        6,
        1,
    )
    assert (by_name["main"].hard_bounce_rate, by_name["main"].complaint_rate) == (0.0, 0.0)
    assert [(f.kind, f.sender) for f in report.findings] == [
        ("bounce_rate", "bulk"),
        ("complaint_rate", "bulk"),
    ]
    assert report.reasons[0].startswith(
        "sender bulk: 6.0% of its last 100 deliveries bounced hard, more than 5.0% (MAILROOM_HEALTH_MAX_BOUNCE_RATE)"
    )
    assert report.reasons[1].startswith("sender bulk: 1.0% of its last 100 deliveries drew complaints")
    assert report.as_dict()["reputation"][0]["sender"] == "bulk"
    relaxed = replace(
        settings, health_reputation_deliveries=100, health_max_bounce_rate=0.1, health_max_complaint_rate=0.02
    )
    assert check_health(conn, relaxed).ok
    # over the default 1,000 deliveries the older bounces count too: 56 of 150
    assert check_health(conn, settings).reputations[0].hard_bounces == 56


def test_a_sender_with_few_deliveries_is_not_judged_on_its_rates(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    _deliveries(conn, "main", 1, 10)
    _reported(conn, "complaint", range(1, 3))
    conn.commit()
    report = check_health(conn, settings)
    assert report.reputations[0].complaint_rate == 0.2
    assert report.ok and not report.findings


def test_a_bounce_quarantine_past_80_percent_of_its_size_or_dropping_messages_is_a_warning(
    conn: psycopg.Connection[Any], settings: Settings
) -> None:
    from worker.producers.bounces.quarantine import Limits, keep

    settings = replace(settings, quarantine_max_bytes=1 << 20)
    limits = Limits.from_settings(settings)
    assert not [f for f in check_health(conn, settings).findings if f.kind.startswith("quarantine")]
    # 12 messages of 64 KiB: 75% of the cap, no warning yet; the 13th passes 80%.
    for i in range(13):
        assert (
            keep(conn, b"%d" % i + b"x" * 70_000, "junk", None, client="pipe", limits=limits).verdict
            == "kept"
        )
        conn.commit()
        kinds = [f.kind for f in check_health(conn, settings).findings]
        assert ("quarantine_full" in kinds) == (i == 12)
    (finding,) = [f for f in check_health(conn, settings).findings if f.kind == "quarantine_full"]
    assert (
        finding.severity == "warning"
        and "the bounce quarantine holds 81% of its 1048576 bytes" in finding.text
    )
    # Full: the next ones are dropped, and health says so.
    for i in range(13, 18):  # two more fit (15 in all), three do not
        keep(conn, b"%d" % i + b"x" * 70_000, "junk", None, client="pipe", limits=limits)
    conn.commit()
    report = check_health(conn, settings)
    assert report.ok
    assert any("dropped 3 messages today" in w for w in report.warnings)
    assert report.as_dict()["quarantine"]["dropped_today"] == 3
