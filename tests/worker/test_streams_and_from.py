"""Message streams and a From per email, against a real worker and real SMTP servers: campaign mail never
leaves through a transactional-only account with both streams due; an email's own From goes out only
through an account that may send for its domain, DKIM-aligned; a From no account may send is refused at
every door."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import dkim as dkimpy
import psycopg
import pytest
from psycopg import errors

from mailroom import BatchValidationError, EmailRequest, ValidationError, enqueue, enqueue_many
from tests.cli import run
from tests.fixtures_db import TEST_POSTAL_ADDRESS, drop_roles, role_url
from tests.fixtures_smtp import SinkFactory
from tests.worker.helpers import run_until_drained
from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.core.dkim import dns_record, normalise_private_key
from worker.ops import roles
from worker.ops.senders import SenderSpec, add_sender

pytestmark = pytest.mark.usefixtures("role_lock")

SHOP = "mr_streams_shop"


@pytest.fixture
def shop(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("MAILROOM_POSTAL_ADDRESS", TEST_POSTAL_ADDRESS)
    with psycopg.connect(db_url) as conn:
        roles.grant(conn, "app", SHOP, create=True, actor="tester")
    try:
        yield role_url(db_url, SHOP)
    finally:
        drop_roles(db_url, SHOP)


def _account(
    db_url: str, settings: Settings, name: str, port: int, pem: bytes | None = None, **spec: object
) -> None:
    dkim = {"dkim_domain": "example.org", "dkim_selector": "mail2026"} if pem else {}
    with psycopg.connect(db_url) as conn:
        account = SenderSpec(
            name, f"{name}@example.org", "127.0.0.1", port, smtp_security="none", **dkim, **spec
        )  # type: ignore[arg-type]
        add_sender(conn, account, None, SecretBox(settings.secret_key or ""), pem)


async def test_campaign_mail_never_leaves_through_a_transactional_account_with_both_streams_due(
    db_url: str, shop: str, settings: Settings, smtp_sink_factory: SinkFactory
) -> None:
    resets, news = smtp_sink_factory(), smtp_sink_factory()
    _account(db_url, settings, "resets", resets.port, streams=["transactional"])
    _account(db_url, settings, "news", news.port, streams=["broadcast"])
    with psycopg.connect(
        db_url
    ) as conn:  # the owner dresses campaign mail at enqueue (an app's: the renderer)
        requests = []
        for i in range(150):  # interleaved, so every claim finds both streams due
            requests.append(EmailRequest(to=f"r{i}@example.com", subject=f"Reset {i}", text="Your code."))
            requests.append(
                EmailRequest(to=f"n{i}@example.com", subject=f"News {i}", text="Sale.", campaign_id="autumn")
            )
        enqueue_many(conn, requests)
    with psycopg.connect(db_url) as conn:
        streams = dict(
            conn.execute("SELECT stream, count(*) FROM mailroom.email_queue GROUP BY 1").fetchall()
        )
    assert streams == {"transactional": 150, "broadcast": 150}
    assert await run_until_drained(db_url, settings, concurrency=4) == 300
    assert sorted(m.rcpt_tos[0][0] for m in resets.messages) == ["r"] * 150
    assert sorted(m.rcpt_tos[0][0] for m in news.messages) == ["n"] * 150
    with psycopg.connect(db_url) as conn:
        wrong = conn.execute(
            "SELECT count(*) FROM mailroom.email_queue q JOIN mailroom.sender_accounts s"
            " ON s.id = q.sender_account_id WHERE NOT q.stream = ANY(s.streams)"
        ).fetchone()
    assert wrong == (0,)


def _verifies(message: bytes, pem: bytes) -> bool:
    record = dns_record(normalise_private_key(pem)).encode("ascii")

    def lookup(name: bytes, timeout: int = 5) -> bytes | None:
        return record if name == b"mail2026._domainkey.example.org." else None

    return bool(dkimpy.verify(message, dnsfunc=lookup))


async def test_an_email_with_its_own_from_leaves_through_an_account_that_may_send_for_it_signed(
    db_url: str, shop: str, settings: Settings, smtp_sink_factory: SinkFactory, pem: bytes
) -> None:
    plain, billing = smtp_sink_factory(), smtp_sink_factory()
    _account(db_url, settings, "plain", plain.port)  # may send for example.org only (its own From's domain)
    _account(
        db_url, settings, "billing", billing.port, pem, from_domains=["billing.example.org", "example.org"]
    )
    with psycopg.connect(shop) as conn:
        own = enqueue(
            conn,
            EmailRequest(
                to="ada@example.com", subject="Invoice", text="Attached.",
                from_email="Invoices@Billing.Example.org", from_name="Example Billing",
            ),
        )  # fmt: skip
        (from_sql,) = conn.execute(
            "SELECT mailroom.enqueue(ARRAY['bob@example.com'], 'Invoice', 'x', from_email => 'invoices@billing.example.org')"
        ).fetchone()  # type: ignore[misc]
    assert await run_until_drained(db_url, settings) == 2
    assert plain.messages == []
    ada, bob = sorted(billing.messages, key=lambda m: m.rcpt_tos[0])
    assert ada.message["From"] == "Example Billing <Invoices@billing.example.org>"
    assert bob.message["From"] == "invoices@billing.example.org"
    assert ada.mail_from == "billing@example.org"  # bounces go to the account, whatever the From
    assert _verifies(ada.content, pem)
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT id, from_email FROM mailroom.email_queue ORDER BY id").fetchall()
    assert rows == [(own, "Invoices@billing.example.org"), (from_sql, "invoices@billing.example.org")]


def test_a_from_no_account_of_the_stream_may_send_is_refused_at_every_door(
    db_url: str,
    shop: str,
    settings: Settings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _account(db_url, settings, "resets", 2525, streams=["transactional"], from_domains=["example.org"])
    with psycopg.connect(shop) as conn:
        with pytest.raises(
            ValidationError, match=r"no sender account of stream 'transactional' may send for evil\.example"
        ) as refused:
            enqueue(
                conn, EmailRequest(to="a@example.com", subject="s", text="t", from_email="ceo@evil.example")
            )
        assert refused.value.field == "from_email"
        # example.org is sent for, but by no account of the broadcast stream
        with pytest.raises(BatchValidationError) as batch:
            enqueue_many(
                conn,
                [
                    EmailRequest(to="a@example.com", subject="s", text="t", from_email="x@example.org"),
                    EmailRequest(
                        to="b@example.com",
                        subject="s",
                        text="t",
                        from_email="x@example.org",
                        stream="broadcast",
                    ),
                ],
            )
        assert batch.value.index == 1 and batch.value.field == "from_email"
        with pytest.raises(ValidationError, match="stream: a name"):
            enqueue(conn, EmailRequest(to="a@example.com", subject="s", text="t", stream="Bulk Mail"))
        with pytest.raises(ValidationError, match="from_name: only with a from_email"):
            enqueue(conn, EmailRequest(to="a@example.com", subject="s", text="t", from_name="CEO"))
        with pytest.raises(ValidationError, match="from_name: control character"):
            enqueue(
                conn,
                EmailRequest(
                    to="a@example.com",
                    subject="s",
                    text="t",
                    from_email="x@example.org",
                    from_name="A\r\nBcc: v@x.y",
                ),
            )
    with psycopg.connect(shop, autocommit=True) as conn:
        with pytest.raises(errors.InvalidParameterValue, match="from_email: no sender account"):
            conn.execute(
                "SELECT mailroom.enqueue(ARRAY['a@example.com'], 's', 't', from_email => 'ceo@evil.example')"
            )
        with pytest.raises(errors.InvalidParameterValue, match="from_email: no sender account"):
            conn.execute(
                "SELECT * FROM mailroom.enqueue_rows(ARRAY['a@example.com'], ARRAY[NULL], ARRAY['s'], ARRAY['t'],"
                " ARRAY[NULL], ARRAY['{}'::jsonb], ARRAY[NULL], ARRAY[NULL], ARRAY[NULL::jsonb], ARRAY[0],"
                " ARRAY[NULL::timestamptz], ARRAY[5], ARRAY[NULL], ARRAY[NULL], ARRAY[true], ARRAY[NULL],"
                " ARRAY[NULL], ARRAY[NULL], ARRAY[NULL::uuid], ARRAY[NULL::uuid], ARRAY[false], ARRAY[false],"
                " ARRAY[NULL], ARRAY[NULL], ARRAY[NULL], ARRAY[NULL], ARRAY[NULL::jsonb],"
                " from_email => ARRAY['ceo@evil.example'])"
            )
    monkeypatch.setenv("MAILROOM_DATABASE_URL", shop)
    lines = [
        {"to": "a@example.com", "subject": "s", "text": "t", "from_email": "ceo@evil.example"},
        {"to": "b@example.com", "subject": "s", "text": "t", "from_email": "billing@example.org"},
    ]
    code, out, err = run(
        capsys, "enqueue", stdin="\n".join(json.dumps(line) for line in lines), monkeypatch=monkeypatch
    )
    results = [json.loads(line) for line in out.splitlines()]
    assert code == 1 and "1 accepted, 1 rejected" in err, err
    assert results[0]["field"] == "from_email" and "id" in results[1]
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT recipient_email FROM mailroom.email_queue").fetchall() == [
            ("b@example.com",)
        ]


def test_senders_add_and_edit_set_streams_and_from_domains_aligned_with_dkim(
    db_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pem: bytes,
    secret_key: str,
) -> None:
    monkeypatch.setenv("MAILROOM_DATABASE_URL", db_url)
    monkeypatch.setenv("MAILROOM_SECRET_KEY", secret_key)
    base = [
        "senders",
        "add",
        "news",
        "--from",
        "news@example.org",
        "--host",
        "127.0.0.1",
        "--port",
        "2525",
        "--security",
        "none",
    ]
    code, _, err = run(capsys, *base, "--streams", "broadcast", "--from-domain", "News.Example.org")
    assert code == 0, err
    code, out, _ = run(capsys, "senders", "list")
    assert "broadcast" in out and "an email's own From may be in news.example.org" in out
    # no DKIM key: aligned with the return path's domain (its From's), else DMARC fails
    code, _, err = run(capsys, "senders", "edit", "news", "--from-domain", "elsewhere.example")
    assert code == 2 and "not aligned with the account's return path's domain example.org" in err
    code, _, err = run(capsys, "senders", "edit", "news", "--streams", "Bulk_Mail")
    assert code == 2 and "streams" in err
    code, _, err = run(
        capsys, "senders", "edit", "news", "--streams", "broadcast,receipts", "--from-domain", ""
    )
    assert code == 0, err
    code, out, _ = run(capsys, "senders", "list", "--json")
    (news,) = json.loads(out)
    assert news["streams"] == ["broadcast", "receipts"] and news["from_domains"] == ["example.org"]
    key = tmp_path / "dkim.pem"
    key.write_bytes(pem)
    signed = [*base[:2], "signed", *base[3:], "--dkim-domain", "example.org", "--dkim-selector", "s1"]
    signed += ["--dkim-key-file", str(key)]
    code, _, err = run(capsys, *signed, "--from-domain", "elsewhere.example")
    assert code == 2 and "not aligned with the account's DKIM domain example.org" in err
    code, _, err = run(capsys, *signed, "--from-domain", "mail.example.org")
    assert code == 0, err
    code, _, err = run(capsys, "senders", "edit", "signed", "--from-domain", "example.net")
    assert code == 2 and "not aligned" in err


async def test_a_stream_no_usable_account_serves_is_a_health_reason_and_drain_stops_saying_so(
    db_url: str,
    settings: Settings,
    smtp_sink_factory: SinkFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from worker.ops.health import check_health, undeliverable
    from worker.ops.metrics import DatabaseGauges

    resets = smtp_sink_factory()
    _account(db_url, settings, "resets", resets.port, streams=["transactional"])
    monkeypatch.setenv("MAILROOM_POSTAL_ADDRESS", TEST_POSTAL_ADDRESS)
    with psycopg.connect(db_url) as conn:
        enqueue_many(
            conn,
            [
                EmailRequest(to="r@example.com", subject="Reset", text="Code."),
                EmailRequest(to="n@example.com", subject="News", text="Sale.", campaign_id="autumn"),
            ],
        )
    # a draining worker sends what it can and stops (it would otherwise wait for ever for the news)
    assert await run_until_drained(db_url, settings) == 1
    with psycopg.connect(db_url) as conn:
        report = check_health(conn, settings)
        stuck = undeliverable(conn, settings)
    (finding,) = [f for f in report.findings if f.kind == "stream_without_sender"]
    assert "1 emails of stream broadcast are due and no usable sender account serves" in finding.text
    assert not report.ok and stuck is not None and stuck.kind == "stream_without_sender"
    monkeypatch.setenv("MAILROOM_DATABASE_URL", db_url)
    code, out, _ = run(capsys, "stats")
    assert (
        code == 0 and "stream broadcast: 1 waiting, 1 due now, 0 being sent; sent by no sender account" in out
    )
    assert "sender resets (transactional)" in out
    gauges = DatabaseGauges(db_url, settings)
    try:
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for f in gauges.collect() for s in f.samples
        }
    finally:
        gauges.close()
    assert samples[("mailroom_stream_due_emails", (("stream", "broadcast"),))] == 1
    assert samples[("mailroom_sender_stream", (("sender", "resets"), ("stream", "transactional")))] == 1
    assert ("mailroom_sender_stream", (("sender", "resets"), ("stream", "broadcast"))) not in samples


async def test_an_account_serving_two_streams_takes_turns_so_neither_waits_behind_the_other(
    db_url: str, settings: Settings, smtp_sink_factory: SinkFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = smtp_sink_factory()
    _account(db_url, settings, "both", sink.port, batch_size=10)  # transactional and broadcast, by default
    monkeypatch.setenv("MAILROOM_POSTAL_ADDRESS", TEST_POSTAL_ADDRESS)
    with psycopg.connect(db_url) as conn:  # all the resets first, then all the news: a backlog of each
        enqueue_many(
            conn, [EmailRequest(to=f"r{i}@example.com", subject="Reset", text="x") for i in range(60)]
        )
        enqueue_many(
            conn,
            [
                EmailRequest(to=f"n{i}@example.com", subject="News", text="x", campaign_id="c")
                for i in range(60)
            ],
        )
    assert await run_until_drained(db_url, settings) == 120
    order = [m.rcpt_tos[0][0] for m in sink.messages]
    # batches of ten alternate between the streams: neither waits for the other's backlog to drain
    assert set(order[:30]) == {"r", "n"} and set(order[-30:]) == {"r", "n"}
