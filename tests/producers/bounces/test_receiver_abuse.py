"""The bounce receiver under abuse, over raw SMTP from 127.0.0.0/8: connection caps, command budgets,
idle timeouts, per-session messages, a rate limit a flood cannot wipe, and one neutral reply."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys

import psycopg
import pytest

from tests.fixtures_smtp import until_closed
from tests.producers.bounces.corpus import BOUNCE_DOMAIN, FIXTURE_KEY, load, readdress, sent_email
from tests.producers.bounces.receivers import ReceiverFactory
from worker.core.return_path import return_path
from worker.producers.bounces.receiver import (
    ACCEPTED,
)

BOUND = 10.0  # generous: every wait on the server is cut off here, never asserted as a duration
TO = f"bounces@{BOUNCE_DOMAIN}"
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _connect(port: int, source: str = "127.0.0.1") -> Streams:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _reply(reader: asyncio.StreamReader) -> bytes:
    """One whole SMTP reply (its last line), or b"" at end of stream."""
    async with asyncio.timeout(BOUND):
        while True:
            line = await reader.readline()
            if not line or line[3:4] != b"-":
                return line.rstrip(b"\r\n")


async def _command(streams: Streams, line: bytes) -> bytes:
    reader, writer = streams
    writer.write(line + b"\r\n")
    await writer.drain()
    return await _reply(reader)


def _close(streams: Streams) -> None:
    streams[1].close()


async def test_a_client_over_its_connection_cap_is_refused_421_at_connect_and_others_are_not(
    receiver: ReceiverFactory,
) -> None:
    server = await receiver(connections_per_client=3)
    held = [await _connect(server.port) for _ in range(3)]
    for streams in held:
        assert (await _reply(streams[0])).startswith(b"220 ")
    reader, writer = await _connect(server.port)
    refusal = await until_closed(reader)
    assert refusal.startswith(b"421 4.7.0 ")
    writer.close()
    other = await _connect(server.port, "127.0.0.2")  # another client is not counted with the first
    assert (await _reply(other[0])).startswith(b"220 ")
    # one of the three leaves: the first client may connect again
    assert (await _command(held[0], b"QUIT")).startswith(b"221")
    await until_closed(held[0][0])
    again = await _connect(server.port)
    assert (await _reply(again[0])).startswith(b"220 ")
    for streams in [*held, other, again]:
        _close(streams)


@pytest.mark.parametrize("command", [b"NOOP", b"RSET", b"HELP"])
async def test_a_session_sending_non_mail_commands_past_the_limit_gets_421_and_is_closed(
    receiver: ReceiverFactory, command: bytes
) -> None:
    server = await receiver(non_mail_commands=4)
    streams = await _connect(server.port)
    await _reply(streams[0])
    for _ in range(4):
        assert (await _command(streams, command))[:1] in (b"2", b"5")  # HELP answers 250, unknown ones 5xx
    assert (await _command(streams, command)).startswith(b"421 4.7.0")
    assert await until_closed(streams[0]) == b""
    _close(streams)


async def test_an_idle_session_is_closed_after_the_timeout(receiver: ReceiverFactory) -> None:
    server = await receiver(timeout_seconds=0.3)
    streams = await _connect(server.port)
    assert (await _reply(streams[0])).startswith(b"220 ")
    await until_closed(streams[0])  # it sends nothing more: closed by the server, not by BOUND
    _close(streams)


async def test_a_command_trickled_a_byte_at_a_time_does_not_hold_the_session(
    receiver: ReceiverFactory,
) -> None:
    server = await receiver(timeout_seconds=0.5)
    reader, writer = await _connect(server.port)
    await _reply(reader)

    async def trickle() -> None:
        for byte in (
            b"NOOP " * 200
        ):  # a command line that never ends, one byte every 50 ms (the attacker's pace)
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)

    task = asyncio.create_task(trickle())
    try:
        await until_closed(reader)
    finally:
        task.cancel()
        writer.close()


async def test_messages_past_the_per_session_cap_close_the_session(
    db_url: str, receiver: ReceiverFactory
) -> None:
    server = await receiver(messages_per_session=2)
    streams = await _connect(server.port)
    await _reply(streams[0])
    assert (await _command(streams, b"EHLO mta.example.net")).startswith(b"250")
    for n in range(2):
        assert (await _command(streams, b"MAIL FROM:<>")).startswith(b"250")
        assert (await _command(streams, f"RCPT TO:<{TO}>".encode())).startswith(b"250")
        assert (await _command(streams, b"DATA")).startswith(b"354")
        assert await _command(streams, f"Subject: junk {n}\r\n\r\nhello\r\n.".encode()) == ACCEPTED.encode()
    assert (await _command(streams, b"MAIL FROM:<>")).startswith(b"421 4.7.0")
    assert await until_closed(streams[0]) == b""
    _close(streams)


async def _mail_from(port: int, source: str) -> bytes:
    """The reply to MAIL FROM in a session of its own from `source` (the rate is counted at MAIL)."""
    streams = await _connect(port, source)
    try:
        await _reply(streams[0])
        await _command(streams, b"EHLO mta.example.net")
        return await _command(streams, b"MAIL FROM:<>")
    finally:
        _close(streams)


async def test_a_flood_of_new_clients_does_not_reset_the_rate_of_a_known_one(
    receiver: ReceiverFactory,
) -> None:
    server = await receiver(per_minute=1, burst=1, clients=4)
    assert (await _mail_from(server.port, "127.0.0.1")).startswith(b"250")
    assert (await _mail_from(server.port, "127.0.0.1")).startswith(b"450 4.7.1")
    # twelve new clients: three fit beside the first, the rest share one overflow bucket
    flood = [await _mail_from(server.port, f"127.0.1.{n}") for n in range(1, 13)]
    assert [reply[:3] for reply in flood] == [b"250"] * 4 + [b"450"] * 8
    assert server.handler.limiter.remembered() == 4
    assert (await _mail_from(server.port, "127.0.0.1")).startswith(b"450 4.7.1")


async def test_every_message_taken_in_gets_the_same_neutral_reply_whatever_became_of_it(
    db_url: str, receiver: ReceiverFactory
) -> None:
    """A prober learns nothing from the reply: a genuine DSN, its replay, a forged token, a DSN naming
    a recipient the prober cannot see (a Bcc, say) and one naming nobody are all `250` alike."""
    server = await receiver()
    reader_address, hidden = "reader@mta.example.net", "no-such-user@mta.example.net"
    probed = sent_email(db_url, reader_address, cc=[hidden])
    genuine_email = sent_email(db_url, hidden)
    template = load("postfix-unknown-user.eml")
    genuine_path = return_path(genuine_email["id"], hidden, BOUNCE_DOMAIN, "bounces", FIXTURE_KEY)
    genuine = readdress(template, genuine_email["id"], hidden, FIXTURE_KEY)
    # the prober's own return path, with DSNs naming the hidden recipient and a guess
    own_path = return_path(probed["id"], reader_address, BOUNCE_DOMAIN, "bounces", FIXTURE_KEY)
    naming_hidden = readdress(template, probed["id"], reader_address, FIXTURE_KEY)
    naming_nobody = naming_hidden.replace(hidden.encode(), b"guess@mta.example.net")
    # a token of the right shape whose MAC is made up
    forged_path = f"bounces+{genuine_email['id']}-aaaaaaaa-aaaaaaaaaaaaaaaa@{BOUNCE_DOMAIN}"
    forged = genuine.replace(genuine_path.encode(), forged_path.encode())
    messages = [
        (genuine, genuine_path),
        (genuine, genuine_path),
        (naming_hidden, own_path),
        (naming_nobody, own_path),
        (forged, forged_path),
        (b"Subject: hello\r\n\r\nnot a report at all\r\n", TO),
    ]
    replies = set()
    for raw, to in messages:
        streams = await _connect(server.port)
        await _reply(streams[0])
        await _command(streams, b"EHLO mta.example.net")
        assert (await _command(streams, b"MAIL FROM:<>")).startswith(b"250")
        assert (await _command(streams, f"RCPT TO:<{to}>".encode())).startswith(b"250")
        await _command(streams, b"DATA")
        body = raw.replace(b"\r\n", b"\n").replace(b"\n.", b"\n..").replace(b"\n", b"\r\n")
        replies.add(await _command(streams, body.rstrip(b"\r\n") + b"\r\n."))
        _close(streams)
    assert replies == {ACCEPTED.encode()}
    # the outcomes did differ: the reply hid them
    assert {"recorded", "duplicate", "quarantined"} <= set(server.handler.outcomes)
    # what was quarantined is counted against the client that sent it
    with psycopg.connect(db_url) as conn:
        clients = conn.execute("SELECT DISTINCT client FROM mailroom.bounce_quarantine").fetchall()
    assert ("127.0.0.1",) in clients


@pytest.mark.e2e
def test_mailroom_bounces_receive_caps_connections_per_client_as_its_option_says(
    cli_env: dict[str, str],
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    argv = [
        *(sys.executable, "-m", "worker.cli.main", "bounces", "receive"),
        *("--listen", f"127.0.0.1:{port}", "--domain", BOUNCE_DOMAIN, "--max-connections-per-client", "1"),
    ]
    with subprocess.Popen(
        argv, env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            assert process.stdout is not None
            assert "bounces: receiving" in process.stdout.readline()
            with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as held:
                assert held.recv(100).startswith(b"220 ")
                with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as second:
                    assert second.recv(100).startswith(b"421 4.7.0 ")
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
    assert process.returncode == 0
