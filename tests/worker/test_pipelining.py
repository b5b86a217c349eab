"""SMTP PIPELINING (RFC 2920) in the delivery connection, against the real aiosmtpd sink."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import psycopg
import pytest
from aiosmtplib import SMTPReadTimeoutError, SMTPResponseException
from aiosmtplib.protocol import PERIOD_REGEX, SMTPProtocol, normalize_message_line_endings
from hypothesis import given
from hypothesis import strategies as st

from tests.worker.helpers import add_sender, enqueue_many, run_until_drained, statuses
from worker.core.config import Settings
from worker.core.message import Envelope
from worker.devtools.sink import Drop, RunningSink, SinkHandler
from worker.engine.pipelining import PipeliningProtocol, wire_data
from worker.engine.smtp import SmtpAccount, SmtpConnection

BODY = b"Subject: Hello\r\n\r\nfirst line\r\n.starts with a dot\r\n..two dots\r\n.\r\nlast\r\n"


def _connection(sink: RunningSink, timeout: float = 5.0) -> SmtpConnection:
    return SmtpConnection(SmtpAccount(1, "127.0.0.1", sink.port, "none", None, None, timeout))


def _envelope(recipient: str) -> Envelope:
    return Envelope("noreply@example.org", recipient, f"<{recipient}>", BODY)


async def test_a_server_advertising_pipelining_gets_mail_rcpt_and_data_in_one_write(
    smtp_sink: RunningSink,
) -> None:
    connection = _connection(smtp_sink)
    try:
        first = await connection.send(_envelope("a@example.com"))
        second = await connection.send(_envelope("b@example.com"))
    finally:
        await connection.close()
    assert (first.reply.code, second.reply.code) == (250, 250)
    assert smtp_sink.handler.pipelined_reads == 2
    received = smtp_sink.messages
    assert [m.rcpt_tos for m in received] == [("a@example.com",), ("b@example.com",)]
    assert len({m.peer for m in received}) == 1  # one connection for both
    # Dot-stuffed on the wire, un-stuffed by the server: the body arrives as it was built.
    assert received[0].content == BODY


async def test_the_next_messages_commands_ride_behind_the_body(smtp_sink: RunningSink) -> None:
    connection = _connection(smtp_sink)
    try:
        first = await connection.send(_envelope("a@example.com"), _envelope("b@example.com"))
        second = await connection.send(_envelope("b@example.com"), _envelope("c@example.com"))
        third = await connection.send(_envelope("c@example.com"))
    finally:
        await connection.close()
    assert [r.reply.code for r in (first, second, third)] == [250, 250, 250]
    # One write for the first MAIL, RCPT and DATA; every later message's went out behind a body.
    assert smtp_sink.handler.pipelined_reads == 1
    assert smtp_sink.handler.announced_reads == 2
    received = smtp_sink.messages
    assert [m.rcpt_tos for m in received] == [("a@example.com",), ("b@example.com",), ("c@example.com",)]
    assert len({m.peer for m in received}) == 1
    assert all(m.content == BODY for m in received)


async def test_an_announced_refusal_is_reported_at_its_own_send_and_the_session_stays_in_step(
    smtp_sink: RunningSink,
) -> None:
    smtp_sink.on_rcpt("gone@example.com", "550 5.1.1 User unknown")
    smtp_sink.on_data("toobig@example.com", "552 5.3.4 Message too big")
    connection = _connection(smtp_sink)
    try:
        a = await connection.send(_envelope("a@example.com"), _envelope("gone@example.com"))
        gone = await connection.send(_envelope("gone@example.com"), _envelope("toobig@example.com"))
        toobig = await connection.send(_envelope("toobig@example.com"), _envelope("b@example.com"))
        b = await connection.send(_envelope("b@example.com"))
    finally:
        await connection.close()
    assert (a.reply.code, b.reply.code) == (250, 250)
    assert (gone.reply.code, gone.reply.text, gone.reply.phase) == (550, "5.1.1 User unknown", "rcpt")
    assert (toobig.reply.code, toobig.reply.text, toobig.reply.phase) == (
        552,
        "5.3.4 Message too big",
        "data",
    )
    assert [m.rcpt_tos for m in smtp_sink.messages] == [("a@example.com",), ("b@example.com",)]
    assert len({m.peer for m in smtp_sink.messages}) == 1


async def test_an_announced_message_that_is_not_sent_ends_the_session_without_a_message(
    smtp_sink: RunningSink,
) -> None:
    connection = _connection(smtp_sink)
    try:
        first = await connection.send(_envelope("a@example.com"), _envelope("never@example.com"))
        connection.forget_announced()  # the batch stopped: the server sits after 354, waiting for a body
        after = await connection.send(_envelope("b@example.com"))
    finally:
        await connection.close()
    assert (first.reply.code, after.reply.code) == (250, 250)
    received = smtp_sink.messages
    assert [m.rcpt_tos for m in received] == [("a@example.com",), ("b@example.com",)]
    assert received[0].peer != received[1].peer  # hung up and started again: no empty message went out


async def test_a_different_message_than_the_announced_one_starts_a_new_session(
    smtp_sink: RunningSink,
) -> None:
    connection = _connection(smtp_sink)
    try:
        await connection.send(_envelope("a@example.com"), _envelope("b@example.com"))
        other = await connection.send(_envelope("c@example.com"))
    finally:
        await connection.close()
    assert other.reply.code == 250
    assert [m.rcpt_tos for m in smtp_sink.messages] == [("a@example.com",), ("c@example.com",)]


async def test_a_worker_batch_pipelines_each_message_behind_the_previous_body(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    enqueue_many(db_url, 30)
    assert await run_until_drained(db_url, fast) == 30
    assert statuses(db_url) == {"sent": 30}
    # One slot, one batch: the first message opens with MAIL, RCPT, DATA; the other 29 ride behind a body.
    assert (smtp_sink.handler.pipelined_reads, smtp_sink.handler.announced_reads) == (1, 29)


async def test_a_server_without_pipelining_gets_one_command_at_a_time(
    smtp_sink_factory: Callable[..., RunningSink],
) -> None:
    sink = smtp_sink_factory(handler=SinkHandler(pipelining=False))
    sink.on_rcpt("bad@example.com", "550 5.1.1 User unknown")
    connection = _connection(sink)
    try:
        refused = await connection.send(_envelope("bad@example.com"))
        sent = await connection.send(_envelope("a@example.com"))
    finally:
        await connection.close()
    assert (refused.reply.code, refused.reply.phase) == (550, "rcpt")
    assert sent.reply.code == 250
    assert sink.handler.pipelined_reads == 0
    assert sink.messages[0].content == BODY


async def test_refused_recipients_leave_the_pipelined_connection_usable(smtp_sink: RunningSink) -> None:
    smtp_sink.on_rcpt("gone@example.com", "550 5.1.1 User unknown")
    smtp_sink.on_rcpt("busy@example.com", "450 4.2.1 Mailbox busy")
    connection = _connection(smtp_sink)
    try:
        gone = await connection.send(_envelope("gone@example.com"))
        busy = await connection.send(_envelope("busy@example.com"))
        sent = await connection.send(_envelope("a@example.com"))
    finally:
        await connection.close()
    assert (gone.reply.code, gone.reply.text, gone.reply.phase) == (550, "5.1.1 User unknown", "rcpt")
    assert (busy.reply.code, busy.reply.text, busy.reply.phase) == (450, "4.2.1 Mailbox busy", "rcpt")
    assert sent.reply.code == 250
    assert smtp_sink.handler.pipelined_reads == 3
    assert [m.rcpt_tos for m in smtp_sink.messages] == [("a@example.com",)]


async def test_a_refused_sender_is_reported_at_mail_and_the_next_replies_stay_in_step(
    smtp_sink_factory: Callable[..., RunningSink],
) -> None:
    sink = smtp_sink_factory(auth=("mailer", "secret"))  # MAIL without AUTH gets 530
    connection = _connection(sink)
    try:
        first = await connection.send(_envelope("a@example.com"))
        second = await connection.send(_envelope("b@example.com"))
    finally:
        await connection.close()
    expected = (530, "5.7.0 Authentication required", "mail")
    assert (first.reply.code, first.reply.text, first.reply.phase) == expected
    assert (second.reply.code, second.reply.text, second.reply.phase) == expected
    assert sink.handler.pipelined_reads == 2
    assert sink.messages == []


async def test_421_at_rcpt_drops_the_connection_and_the_next_email_uses_a_new_one(
    smtp_sink: RunningSink,
) -> None:
    smtp_sink.on_rcpt("closing@example.com", "421 4.3.2 Shutting down")
    connection = _connection(smtp_sink)
    try:
        await connection.send(_envelope("before@example.com"))
        closing = await connection.send(_envelope("closing@example.com"))
        dropped = connection._client is None
        after = await connection.send(_envelope("after@example.com"))
    finally:
        await connection.close()
    assert (closing.reply.code, closing.reply.phase) == (421, "rcpt")
    assert dropped
    assert after.reply.code == 250
    before_peer, after_peer = (m.peer for m in smtp_sink.messages)
    assert before_peer != after_peer


async def test_a_drop_mid_pipeline_is_a_transient_failure_and_the_next_email_reconnects(
    smtp_sink: RunningSink,
) -> None:
    smtp_sink.on_rcpt("dropped@example.com", Drop())
    connection = _connection(smtp_sink)
    try:
        dropped = await connection.send(_envelope("dropped@example.com"))
        after = await connection.send(_envelope("after@example.com"))
    finally:
        await connection.close()
    assert dropped.reply.code is None and "Disconnected" in dropped.reply.text
    assert after.reply.code == 250


async def test_a_drop_mid_pipeline_is_retried_by_the_worker(
    db_url: str, fast: Settings, smtp_sink: RunningSink
) -> None:
    add_sender(db_url, smtp_sink.port)
    smtp_sink.on_rcpt("u0@example.com", Drop(), "250 OK")
    enqueue_many(db_url, 2)
    await run_until_drained(db_url, fast, rounds=4)
    assert statuses(db_url) == {"sent": 2}
    assert smtp_sink.handler.pipelined_reads >= 3
    with psycopg.connect(db_url) as conn:
        first = conn.execute(
            "SELECT outcome, smtp_code FROM mailroom.send_logs JOIN mailroom.email_queue e"
            " ON e.id = email_id WHERE e.recipient_email = 'u0@example.com' ORDER BY attempt"
        ).fetchall()
    assert first == [("transient", None), ("sent", 250)]


async def test_replies_arriving_together_in_one_read_are_each_parsed_in_order() -> None:
    """A server that answers MAIL, RCPT and DATA in a single write (multi-line reply included)."""
    wire: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"220 scripted\r\n")
        await reader.readline()  # EHLO
        writer.write(b"250-scripted\r\n250-PIPELINING\r\n250 HELP\r\n")
        wire.append(await reader.readuntil(b"DATA\r\n"))
        writer.write(b"250-2.1.0 sender\r\n250 2.1.0 OK\r\n250 2.1.5 OK\r\n354 go ahead\r\n")
        wire.append(await reader.readuntil(b"\r\n.\r\n"))
        writer.write(b"250 2.0.0 queued\r\n")
        await reader.readline()  # QUIT
        writer.write(b"221 bye\r\n")
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    connection = SmtpConnection(SmtpAccount(1, "127.0.0.1", port, "none", None, None, 5.0))
    try:
        attempt = await connection.send(_envelope("a@example.com"))
    finally:
        await connection.close()
        server.close()
        await server.wait_closed()
    assert (attempt.reply.code, attempt.reply.text) == (250, "2.0.0 queued")
    assert wire[0] == b"MAIL FROM:<noreply@example.org>\r\nRCPT TO:<a@example.com>\r\nDATA\r\n"
    assert wire[1] == BODY.replace(b"\r\n.", b"\r\n..") + b".\r\n"


_reply_line = st.builds(
    lambda code, sep, text, end: code + sep + text + end,
    st.sampled_from([b"250", b"354", b"421", b"550", b"2x0", b"25"]),
    st.sampled_from([b" ", b"-", b"", b"\t"]),
    st.binary(max_size=40).filter(lambda b: b"\n" not in b),
    st.sampled_from([b"\r\n", b"\n", b""]),
)


@given(st.lists(_reply_line, min_size=1, max_size=4))
def test_the_reply_parser_shortcut_reads_exactly_what_aiosmtplib_reads(lines: list[bytes]) -> None:
    data = b"".join(lines)
    loop = asyncio.new_event_loop()
    try:
        ours, theirs = PipeliningProtocol(loop=loop), SMTPProtocol(loop=loop)
    finally:
        loop.close()
    ours._buffer, theirs._buffer = bytearray(data), bytearray(data)
    outcomes = []
    for protocol, parse in (
        (ours, ours._read_response_from_buffer),
        (theirs, theirs._read_response_from_buffer),
    ):
        try:
            outcomes.append((parse(), bytes(protocol._buffer)))
        except SMTPResponseException as exc:
            outcomes.append((exc.code, exc.message))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("length", [8192, 8193])
def test_the_reply_parser_shortcut_keeps_aiosmtplibs_line_limit(length: int) -> None:
    data = b"250 " + b"x" * (length - 6) + b"\r\n"
    loop = asyncio.new_event_loop()
    try:
        ours, theirs = PipeliningProtocol(loop=loop), SMTPProtocol(loop=loop)
    finally:
        loop.close()
    outcomes = []
    for protocol in (ours, theirs):
        protocol._buffer = bytearray(data)
        try:
            outcomes.append(protocol._read_response_from_buffer())
        except SMTPResponseException as exc:
            outcomes.append((exc.code, exc.message))
    assert outcomes[0] == outcomes[1]


_message_bytes = st.lists(
    st.sampled_from([b"a", b".", b"\r", b"\n", b"\r\n", b"\r\n.", b"..", b" ", b"x.y"]), max_size=30
).map(b"".join)


@given(_message_bytes)
def test_the_data_shortcut_writes_exactly_what_aiosmtplibs_data_writes(message: bytes) -> None:
    # aiosmtplib's DATA: line endings to CRLF, a final CRLF, leading dots doubled, then ".\r\n".
    expected = PERIOD_REGEX.sub(b"..", normalize_message_line_endings(message)) + b".\r\n"
    assert wire_data(message) == expected


def test_the_reply_timeout_fails_the_read_as_aiosmtplib_does() -> None:
    async def silent_server() -> None:
        loop = asyncio.get_running_loop()
        protocol = PipeliningProtocol(loop=loop)
        protocol.connection_made(_NullTransport())  # a connection whose server never answers
        with pytest.raises(SMTPReadTimeoutError):
            await protocol.read_response(timeout=0.05)
        # The next reply gets a fresh waiter, as after aiosmtplib's own timeout.
        assert protocol._response_waiter is not None and not protocol._response_waiter.done()

    asyncio.run(silent_server())


class _NullTransport(asyncio.Transport):
    def write(self, data: bytes | bytearray | memoryview) -> None:
        pass

    def is_closing(self) -> bool:
        return False


# Run in a fresh interpreter: the sink's thread in the test process reads with asyncio's plain reads,
# which would show in this process's allocations. argv: the port, then "one" (single-recipient messages,
# each announcing the next) or "many" (messages to two recipients, never pipelined behind a body).
_PEAK_PER_MESSAGE = """
import asyncio, sys, tracemalloc
from worker.core.message import Envelope
from worker.engine.smtp import SmtpAccount, SmtpConnection

BODY = b"Subject: Hi\\r\\n\\r\\nbody\\r\\n"

def envelope(recipient, many):
    if many:
        return Envelope("noreply@example.org", recipient, f"<{recipient}>", BODY, (recipient, "c@example.com"))
    return Envelope("noreply@example.org", recipient, f"<{recipient}>", BODY)

async def main(port, many):
    connection = SmtpConnection(SmtpAccount(1, "127.0.0.1", port, "none", None, None, 5.0))
    upcoming = None if many else envelope("b@example.com", many)
    first = await connection.send(envelope("a@example.com", many), upcoming)
    tracemalloc.start()
    peaks, codes = [], [first.reply.code]
    for n in range(5):
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        attempt = await connection.send(envelope("b@example.com", many), upcoming)
        peaks.append(tracemalloc.get_traced_memory()[1] - before)
        codes.append(attempt.reply.code)
    tracemalloc.stop()
    await connection.close()
    print(max(peaks), *codes)

asyncio.run(main(int(sys.argv[1]), sys.argv[2] == "many"))
"""


@pytest.mark.parametrize("recipients", ["one", "many"])
def test_reading_replies_allocates_no_buffer_per_read(smtp_sink: RunningSink, recipients: str) -> None:
    """asyncio's plain reads allocate the transport's read limit (256 KiB) for every read: above
    glibc's mmap threshold, an mmap, an mremap and a munmap per reply group. The connection reads
    into a buffer of its own from the moment it is open, so sending a message, pipelined or one
    recipient at a time, allocates a few KiB."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _PEAK_PER_MESSAGE, str(smtp_sink.port), recipients],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    peak, *codes = (int(word) for word in done.stdout.split())
    assert codes == [250] * 6
    assert peak < 64 * 1024, f"{peak} bytes allocated at the peak of one message's sending"
    assert len(smtp_sink.messages) == (12 if recipients == "many" else 6)
