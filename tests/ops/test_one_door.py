"""One door for every role: an application role made by `mailroom db grant app` enqueues through every
way in (the Python API sync and async, one and many, templates, campaign mail with tracking; SQL with
every field; the `mailroom enqueue` command; `mailroom my`), and reads nothing of another role's email
through any table, view or function."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import errors, sql
from psycopg.rows import dict_row

from mailroom import EmailRequest, enqueue, enqueue_async, enqueue_many
from tests.cli import run
from tests.fixtures_db import TEST_POSTAL_ADDRESS, drop_roles, role_url
from worker.core.config import Settings
from worker.core.email_rows import COLUMNS
from worker.ops import roles
from worker.producers.rendering import render_once

pytestmark = pytest.mark.usefixtures("role_lock")

SHOP, OTHER = "mr_door_shop", "mr_door_other"
HTML = '<p>Our <a href="https://shop.example/sale">sale</a> starts today.</p>'


@pytest.fixture
def apps(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """Two application roles' URLs (the shop's, another application's), made by `mailroom db grant app`."""
    monkeypatch.setenv("MAILROOM_POSTAL_ADDRESS", TEST_POSTAL_ADDRESS)  # the public API reads it itself
    with psycopg.connect(db_url) as conn:
        for role in (SHOP, OTHER):
            roles.grant(conn, "app", role, create=True, actor="tester")
    try:
        yield role_url(db_url, SHOP), role_url(db_url, OTHER)
    finally:
        drop_roles(db_url, SHOP, OTHER)


def _row(db_url: str, email_id: int) -> dict[str, Any]:
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute(
            "SELECT e.*, (SELECT count(*) FROM mailroom.tracked_links l WHERE l.email_id = e.id) AS links"
            " FROM mailroom.email_queue e WHERE e.id = %s",
            (email_id,),
        ).fetchone()
    assert row is not None
    return row


def _render(db_url: str, settings: Settings) -> int:
    """One pass of the worker's renderer, as the owner: how many emails it handled."""

    async def render() -> int:
        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            return await render_once(conn, settings)

    return asyncio.run(render())


def test_an_application_role_enqueues_through_every_way_of_the_python_api(
    db_url: str, apps: tuple[str, str], settings: Settings
) -> None:
    shop, _ = apps
    with psycopg.connect(shop) as conn:
        one = enqueue(conn, EmailRequest(to="ada@example.com", subject="Hi", text="x", idempotency_key="k1"))
        again = enqueue(
            conn, EmailRequest(to="ada@example.com", subject="Hi", text="x", idempotency_key="k1")
        )
        templated, campaign = enqueue_many(
            conn,
            [
                EmailRequest(
                    to="bob@example.com",
                    template="activation",
                    data={
                        "login": "bob",
                        "code": "01234",
                        "expires_at": "10:15",
                        "link": "https://a.example/x",
                    },
                ),
                EmailRequest(
                    to="cy@example.com", subject="Sale", html=HTML, campaign_id="spring-sale", track=True
                ),
            ],
        )
        conn.commit()

    async def later() -> int:
        async with await psycopg.AsyncConnection.connect(shop) as aconn:
            email_id = await enqueue_async(aconn, EmailRequest(to="di@example.com", subject="Hi", text="y"))
            await aconn.commit()
            return int(email_id)

    from_async = asyncio.run(later())
    assert again == one
    assert "bob" in _row(db_url, templated)["subject"]
    # Campaign email from an application role is dressed by the worker: the role never sees its tokens.
    waiting = _row(db_url, campaign)
    assert (
        waiting["status"] == "unrendered" and waiting["unsubscribe_token"] is None and waiting["links"] == 0
    )
    assert waiting["dress"] == {"track": True} and "https://shop.example/sale" in waiting["html_body"]
    assert _render(db_url, settings) == 1
    dressed = _row(db_url, campaign)
    assert dressed["status"] == "pending" and dressed["links"] == 1
    assert dressed["unsubscribe_token"] is not None and "List-Unsubscribe" in dressed["headers"]
    # The door says who enqueued, whatever the caller: its own role, for its email and its keys.
    for email_id in (one, templated, campaign, from_async):
        row = _row(db_url, email_id)
        assert row["enqueued_by"] == SHOP and row["created_by"] == SHOP


def test_sql_takes_campaign_transactional_and_track_and_the_worker_dresses_as_python_does(
    db_url: str, apps: tuple[str, str], settings: Settings
) -> None:
    shop, _ = apps
    with psycopg.connect(shop) as conn:
        row = conn.execute(
            "SELECT mailroom.enqueue(recipients => ARRAY['cy@example.com'], subject => 'Sale',"
            " html_body => %s, campaign_id => 'spring-sale', track => true)",
            (HTML,),
        ).fetchone()
        plain = conn.execute(
            "SELECT mailroom.enqueue(recipients => ARRAY['di@example.com'], subject => 'Receipt',"
            " text_body => 'Thanks', campaign_id => 'receipts', transactional => true)"
        ).fetchone()
        conn.commit()
    assert row is not None and plain is not None
    email_id, receipt = int(row[0]), int(plain[0])
    assert _row(db_url, email_id)["status"] == "unrendered"  # waits for its dress, never claimed undressed
    receipt_row = _row(db_url, receipt)
    assert receipt_row["status"] == "pending" and receipt_row["campaign_id"] == "receipts"
    assert receipt_row["transactional"] and receipt_row["unsubscribe_token"] is None

    assert _render(db_url, settings) == 1
    dressed = _row(db_url, email_id)
    assert dressed["status"] == "pending" and dressed["dress"] is None
    assert not dressed["transactional"] and dressed["track_clicks"] and dressed["links"] == 1
    assert dressed["unsubscribe_token"] is not None and "List-Unsubscribe" in dressed["headers"]
    assert "https://shop.example/sale" not in dressed["html_body"]  # the link goes through the tracker


def test_sql_campaign_mail_the_renderer_cannot_dress_fails_with_the_reason_and_a_retry_dresses_it(
    db_url: str, apps: tuple[str, str], settings: Settings
) -> None:
    shop, _ = apps
    with psycopg.connect(shop) as conn:
        row = conn.execute(
            "SELECT mailroom.enqueue(recipients => ARRAY['cy@example.com'], subject => 'Sale',"
            " text_body => 'Sale today', campaign_id => 'spring-sale')"
        ).fetchone()
        conn.commit()
    assert row is not None
    email_id = int(row[0])
    no_address = Settings(home=settings.home, database_url=db_url, secret_key=settings.secret_key)

    _render(db_url, no_address)  # no postal address anywhere: campaign mail may not leave
    failed = _row(db_url, email_id)
    assert failed["status"] == "failed" and "campaign dress" in failed["last_error"]
    assert "postal address" in failed["last_error"]
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE mailroom.email_queue SET status = 'pending' WHERE id = %s", (email_id,))
    assert _row(db_url, email_id)["status"] == "unrendered"  # a retry goes back to the renderer, not out
    _render(db_url, settings)
    dressed = _row(db_url, email_id)
    assert dressed["status"] == "pending" and dressed["unsubscribe_token"] is not None


def test_the_enqueue_and_my_commands_work_as_an_application_role(
    db_url: str, apps: tuple[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    shop, _ = apps
    monkeypatch.setenv("MAILROOM_DATABASE_URL", shop)
    lines = "\n".join(
        json.dumps(line)
        for line in (
            {"to": "ada@example.com", "subject": "Order 1", "text": "t", "idempotency_key": "order-1"},
            {"to": "not an address", "subject": "x", "text": "t"},
            {"to": "bob@example.com", "subject": "News", "text": "t", "campaign_id": "news"},
            {"to": "ada@example.com", "subject": "Order 1", "text": "t", "idempotency_key": "order-1"},
        )
    )
    code, out, err = run(capsys, "enqueue", stdin=lines, monkeypatch=monkeypatch)
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and "3 accepted, 1 rejected" in err, err
    assert [r["line"] for r in results] == [1, 2, 3, 4]
    assert results[1]["field"] == "to" and results[0]["id"] == results[3]["id"]
    news = _row(db_url, results[2]["id"])
    assert news["enqueued_by"] == SHOP and news["status"] == "unrendered" and news["dress"] is not None

    code, out, err = run(capsys, "my", "--json")
    mine = json.loads(out)
    assert code == 0 and sorted(r["id"] for r in mine) == sorted({results[0]["id"], results[2]["id"]})
    code, out, err = run(capsys, "my", "--key", "order-1")
    assert code == 0 and "ada@example.com" in out and "bob@" not in out
    # What the role may not do is said in one line, naming what it would need.
    code, out, err = run(capsys, "stats")
    assert code == 1 and err.count("\n") == 1 and "permission denied" in err and "db grant app" in err, err


def test_an_application_role_reads_no_other_roles_email_through_any_table_view_or_function(
    db_url: str, apps: tuple[str, str]
) -> None:
    shop, other = apps
    with psycopg.connect(other) as conn:
        theirs = enqueue(
            conn, EmailRequest(to="secret@example.com", subject="Private", text="x", idempotency_key="k")
        )
        conn.commit()
    with psycopg.connect(shop, autocommit=True) as conn:
        relations = conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'mailroom' AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY 1"
        ).fetchall()
        readable = []
        for (name,) in relations:
            try:
                conn.execute(sql.SQL("SELECT * FROM mailroom.{} LIMIT 1").format(sql.Identifier(name)))
                readable.append(name)
            except errors.InsufficientPrivilege:
                pass
        assert readable == ["my_emails"]
        assert conn.execute("SELECT id FROM mailroom.my_emails").fetchall() == []
        # The functions it may run with more rights than its own: each one's answer is about itself.
        definers = conn.execute(
            "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'mailroom' AND p.prosecdef AND has_function_privilege(p.oid, 'EXECUTE')"
            " AND p.prorettype <> 'trigger'::regtype"
            " ORDER BY 1"
        ).fetchall()
        assert [d[0] for d in definers] == [
            "app_audit",
            "campaign_mail_policy",
            "cancel_my_email",
            "enqueue",
            "enqueue_outcome",
            "enqueue_rows",
            "enqueue_templates",
            "from_refusals",
            "schema_revision",
        ]
        assert conn.execute("SELECT * FROM mailroom.enqueue_outcome(%s)", (int(theirs),)).fetchall() == []
        mine = enqueue(
            conn, EmailRequest(to="eve@example.com", subject="Mine", text="x", idempotency_key="k")
        )
        assert mine != theirs  # the same key is another email: the other role's id never comes back
        for call in (
            "SELECT * FROM mailroom.enqueue_templates()",
            "SELECT * FROM mailroom.campaign_mail_policy('k')",
        ):
            assert "secret@example.com" not in repr(conn.execute(call).fetchall())


def test_a_hostile_direct_call_of_the_door_cannot_pass_for_another_role_or_choose_what_mailroom_makes(
    db_url: str, apps: tuple[str, str]
) -> None:
    """An application calling `mailroom.enqueue_rows` itself, with values the Python API never sends."""
    shop, other = apps
    with psycopg.connect(other) as conn:
        theirs = int(
            enqueue(conn, EmailRequest(to="x@example.com", subject="s", text="t", idempotency_key="k"))
        )
        conn.commit()
    call = sql.SQL("SELECT n, id, written, suppression FROM mailroom.enqueue_rows({})").format(
        sql.SQL(", ").join([sql.Placeholder()] * 31)
    )

    def args(n: int = 1, **given: list[Any]) -> list[Any]:
        """The door's 31 arrays for n plain emails, with `given` columns replaced."""
        columns = {
            "recipient_email": [f"a{i}@example.com" for i in range(n)], "subject": ["Hi"] * n,
            "text_body": ["x"] * n, "headers": ["{}"] * n, "priority": [0] * n, "max_retries": [5] * n,
        }  # fmt: skip
        columns.update(given)
        # the columns of revision 0012, in order
        names = [
            *(c for c in COLUMNS if c not in ("expires_at", "stream", "from_email", "from_name")),
            "dress",
        ]
        return [columns.get(name, [None] * n) for name in names] + [[], [], [], []]

    with psycopg.connect(shop) as conn:
        # Passing for one of Mailroom's producers, reusing another role's key: its own email, its own name.
        rows = conn.execute(call, args(idempotency_key=["k"], created_by=["producer:birthdays"])).fetchall()
        conn.commit()
        assert len(rows) == 1 and rows[0][0] == 1 and rows[0][2] is True
        mine = int(rows[0][1])
        # Campaign email without its dress: stored for the worker to dress, never pending undressed.
        bare = conn.execute(call, args(campaign_id=["news"], transactional=[False])).fetchall()
        conn.commit()
    assert mine != theirs  # the other role's key "k" is not this role's: a new email, never its id
    row = _row(db_url, mine)
    assert row["enqueued_by"] == SHOP and row["created_by"] == SHOP  # not the producer it claimed to be
    campaign = _row(db_url, int(bare[0][1]))
    assert campaign["status"] == "unrendered" and campaign["dress"] == {"track": None}
    refused = [
        # tokens and links it chose: an unsubscribe token it knows would unsubscribe whoever it mailed
        args(unsubscribe_token=["00000000-0000-4000-8000-000000000001"]),
        args(tracking_token=["00000000-0000-4000-8000-000000000002"], track_opens=[True]),
        [*args()[:-4], [1], [0], ["00000000-0000-4000-8000-000000000003"], ["https://evil.example/"]],
    ]
    for given in refused:
        with (
            psycopg.connect(shop) as conn,
            pytest.raises(errors.InsufficientPrivilege, match="made by Mailroom"),
        ):
            conn.execute(call, given)
    # A column one value short would be padded with NULL by unnest: a lost key, a lost flag.
    for given in (
        args(2, idempotency_key=["k1"]),
        args(2, transactional=[False]),
        args(recipient_email=[["a@x.io"]]),
    ):
        with (
            psycopg.connect(shop) as conn,
            pytest.raises(errors.InvalidParameterValue, match="one value per email"),
        ):
            conn.execute(call, given)
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM mailroom.tracked_links").fetchone() == (0,)


def test_an_application_roles_bulk_load_commits_each_batch_before_it_prints_it(
    db_url: str, apps: tuple[str, str], settings: Settings
) -> None:
    """A printed id is a stored email: a batch whose campaign policy was read first is committed too."""
    from worker.core.bulk import enqueue_lines

    shop, _ = apps
    lines = [
        (n, json.dumps({"to": f"r{n}@example.com", "subject": "News", "text": "t", "campaign_id": "news"}))
        for n in (1, 2)
    ]
    committed: list[bool] = []

    def emit(results: list[tuple[int, str]]) -> None:
        ids = [json.loads(text)["id"] for _, text in results]
        with psycopg.connect(db_url) as other:  # another session sees what was printed
            found = other.execute(
                "SELECT count(*) FROM mailroom.email_queue WHERE id = ANY(%s)", (ids,)
            ).fetchone()
        committed.append(found == (len(ids),))

    counts = enqueue_lines(shop, lines, settings, emit, batch_size=1)
    assert counts.accepted == 2 and committed == [True, True]
