"""The audit trail's hash chain, played as an attacker with superuser rights, through `mailroom audit verify|head|prune`."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.cli import run
from worker.cli.main import main
from worker.core import db
from worker.ops import audit, audit_chain


def write_rows(db_url: str, n: int, *, actor: str = "alice") -> list[int]:
    """n committed audit rows, written the three ways a writer can: Python, the SQL function, a plain INSERT."""
    ids = []
    with psycopg.connect(db_url, autocommit=True) as c:
        for i in range(n):
            if i % 3 == 0:
                ids.append(audit.record(c, "sender.suspend", actor, f"sender-{i}", 1, {"reason": f"r{i}"}))
            elif i % 3 == 1:
                row = c.execute(
                    "SELECT mailroom.audit('queue.cancel', %s, NULL, 2, %s)", (actor, '{"ids": [1, 2]}')
                )
                ids.append(row.fetchone()[0])  # type: ignore[index]
            else:
                row = c.execute(
                    "INSERT INTO mailroom.audit_log (actor, action, target) VALUES (%s, 'keys.rotate', 'all')"
                    " RETURNING id",
                    (actor,),
                )
                ids.append(row.fetchone()[0])  # type: ignore[index]
    return ids


Step = str | tuple[str, tuple[Any, ...] | dict[str, Any]]


def as_superuser(db_url: str, *steps: Step, disabled: tuple[str, ...] = ("audit_log_append_only",)) -> None:
    """What an attacker with superuser rights does: switch the guard triggers off, change rows, switch them on.

    The tables' owner may do the same (a deployment's owner is no superuser), and the chain shows it alike."""
    with psycopg.connect(db_url) as c:
        may = (
            "SELECT rolsuper OR pg_has_role(current_user, (SELECT relowner FROM pg_class"
            " WHERE oid = 'mailroom.audit_log'::regclass), 'USAGE') FROM pg_roles WHERE rolname = current_user"
        )
        assert c.execute(may).fetchone() == (True,)
        toggles = [
            (sql.Identifier("audit_chain" if t.startswith("audit_chain") else "audit_log"), sql.Identifier(t))
            for t in disabled
        ]
        for table, trigger in toggles:
            c.execute(sql.SQL("ALTER TABLE mailroom.{} DISABLE TRIGGER {}").format(table, trigger))
        for step in steps:
            statement, params = (step, None) if isinstance(step, str) else step
            c.execute(statement, params)
        for table, trigger in toggles:
            c.execute(sql.SQL("ALTER TABLE mailroom.{} ENABLE TRIGGER {}").format(table, trigger))


def verify(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, dict[str, Any]]:
    code, out, _ = run(capsys, "audit", "verify", *extra)
    json_code, json_out, _ = run(capsys, "audit", "verify", "--json", *extra)
    assert json_code == code
    return code, out, json.loads(json_out)


def test_an_intact_trail_from_every_kind_of_writer_verifies(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = write_rows(db_url, 6)
    code, out, report = verify(capsys)
    assert code == 0, out
    assert out.startswith("audit chain: intact, 6 row(s) checked (positions 1-6)")
    assert report["ok"] is True and report["problems"] == []
    assert report["head"]["seq"] == 6 and report["head"]["last_id"] == ids[-1]


def test_a_superuser_edit_of_one_rows_detail_is_named_by_verify(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = write_rows(db_url, 5)
    as_superuser(
        db_url, ('UPDATE mailroom.audit_log SET detail = \'{"reason": "routine"}\' WHERE id = %s', (ids[3],))
    )
    code, out, report = verify(capsys)
    assert code == 1
    assert out.splitlines()[0] == (
        f"audit chain: BROKEN: row #{ids[3]} (position 4, sender.suspend) was edited:"
        " its content no longer matches its hash"
    )
    assert [(p["id"], p["kind"]) for p in report["problems"]] == [(ids[3], "edited")]


def test_an_edit_that_also_rewrites_the_rows_hash_breaks_the_next_link(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = write_rows(db_url, 4)
    as_superuser(
        db_url,
        (
            "UPDATE mailroom.audit_log SET actor = 'mallory', row_hash = mailroom.audit_row_hash(seq, id, at,"
            " db_role, 'mallory', action, target, affected, detail, prev_hash) WHERE id = %s",
            (ids[1],),
        ),
    )
    code, out, report = verify(capsys)
    assert code == 1
    assert f"row #{ids[2]} (position 3) does not link to the row before it after row #{ids[1]}" in out
    assert report["problems"][0]["kind"] == "out_of_chain"


def test_a_deleted_middle_row_is_named_by_its_position(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = write_rows(db_url, 5)
    as_superuser(db_url, ("DELETE FROM mailroom.audit_log WHERE id = %s", (ids[2],)))
    code, out, report = verify(capsys)
    assert code == 1
    assert out.splitlines()[0] == (
        f"audit chain: BROKEN: chain position(s) 3 missing after row #{ids[1]}:"
        f" 1 row(s) removed before row #{ids[3]} (position 4)"
    )
    assert [(p["seq"], p["kind"]) for p in report["problems"]] == [(3, "removed")]


def test_deleted_newest_rows_are_found_against_the_exported_head(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ids = write_rows(db_url, 5)
    head_file = tmp_path / "audit-head.json"
    code, out, _ = run(capsys, "audit", "head", "--json", "--output", str(head_file))
    assert code == 0 and out == f"audit chain head (position 5, row #{ids[-1]}) written to {head_file}\n"
    assert json.loads(head_file.read_text())["last_id"] == ids[-1]
    assert verify(capsys, "--head", str(head_file))[0] == 0

    # The attacker removes the two newest rows and moves the database's head back to match.
    as_superuser(
        db_url,
        ("DELETE FROM mailroom.audit_log WHERE id IN (%s, %s)", (ids[3], ids[4])),
        (
            "UPDATE mailroom.audit_chain SET seq = 3, last_id = %(id)s,"
            " last_hash = (SELECT row_hash FROM mailroom.audit_log WHERE id = %(id)s)",
            {"id": ids[2]},
        ),
        disabled=("audit_log_append_only", "audit_chain_guard"),
    )
    assert verify(capsys)[0] == 0  # consistent inside the database: only the exported head can tell
    code, out, report = verify(capsys, "--head", str(head_file))
    assert code == 1
    assert out.splitlines()[0] == (
        "audit chain: BROKEN: the exported head is ahead of the database: chain position(s) 4-5"
        f" (up to #{ids[-1]}) were removed (the newest rows deleted)"
    )
    assert report["problems"][0]["kind"] == "removed" and report["checked_against_export"] is True


def test_deleted_newest_rows_are_found_against_the_databases_head_and_the_text_export(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ids = write_rows(db_url, 4)
    code, text, _ = run(capsys, "audit", "head")
    assert code == 0 and text.splitlines()[2].startswith(f"4 {ids[-1]} ")
    (tmp_path / "head.txt").write_text(text)
    as_superuser(db_url, ("DELETE FROM mailroom.audit_log WHERE id = %s", (ids[-1],)))
    code, out, _ = verify(capsys)
    assert (
        code == 1
        and f"chain position(s) 4 missing: the newest 1 row(s) (up to #{ids[-1]}) were removed" in out
    )
    code, out, _ = verify(capsys, "--head", str(tmp_path / "head.txt"))
    assert code == 1 and "the exported head is ahead of the database" in out


def test_a_row_inserted_out_of_chain_is_named(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    write_rows(db_url, 3)
    forged = "0" * 64
    as_superuser(
        db_url,
        (
            "INSERT INTO mailroom.audit_log (actor, action, seq, prev_hash, row_hash) VALUES"
            " ('mallory', 'sender.resume', 4, %(h)s, %(h)s)",
            {"h": forged},
        ),
        disabled=("audit_log_chain",),
    )
    code, out, report = verify(capsys)
    assert code == 1
    assert "(position 4) does not link to the row before it" in out.splitlines()[0]
    assert report["problems"][0]["kind"] == "out_of_chain"


def test_an_exported_head_that_no_longer_matches_its_row_says_the_chain_was_rewritten(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ids = write_rows(db_url, 3)
    assert run(capsys, "audit", "head", "-o", str(tmp_path / "h"))[0] == 0
    # Every hash recomputed from row 2 on: self-consistent, but not the chain that was exported.
    as_superuser(
        db_url,
        ("UPDATE mailroom.audit_log SET actor = 'mallory' WHERE id = %s", (ids[1],)),
        "DO $$ DECLARE r record; prev text; BEGIN FOR r IN SELECT * FROM mailroom.audit_log ORDER BY seq LOOP"
        " UPDATE mailroom.audit_log SET prev_hash = prev, row_hash = mailroom.audit_row_hash(r.seq, r.id, r.at,"
        " r.db_role, r.actor, r.action, r.target, r.affected, r.detail, prev) WHERE id = r.id"
        " RETURNING row_hash INTO prev; END LOOP;"
        " ALTER TABLE mailroom.audit_chain DISABLE TRIGGER audit_chain_guard;"
        " UPDATE mailroom.audit_chain SET last_hash = prev;"
        " ALTER TABLE mailroom.audit_chain ENABLE TRIGGER audit_chain_guard; END $$",
    )
    assert verify(capsys)[0] == 0
    code, out, _ = verify(capsys, "--head", str(tmp_path / "h"))
    assert code == 1
    assert f"row #{ids[2]} at position 3 is not the row the exported head recorded" in out


def test_concurrent_writers_queue_on_the_head_and_never_fork_the_chain(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    first = psycopg.connect(db_url)
    second = psycopg.connect(db_url)
    try:
        audit.record(first, "sender.add", "alice", "a")  # holds the head's row lock until it commits
        second_pid = second.info.backend_pid
        done = threading.Event()

        def write_second() -> None:
            audit.record(second, "sender.add", "bob", "b")
            second.commit()
            done.set()

        writer = threading.Thread(target=write_second)
        writer.start()
        with psycopg.connect(db_url, autocommit=True) as watch:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                row = watch.execute(
                    "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (second_pid,)
                ).fetchone()
                if row == ("Lock",):
                    break
            assert row == ("Lock",), "the second writer should wait for the first one's head lock"
        assert not done.is_set()
        first.commit()
        writer.join(10)
        assert done.is_set()
    finally:
        first.close()
        second.close()

    # Two writers at full speed, each row in its own transaction.
    start = threading.Barrier(2)

    def burst(actor: str) -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            start.wait()
            for _ in range(150):
                audit.record(c, "queue.retry", actor)

    writers = [threading.Thread(target=burst, args=(name,)) for name in ("carol", "dave")]
    for w in writers:
        w.start()
    for w in writers:
        w.join(60)
    code, out, report = verify(capsys)
    assert code == 0, out
    assert report["checked"] == 302 and report["first_seq"] == 1 and report["last_seq"] == 302


def test_rows_written_before_the_revision_are_chained_by_the_upgrade(
    empty_db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    db.upgrade(empty_db_url, "0007")
    with psycopg.connect(empty_db_url, autocommit=True) as c:
        for actor in ("alice", "bob", "carol"):
            c.execute("SELECT mailroom.audit('sender.add', %s, 'primary', 1, '{\"n\": \"é\"}')", (actor,))
    db.upgrade(empty_db_url)
    monkeypatch.setenv("MAILROOM_DATABASE_URL", empty_db_url)
    monkeypatch.setenv("MAILROOM_HOME", str(tmp_path / "home"))
    with psycopg.connect(empty_db_url, row_factory=dict_row) as c:
        rows = c.execute(
            "SELECT id, seq, prev_hash, row_hash, actor FROM mailroom.audit_log ORDER BY id"
        ).fetchall()
    assert [(r["seq"], r["actor"]) for r in rows] == [(1, "alice"), (2, "bob"), (3, "carol")]
    assert rows[0]["prev_hash"] is None and [r["prev_hash"] for r in rows[1:]] == [
        r["row_hash"] for r in rows[:2]
    ]
    write_rows(empty_db_url, 1)  # the trigger carries the migrated chain on
    code, out, _ = verify(capsys)
    assert code == 0 and out.startswith("audit chain: intact, 4 row(s) checked (positions 1-4)"), out


def test_retention_pruning_keeps_verify_passing_and_a_removal_outside_it_does_not(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        for day in (1, 2, 3):
            c.execute(
                "INSERT INTO mailroom.audit_log (at, actor, action) VALUES (%s, 'alice', 'sender.add')",
                (f"2024-01-0{day}T00:00:00Z",),
            )
    write_rows(db_url, 2)
    assert run(capsys, "audit", "head", "--json", "-o", str(tmp_path / "before.json"))[0] == 0
    code, out, _ = run(
        capsys, "audit", "prune", "--before", "2024-01-03", "--reason", "retention: two years", "--yes"
    )
    assert code == 0 and out.startswith("removed 2 audit row(s) written before 2024-01-03T00:00:00+00:00")

    code, out, report = verify(capsys, "--head", str(tmp_path / "before.json"))
    assert code == 0, out
    assert out.startswith("audit chain: intact, 4 row(s) checked (positions 3-6, pruned up to position 2)")
    assert report["head"]["pruned_seq"] == 2
    with psycopg.connect(db_url, row_factory=dict_row) as c:
        [prune_row] = audit.recent(c, 1)
    assert (prune_row["action"], prune_row["affected"], prune_row["detail"]["through_seq"]) == (
        "audit.prune",
        2,
        2,
    )
    assert run(capsys, "audit", "prune", "--before", "2024-01-03", "--reason", "again", "--yes")[
        1
    ].startswith("removed 0 audit row(s)")

    # The oldest kept row removed behind pruning's back: the chain no longer starts at the recorded anchor.
    as_superuser(db_url, "DELETE FROM mailroom.audit_log WHERE seq = 3")
    code, out, _ = verify(capsys)
    assert code == 1 and out.startswith(
        "audit chain: BROKEN: chain position(s) 3 missing at the start of the chain"
    )


def test_the_head_and_the_rows_refuse_direct_writes_even_by_their_owner(db_url: str) -> None:
    write_rows(db_url, 1)
    with psycopg.connect(db_url) as c:
        for statement in (
            "UPDATE mailroom.audit_chain SET seq = 0, last_id = NULL, last_hash = NULL",
            "DELETE FROM mailroom.audit_chain",
            "TRUNCATE mailroom.audit_chain",
            "DELETE FROM mailroom.audit_log",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(statement)
            c.rollback()


def test_long_runs_report_progress_on_standard_error(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_rows(db_url, 5)
    monkeypatch.setattr(audit_chain, "PROGRESS_EVERY", 2)
    monkeypatch.setattr(audit_chain, "FETCH_ROWS", 2)
    code, _, err = run(capsys, "audit", "verify")
    assert code == 0
    assert err.splitlines() == ["audit verify: 2 of 5 rows checked", "audit verify: 4 of 5 rows checked"]


def test_a_head_file_not_written_by_audit_head_is_bad_usage(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "h.json").write_text('{"format": "mailroom-signature-heads/1", "heads": []}')
    code, _, err = run(capsys, "audit", "verify", "--head", str(tmp_path / "h.json"))
    assert code == 2 and "not a head file written by `mailroom audit head`" in err


def test_maintenance_prunes_audit_rows_past_their_retention_and_verify_still_passes(
    cli_env: dict[str, str],
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        for days in (400, 300, 200):
            c.execute(
                "INSERT INTO mailroom.audit_log (at, actor, action) VALUES (now() - make_interval(days => %s),"
                " 'alice', 'sender.add')",
                (days,),
            )
    write_rows(db_url, 2)
    assert run(capsys, "audit", "head", "-o", str(tmp_path / "head.txt"))[0] == 0
    assert main(["maintenance", "run"]) == 0  # MAILROOM_AUDIT_RETENTION_DAYS unset: kept for ever
    assert verify(capsys)[2]["head"]["pruned_seq"] == 0

    monkeypatch.setenv("MAILROOM_AUDIT_RETENTION_DAYS", "250")
    assert main(["maintenance", "run", "--dry-run"]) == 0
    assert "prune_audit: would touch 2 row(s)" in capsys.readouterr()[0]
    assert main(["maintenance", "run"]) == 0
    assert "prune_audit: touched 2 row(s)" in capsys.readouterr()[0]
    code, out, report = verify(capsys, "--head", str(tmp_path / "head.txt"))
    assert code == 0, out
    assert report["head"]["pruned_seq"] == 2 and report["first_seq"] == 3
    with psycopg.connect(db_url, row_factory=dict_row) as c:
        [pruned] = audit.recent(c, 1, action="audit.prune")
    assert (pruned["actor"], pruned["detail"]["reason"]) == (
        "maintenance",
        "retention: MAILROOM_AUDIT_RETENTION_DAYS=250",
    )


@pytest.mark.usefixtures("role_lock")
def test_application_and_read_only_roles_are_chained_and_can_neither_change_nor_prune_the_trail(
    cli_env: dict[str, str], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.fixtures_db import drop_roles, role_url
    from worker.ops import roles

    with psycopg.connect(db_url) as c:
        roles.grant(c, "app", "mr_test_chain_app", create=True, actor="tester")
        roles.grant(c, "read-only", "mr_test_chain_reader", create=True, actor="tester")
    try:
        with psycopg.connect(role_url(db_url, "mr_test_chain_app"), autocommit=True) as app:
            app.execute(
                "SELECT mailroom.app_audit('app.refund', 'billing', 'order 42', 1, '{\"amount\": 10}')"
            )
        for role in ("mr_test_chain_app", "mr_test_chain_reader"):
            with psycopg.connect(role_url(db_url, role)) as c:
                for statement in (
                    "UPDATE mailroom.audit_log SET actor = 'mallory'",
                    "DELETE FROM mailroom.audit_log",
                    "UPDATE mailroom.audit_chain SET seq = 0",
                    "SELECT mailroom.audit_prune(now(), 'cover tracks', 'mallory')",
                    "DELETE FROM mailroom.audit_pending",
                    # it would hold the head until this transaction ends
                    "SELECT mailroom.audit_link_pending()",
                ):
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        c.execute(statement)
                    c.rollback()
        with psycopg.connect(role_url(db_url, "mr_test_chain_reader")) as reader:
            report = audit_chain.verify_chain(reader)
            assert report.ok and report.checked == 2 and report.pending == 1  # the application's row waits
            with psycopg.connect(db_url, autocommit=True) as c:
                assert audit_chain.link_pending(c) == 1
            report = audit_chain.verify_chain(reader)
        # two grants and the application's row
        assert report.ok and report.checked == 3 and report.pending == 0
        code, out, _ = verify(capsys)
        assert code == 0, out
    finally:
        drop_roles(db_url, "mr_test_chain_app", "mr_test_chain_reader")
