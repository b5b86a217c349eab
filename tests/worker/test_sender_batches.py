"""Per-sender batch size (reference 05): set by `senders add/edit`, shown by `senders list`, used by the claim."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import psycopg
import pytest

from tests.cli import not_on_terminal, run
from tests.worker.helpers import enqueue_many
from tests.worker.senders import audit_rows, sender
from worker.core.config import Settings
from worker.devtools.sink import RunningSink
from worker.engine.claim import claim_size
from worker.engine.delivery import Worker, WorkerOptions


def _add(capsys: pytest.CaptureFixture[str], name: str, port: int, *extra: str) -> tuple[int, str, str]:
    return run(
        capsys,
        *("senders", "add", name, "--from", f"{name}@example.org", "--host", "127.0.0.1"),
        *("--port", str(port), "--security", "none", *extra),
    )


def test_the_sender_batch_is_the_default_within_the_workers_ceiling_and_pacing() -> None:
    assert claim_size(0, 300) == 300  # no batch of its own: the worker's
    assert claim_size(0, 300, 2) == 2
    assert claim_size(0, 300, 5000) == 300  # the worker's --batch-size is the ceiling
    assert claim_size(1000, 300, 50) == 5  # a paced sender: 5 seconds of its sending at most
    assert claim_size(0, 300, 0) == 1  # a bad stored value never claims nothing forever


def test_senders_add_edit_and_list_carry_the_batch_size(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    not_on_terminal(monkeypatch)
    assert _add(capsys, "careful", 2525, "--batch-size", "2", "--send-delay-ms", "200")[0] == 0
    assert _add(capsys, "bulk", 2526)[0] == 0
    assert sender(conn, "careful")["batch_size"] == 2
    assert sender(conn, "bulk")["batch_size"] is None  # the worker's --batch-size
    [added] = [r for r in audit_rows(conn, "sender.add") if r["target"] == "careful"]
    assert added["detail"]["batch_size"] == 2

    code, out, _ = run(capsys, "senders", "list")
    assert code == 0
    lines = out.splitlines()
    careful = next(i for i, line in enumerate(lines) if line.startswith("careful"))
    assert lines[careful + 1] == "  batch 2, 200 ms between emails"
    assert not any("batch" in line for line in lines if line.startswith("bulk"))
    code, out, _ = run(capsys, "senders", "list", "--json")
    assert {r["name"]: r["batch_size"] for r in json.loads(out)} == {"bulk": None, "careful": 2}

    code, out, _ = run(capsys, "senders", "edit", "careful", "--batch-size", "50")
    assert code == 0 and "changed batch_size" in out
    assert sender(conn, "careful")["batch_size"] == 50
    [edit] = audit_rows(conn, "sender.edit")
    assert edit["detail"]["changed"] == {"batch_size": [2, 50]}
    code, out, _ = run(capsys, "senders", "edit", "careful", "--batch-size", "0")
    assert code == 0 and sender(conn, "careful")["batch_size"] is None  # back to the worker's

    # Refused before anything is stored: a batch of nothing, or of a negative size.
    for bad in ("0", "-3", "two"):
        code, _, err = _add(capsys, "broken", 2527, "--batch-size", bad)
        assert code == 2, err
    code, _, err = run(capsys, "senders", "edit", "bulk", "--batch-size", "-1")
    assert code == 2
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone() == {"n": 2}


def test_the_database_refuses_a_batch_below_one_by_name(conn: psycopg.Connection[Any], cli_env: Any) -> None:
    conn.execute(
        "INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, batch_size)"
        " VALUES ('ok', 'a@example.org', 'localhost', 25, 1)"
    )
    with pytest.raises(psycopg.errors.CheckViolation, match="sender_accounts_batch_size_positive"):
        conn.execute("UPDATE mailroom.sender_accounts SET batch_size = 0")


# Every claim a worker makes, as the claims table sees it: how many emails it reserved, for which sender.
RECORD_CLAIMS = """
CREATE TABLE mailroom.test_claim_sizes (sender_account_id bigint, reserved integer);
CREATE FUNCTION mailroom.test_record_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mailroom.test_claim_sizes VALUES (NEW.sender_account_id, NEW.reserved);
    RETURN NULL;
END $$;
CREATE TRIGGER test_record_claim AFTER INSERT ON mailroom.claims
    FOR EACH ROW EXECUTE FUNCTION mailroom.test_record_claim();
"""


async def test_a_sender_with_batch_2_gets_claims_of_at_most_2_the_other_the_global_size(
    db_url: str,
    settings: Settings,
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    smtp_sink_factory: Any,
) -> None:
    not_on_terminal(monkeypatch)
    careful_sink: RunningSink = smtp_sink_factory()
    bulk_sink: RunningSink = smtp_sink_factory()
    assert _add(capsys, "careful", careful_sink.port, "--batch-size", "2")[0] == 0
    assert _add(capsys, "bulk", bulk_sink.port)[0] == 0
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(RECORD_CLAIMS)
        ids = {r[0]: r[1] for r in conn.execute("SELECT name, id FROM mailroom.sender_accounts")}
    enqueue_many(db_url, 30)

    # Two slots: each holds one sender account; the worker's --batch-size is 5.
    worker = Worker(
        db_url, settings, WorkerOptions(concurrency=2, batch_size=5, drain=True, poll_seconds=0.2)
    )
    await asyncio.wait_for(worker.run(), timeout=60)

    assert worker.sent == 30
    assert len(careful_sink.messages) + len(bulk_sink.messages) == 30
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT sender_account_id, reserved FROM mailroom.test_claim_sizes").fetchall()
    sizes: dict[str, list[int]] = {name: [] for name in ids}
    for sender_id, reserved in rows:
        sizes[next(n for n, i in ids.items() if i == sender_id)].append(reserved)
    assert sizes["careful"] and max(sizes["careful"]) == 2  # never more than its own batch
    assert sizes["bulk"] and max(sizes["bulk"]) == 5  # the worker's batch size, its default
    assert sum(sizes["careful"]) == len(careful_sink.messages)
