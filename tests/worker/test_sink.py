"""The SMTP sink, exercised with a real SMTP client (aiosmtplib) over TCP."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import smtplib
import sys
from email.message import EmailMessage
from pathlib import Path

import aiosmtplib
import pytest

from tests.fixtures_smtp import SinkFactory
from worker.devtools.sink import Drop, RefuseShare, Reply, RunningSink, Stall, serve_forever, start_sink
from worker.devtools.sink_handler import SinkHandler

SENDER = "noreply@mailroom.test"


def make_message(
    to: str, subject: str = "Your receipt", body: str = "Thanks for your order."
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)
    return message


def client(sink: RunningSink | int, timeout: float = 5.0) -> aiosmtplib.SMTP:
    port = sink if isinstance(sink, int) else sink.port
    return aiosmtplib.SMTP(
        hostname="127.0.0.1", port=port, timeout=timeout, start_tls=False, local_hostname="client.test"
    )


async def send(sink: RunningSink, to: str, subject: str = "Your receipt", read_timeout: float = 5.0) -> str:
    """Send one message over a fresh connection, as the worker does; returns the server's final reply."""
    async with client(sink, read_timeout) as smtp:
        _, reply = await smtp.send_message(make_message(to, subject), sender=SENDER, recipients=[to])
    return reply


# ---- storing ---------------------------------------------------------------------------------------------


async def test_accepted_message_is_stored_with_envelope_raw_bytes_and_parsed_message(
    smtp_sink: RunningSink,
) -> None:
    reply = await send(smtp_sink, "alice@example.com", subject="Hello Alice")

    assert await smtp_sink.wait_for(1)
    [received] = smtp_sink.messages
    assert reply.startswith("2.0.0 OK: queued as ")
    assert reply.endswith(received.queue_id)
    assert received.mail_from == SENDER
    assert received.rcpt_tos == ("alice@example.com",)
    assert b"Subject: Hello Alice" in received.content
    assert received.message["Subject"] == "Hello Alice"
    body = received.message.get_body(("plain",))
    assert body is not None
    assert body.get_content().strip() == "Thanks for your order."
    assert received.received_at.tzinfo is not None
    assert received.login is None


async def test_port_zero_binds_a_real_free_port_and_each_sink_gets_its_own(
    smtp_sink_factory: SinkFactory,
) -> None:
    first, second = smtp_sink_factory(), smtp_sink_factory()

    assert first.port > 0
    assert second.port > 0
    assert first.port != second.port
    assert first.running


def test_starting_on_a_port_already_in_use_raises(smtp_sink: RunningSink) -> None:
    with pytest.raises(OSError):  # noqa: PT011 - the errno differs by platform
        start_sink(port=smtp_sink.port)


async def test_messages_to_filters_by_envelope_recipient(smtp_sink: RunningSink) -> None:
    await send(smtp_sink, "alice@example.com")
    await send(smtp_sink, "bob@example.com")
    await send(smtp_sink, "Alice@Example.com")

    assert await smtp_sink.wait_for(3)
    assert len(smtp_sink.messages_to("alice@example.com")) == 2
    assert len(smtp_sink.messages_to("bob@example.com")) == 1


async def test_maildir_gets_one_file_per_accepted_message(
    smtp_sink_factory: SinkFactory, tmp_path: Path
) -> None:
    maildir = tmp_path / "mail" / "inbox"
    sink = smtp_sink_factory(maildir=maildir)

    await send(sink, "alice@example.com", subject="Stored on disk")

    assert await sink.wait_for(1)
    [path] = list((maildir / "new").iterdir())
    assert b"Subject: Stored on disk" in path.read_bytes()


async def test_an_existing_empty_maildir_gets_its_folders_and_keeps_every_message(
    smtp_sink_factory: SinkFactory, tmp_path: Path
) -> None:
    # `mkdir mail && mailroom sink --maildir mail`: the folder is there, its tmp/new/cur are not.
    maildir = tmp_path / "mail"
    maildir.mkdir()
    sink = smtp_sink_factory(maildir=maildir)

    await send(sink, "alice@example.com", subject="First")
    await send(sink, "alice@example.com", subject="Second")

    assert await sink.wait_for(2)
    assert sorted(p.read_bytes().count(b"Subject: ") for p in (maildir / "new").iterdir()) == [1, 1]


async def test_a_maildir_that_cannot_be_written_answers_451_and_the_next_message_is_taken(
    smtp_sink_factory: SinkFactory, tmp_path: Path
) -> None:
    maildir = tmp_path / "mail"
    sink = smtp_sink_factory(maildir=maildir)
    (maildir / "tmp").rmdir()  # the Maildir vanishes under the running sink

    async with aiosmtplib.SMTP(hostname=sink.host, port=sink.port) as client:
        with pytest.raises(aiosmtplib.SMTPDataError) as refused:
            await client.sendmail("a@example.com", ["b@example.com"], b"Subject: lost\r\n\r\nx\r\n")
        (maildir / "tmp").mkdir()
        # The same connection goes on: no "503 nested MAIL command".
        await client.sendmail("a@example.com", ["b@example.com"], b"Subject: kept\r\n\r\nx\r\n")

    assert refused.value.code == 451
    assert [m.message["Subject"] for m in sink.messages] == ["kept"]


async def test_wait_for_returns_false_when_too_few_messages_arrive(smtp_sink: RunningSink) -> None:
    await send(smtp_sink, "alice@example.com")

    assert await smtp_sink.wait_for(1, timeout=0.05)
    assert not await smtp_sink.wait_for(2, timeout=0.05)


async def test_wait_for_sync_blocks_a_thread_until_the_message_arrives(smtp_sink: RunningSink) -> None:
    waiting = asyncio.create_task(asyncio.to_thread(smtp_sink.wait_for_sync, 1, 5.0))

    await send(smtp_sink, "alice@example.com")

    assert await waiting


async def test_keep_bounds_the_messages_held_but_wait_for_counts_them_all(
    smtp_sink_factory: SinkFactory,
) -> None:
    sink = smtp_sink_factory(keep=2)

    for name in ("ann", "ben", "cat"):
        await send(sink, f"{name}@example.com")

    assert await sink.wait_for(3)
    assert sink.handler.received_count == 3
    assert [m.rcpt_tos for m in sink.messages] == [("ben@example.com",), ("cat@example.com",)]


def test_stdlib_smtplib_client_is_accepted_too(smtp_sink: RunningSink) -> None:
    with smtplib.SMTP("127.0.0.1", smtp_sink.port, local_hostname="client.test", timeout=5) as smtp:
        smtp.send_message(make_message("carol@example.com"))

    assert smtp_sink.wait_for_sync(1)
    assert smtp_sink.messages[0].rcpt_tos == ("carol@example.com",)


# ---- scripted replies ------------------------------------------------------------------------------------


async def test_scripted_rcpt_sequence_answers_450_then_250(smtp_sink: RunningSink) -> None:
    rule = smtp_sink.on_rcpt("bob@example.com", "450 4.2.0 Mailbox busy", "250 2.1.5 OK")

    with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as refused:
        await send(smtp_sink, "bob@example.com")
    await send(smtp_sink, "bob@example.com")

    [error] = refused.value.recipients
    assert (error.code, error.message, error.recipient) == (450, "4.2.0 Mailbox busy", "bob@example.com")
    assert await smtp_sink.wait_for(1)
    assert rule.hits == 2


async def test_rcpt_sequence_421_450_451_is_consumed_one_per_attempt_then_accepts(
    smtp_sink: RunningSink,
) -> None:
    smtp_sink.on_rcpt(
        "bob@example.com", "421 4.3.0 Try again later", "450 4.2.0 Busy", "451 4.3.0 Error", "250 OK"
    )

    codes = []
    for _ in range(3):
        with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as refused:
            await send(smtp_sink, "bob@example.com")
        codes.append(refused.value.recipients[0].code)
    await send(smtp_sink, "bob@example.com")
    await send(smtp_sink, "bob@example.com")

    assert codes == [421, 450, 451]
    assert await smtp_sink.wait_for(2)


async def test_421_reply_is_followed_by_the_server_hanging_up(smtp_sink: RunningSink) -> None:
    smtp_sink.on_rcpt("bob@example.com", "421 4.3.0 Shutting down")

    async with client(smtp_sink) as smtp:
        await smtp.ehlo()
        await smtp.mail(SENDER)
        with pytest.raises(aiosmtplib.SMTPRecipientRefused) as refused:
            await smtp.rcpt("bob@example.com")
        assert refused.value.code == 421
        assert not smtp.is_connected


async def test_single_scripted_reply_repeats_for_every_attempt(smtp_sink: RunningSink) -> None:
    rule = smtp_sink.on_rcpt("gone@example.com", "550 5.1.1 User unknown")

    for _ in range(3):
        with pytest.raises(aiosmtplib.SMTPRecipientsRefused):
            await send(smtp_sink, "gone@example.com")

    assert rule.hits == 3
    assert smtp_sink.messages == []


async def test_rcpt_550_5_1_1_shows_code_and_enhanced_status_to_the_client(smtp_sink: RunningSink) -> None:
    smtp_sink.on_rcpt("gone@example.com", "550 5.1.1 User unknown")

    async with client(smtp_sink) as smtp:
        await smtp.ehlo()
        await smtp.mail(SENDER)
        with pytest.raises(aiosmtplib.SMTPRecipientRefused) as refused:
            await smtp.rcpt("gone@example.com")
        accepted = await smtp.rcpt("alice@example.com")

    assert isinstance(refused.value, aiosmtplib.SMTPResponseException)
    assert refused.value.code == 550
    assert refused.value.message == "5.1.1 User unknown"
    assert accepted.code == 250


async def test_data_550_5_1_1_is_raised_as_data_error_and_nothing_is_stored(smtp_sink: RunningSink) -> None:
    smtp_sink.on_data("gone@example.com", Reply(550, "5.1.1 User unknown"))

    with pytest.raises(aiosmtplib.SMTPDataError) as refused:
        await send(smtp_sink, "gone@example.com")

    assert (refused.value.code, refused.value.message) == (550, "5.1.1 User unknown")
    assert smtp_sink.messages == []


async def test_predicate_rule_matches_every_address_it_accepts(smtp_sink: RunningSink) -> None:
    smtp_sink.on_rcpt(lambda address: address.endswith("@blocked.example"), "554 5.7.1 Relay denied")

    with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as first:
        await send(smtp_sink, "a@blocked.example")
    with pytest.raises(aiosmtplib.SMTPRecipientsRefused) as second:
        await send(smtp_sink, "b@blocked.example")
    await send(smtp_sink, "c@allowed.example")

    assert first.value.recipients[0].code == second.value.recipients[0].code == 554
    assert await smtp_sink.wait_for(1)


async def test_clear_forgets_messages_and_rules(smtp_sink: RunningSink) -> None:
    smtp_sink.on_rcpt("bob@example.com", "550 5.1.1 User unknown")
    await send(smtp_sink, "alice@example.com")
    assert await smtp_sink.wait_for(1)

    smtp_sink.clear()
    await send(smtp_sink, "bob@example.com")

    assert await smtp_sink.wait_for(1)
    assert [m.rcpt_tos for m in smtp_sink.messages] == [("bob@example.com",)]


async def test_drop_during_data_disconnects_the_client_and_stores_nothing(smtp_sink: RunningSink) -> None:
    smtp_sink.on_data("alice@example.com", Drop(), "250 2.0.0 OK")

    with pytest.raises(aiosmtplib.SMTPServerDisconnected):
        await send(smtp_sink, "alice@example.com")
    await send(smtp_sink, "alice@example.com")

    assert await smtp_sink.wait_for(1)
    assert len(smtp_sink.messages) == 1


async def test_drop_at_rcpt_disconnects_the_client(smtp_sink: RunningSink) -> None:
    smtp_sink.on_rcpt("alice@example.com", Drop())

    async with client(smtp_sink) as smtp:
        await smtp.ehlo()
        await smtp.mail(SENDER)
        with pytest.raises(aiosmtplib.SMTPServerDisconnected):
            await smtp.rcpt("alice@example.com")


async def test_stall_at_data_makes_a_client_with_short_timeout_time_out(smtp_sink: RunningSink) -> None:
    smtp_sink.on_data("alice@example.com", Stall())

    with pytest.raises(aiosmtplib.SMTPTimeoutError):
        await send(smtp_sink, "alice@example.com", read_timeout=0.5)

    assert smtp_sink.messages == []


async def test_stall_at_rcpt_makes_a_client_with_short_timeout_time_out(smtp_sink: RunningSink) -> None:
    smtp_sink.on_rcpt("alice@example.com", Stall(), "250 OK")

    with pytest.raises(aiosmtplib.SMTPTimeoutError):
        await send(smtp_sink, "alice@example.com", read_timeout=0.5)
    await send(smtp_sink, "alice@example.com")

    assert await smtp_sink.wait_for(1)


async def test_timed_stall_then_carries_on_and_accepts(smtp_sink: RunningSink) -> None:
    smtp_sink.on_data("alice@example.com", Stall(seconds=0.05))

    await send(smtp_sink, "alice@example.com")

    assert await smtp_sink.wait_for(1)


async def test_stop_hangs_up_on_connected_clients(smtp_sink_factory: SinkFactory) -> None:
    sink = smtp_sink_factory()
    smtp = client(sink)
    await smtp.connect()
    sink.on_data("alice@example.com", Stall())

    sink.stop()

    with pytest.raises(aiosmtplib.SMTPServerDisconnected):
        await smtp.noop()
    smtp.close()
    assert not sink.running


def test_invalid_scripted_reply_is_rejected_when_scripted(smtp_sink: RunningSink) -> None:
    with pytest.raises(ValueError, match="not an SMTP reply line"):
        smtp_sink.on_rcpt("bob@example.com", "busy, try later")
    with pytest.raises(ValueError, match="200-599"):
        Reply(700, "nope")


# ---- AUTH ------------------------------------------------------------------------------------------------


async def test_auth_with_wrong_password_is_refused_with_535_5_7_8(smtp_sink_factory: SinkFactory) -> None:
    sink = smtp_sink_factory(auth=("mailroom", "s3cret"))

    async with client(sink) as smtp:
        with pytest.raises(aiosmtplib.SMTPAuthenticationError) as refused:
            await smtp.login("mailroom", "wrong")

    assert refused.value.code == 535
    assert refused.value.message.startswith("5.7.8")


@pytest.mark.parametrize("mechanism", ["auth_plain", "auth_login"])
async def test_auth_with_right_credentials_accepts_mail_and_records_the_login(
    smtp_sink_factory: SinkFactory, mechanism: str
) -> None:
    sink = smtp_sink_factory(auth=("mailroom", "s3cret"))

    async with client(sink) as smtp:
        await smtp.ehlo()
        assert smtp.supports_extension("auth")
        await getattr(smtp, mechanism)("mailroom", "s3cret")
        await smtp.send_message(make_message("alice@example.com"))

    assert await sink.wait_for(1)
    assert sink.messages[0].login == "mailroom"


async def test_mail_without_auth_is_refused_with_530_when_auth_is_configured(
    smtp_sink_factory: SinkFactory,
) -> None:
    sink = smtp_sink_factory(auth=("mailroom", "s3cret"))

    async with client(sink) as smtp:
        with pytest.raises(aiosmtplib.SMTPSenderRefused) as refused:
            await smtp.send_message(make_message("alice@example.com"))

    assert (refused.value.code, refused.value.message) == (530, "5.7.0 Authentication required")


async def test_auth_is_not_offered_when_no_credentials_are_configured(smtp_sink: RunningSink) -> None:
    async with client(smtp_sink) as smtp:
        await smtp.ehlo()
        assert not smtp.supports_extension("auth")


@pytest.mark.e2e
async def test_mailroom_sink_takes_any_login_so_an_account_with_a_username_can_send(tmp_path: Path) -> None:
    # A sender account with --username logs in first: the sink offered no AUTH, and the worker
    # suspended the account on its first send.
    script = Path(sys.executable).with_name("mailroom")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILROOM_")}
    sink = await asyncio.create_subprocess_exec(
        str(script), "sink", "--port", "0", env={**env, "MAILROOM_HOME": str(tmp_path)},
        stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert sink.stderr is not None
    try:
        started = (await asyncio.wait_for(sink.stderr.readline(), 30)).decode()
        assert started.rstrip().endswith(", any login accepted (AUTH PLAIN, LOGIN)"), started
        port = int(started.split("sink listening on 127.0.0.1:")[1].split(",")[0])
        for mechanism in ("auth_plain", "auth_login"):
            smtp = client(port)
            greeting = await smtp.connect()
            assert "any login accepted" in greeting.message
            await smtp.ehlo()
            assert smtp.supports_extension("auth")
            await getattr(smtp, mechanism)("mailer", "whatever-password")
            await smtp.send_message(make_message("alice@example.com"))
            await smtp.quit()
    finally:
        sink.send_signal(signal.SIGINT)
        rest = (await asyncio.wait_for(sink.stderr.read(), 30)).decode()
        assert await sink.wait() == 0
    assert rest.count("sink received ") == 2, rest


def test_a_sink_taking_any_login_off_the_loopback_interface_keeps_auth_for_tls() -> None:
    # It has no TLS: there, a login would cross the network readable by anyone on the path.
    handler = SinkHandler(any_login=True)
    assert handler._smtp_kwargs(loopback=True)["auth_require_tls"] is False
    assert handler._smtp_kwargs(loopback=False)["auth_require_tls"] is True


# ---- refuse_share ----------------------------------------------------------------------------------------


async def test_refuse_share_sink_refuses_exactly_the_predicted_recipients(
    smtp_sink_factory: SinkFactory,
) -> None:
    share = RefuseShare(temporary=0.3, permanent=0.3)
    sink = smtp_sink_factory(refuse_share=share)
    addresses = [f"user{i}@example.com" for i in range(20)]

    async with client(sink) as smtp:
        await smtp.ehlo()
        await smtp.mail(SENDER)
        observed: dict[str, int] = {}
        messages: set[str] = set()
        for address in addresses:
            try:
                observed[address] = (await smtp.rcpt(address)).code
            except aiosmtplib.SMTPRecipientRefused as refused:
                observed[address] = refused.code
                messages.add(refused.message)

    expected = {a: (r.code if (r := share.reply_for(a)) else 250) for a in addresses}
    assert observed == expected
    assert {250, 450, 550} <= set(observed.values())
    assert messages == {"4.2.1 Mailbox temporarily unavailable", "5.1.1 User unknown"}


# ---- masking and the CLI server --------------------------------------------------------------------------


async def test_serve_forever_serves_until_cancelled_and_logs_masked_recipients(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="worker.devtools.sink")
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.create_task(serve_forever(port=0, on_ready=ready.set_result))
    port = await ready

    async with client(port) as smtp:
        await smtp.send_message(make_message("alice@example.com"))
    server.cancel()
    with pytest.raises(asyncio.CancelledError):
        await server

    received = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sink received")]
    assert len(received) == 1
    assert "ali***@example.com" in received[0]
    assert "alice@example.com" not in caplog.text
