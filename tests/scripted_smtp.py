"""A scriptable SMTP server on a real loopback socket, for relays that misbehave in ways aiosmtpd won't.

A script maps a phase to what the server does there: a reply line (or several), "drop" (close the
connection), or "stall" (never answer). Phases: greeting, ehlo, starttls, auth, mail, rcpt, data,
body (the end-of-data reply). Anything unscripted gets the ordinary answer. The server records the
commands it received and whether a message body ever reached it.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

NORMAL = {
    "greeting": "220 scripted ESMTP",
    "ehlo": "250-scripted\r\n250-AUTH PLAIN LOGIN\r\n250 8BITMIME",
    "auth": "235 2.7.0 Authentication successful",
    "mail": "250 2.1.0 Ok",
    "rcpt": "250 2.1.5 Ok",
    "data": "354 End data with <CR><LF>.<CR><LF>",
    "body": "250 2.0.0 Ok: queued",
    "rset": "250 2.0.0 Ok",
    "quit": "221 2.0.0 Bye",
}
VERBS = {"EHLO": "ehlo", "HELO": "ehlo", "AUTH": "auth", "MAIL": "mail", "RCPT": "rcpt", "DATA": "data",
         "RSET": "rset", "QUIT": "quit", "STARTTLS": "starttls", "NOOP": "rset"}  # fmt: skip


@dataclass
class ScriptedServer:
    """The running server: where it listens and what it saw."""

    script: dict[str, str]
    port: int = 0
    # Answers for a phase's first times, in order, before its scripted (or ordinary) one applies.
    first: dict[str, list[str]] = field(default_factory=dict)
    received: list[str] = field(default_factory=list)
    bodies: int = 0
    server: asyncio.base_events.Server | None = None

    async def start(self) -> ScriptedServer:
        """Listen on a free loopback port."""
        self.server = await asyncio.start_server(self._session, "127.0.0.1", 0)
        self.port = int(self.server.sockets[0].getsockname()[1])
        return self

    async def stop(self) -> None:
        """Stop listening and drop every session."""
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _act(self, phase: str, writer: asyncio.StreamWriter) -> bool:
        """Do what the script says for `phase`; False when the session is over."""
        queued = self.first.get(phase)
        action = (
            queued.pop(0)
            if queued
            else self.script.get(phase, NORMAL.get(phase, "502 5.5.2 Command not recognized"))
        )
        if action == "drop":
            writer.close()
            return False
        if action == "stall":
            await asyncio.Event().wait()  # a relay that never answers: until the client hangs up
            return False
        writer.write(action.encode() + b"\r\n")
        await writer.drain()
        return True

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if not await self._act("greeting", writer):
                return
            while line := await reader.readline():
                command = line.decode(errors="replace").strip()
                self.received.append(command)
                phase = VERBS.get(command.split(" ")[0].upper(), "unknown")
                if phase == "auth" and self.script.get("auth", "").startswith("334"):
                    await self._act("auth", writer)  # a server that keeps asking: answer every line with 334
                    continue
                if not await self._act(phase, writer):
                    return
                if phase == "data" and self.script.get("data", NORMAL["data"]).startswith("354"):
                    while (body := await reader.readline()) and body not in (b".\r\n", b".\n"):
                        pass
                    self.bodies += 1
                    if not await self._act("body", writer):
                        return
                if phase == "quit":
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
