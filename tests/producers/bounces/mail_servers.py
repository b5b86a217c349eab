"""Small real IMAP4rev1 (RFC 3501) and POP3 (RFC 1939) servers on 127.0.0.1 for the mailbox poller.

They speak over TCP, optionally TLS (implicit or STARTTLS/STLS), just enough of each protocol for
Python's `imaplib` and `poplib`: IMAP LOGIN, SELECT, UID SEARCH/FETCH/STORE/COPY/MOVE, EXPUNGE,
CLOSE, LOGOUT; POP3 CAPA, USER, PASS, STAT, LIST, RETR, DELE, QUIT (DELEs applied at QUIT only).
"""

from __future__ import annotations

import re
import socket
import socketserver
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import BinaryIO

USER = "bounces"
PASSWORD = "s3cret pass"


@dataclass
class Message:
    """One stored message."""

    uid: int
    raw: bytes
    flags: set[str] = field(default_factory=set)


@dataclass
class Store:
    """The mail of the one test user: folders of messages."""

    folders: dict[str, list[Message]] = field(default_factory=lambda: {"INBOX": []})
    next_uid: int = 1
    lock: threading.Lock = field(default_factory=threading.Lock)
    commands: list[str] = field(default_factory=list)

    def deliver(self, raw: bytes, folder: str = "INBOX") -> None:
        """Put a message in a folder, as the MTA's local delivery would."""
        with self.lock:
            self.folders.setdefault(folder, []).append(Message(self.next_uid, raw))
            self.next_uid += 1

    def raws(self, folder: str = "INBOX") -> list[bytes]:
        """The messages in a folder."""
        with self.lock:
            return [m.raw for m in self.folders.get(folder, [])]


_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"|(\([^)]*\))|(\S+)')


def _tokens(line: bytes) -> list[str]:
    out = []
    for quoted, group, atom in _TOKEN.findall(line):
        if quoted or (not group and not atom):
            out.append(re.sub(rb"\\(.)", rb"\1", quoted).decode())
        else:
            out.append((group or atom).decode())
    return out


class _Handler(socketserver.BaseRequestHandler):
    server: _Server
    rfile: BinaryIO
    wfile: BinaryIO

    def _files(self) -> None:
        self.rfile = self.request.makefile("rb")
        self.wfile = self.request.makefile("wb")

    def send(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def starttls(self) -> None:
        assert self.server.tls is not None
        self.request = self.server.tls.wrap_socket(self.request, server_side=True)
        self._files()

    def setup(self) -> None:
        if self.server.implicit_tls:
            self.request = self.server.tls.wrap_socket(self.request, server_side=True)  # type: ignore[union-attr]
        self._files()

    def finish(self) -> None:
        # The TLS socket replaced the one socketserver knows: close it (and its files) here.
        for closable in (self.rfile, self.wfile, self.request):
            with suppress(OSError):
                closable.close()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        handler: type[_Handler],
        store: Store,
        tls: ssl.SSLContext | None,
        implicit_tls: bool,
        move: bool,
    ) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.store = store
        self.tls = tls
        self.implicit_tls = implicit_tls
        self.move = move

    def handle_error(self, request: object, client_address: object) -> None:
        """A client refusing the certificate is expected here: no traceback on stderr."""


class ImapHandler(_Handler):
    """One IMAP session."""

    def handle(self) -> None:
        store = self.server.store
        self.folder: str | None = None
        self.send(b"* OK [CAPABILITY IMAP4rev1] test IMAP ready\r\n")
        while line := self.rfile.readline():
            tag, _, rest = line.rstrip(b"\r\n").partition(b" ")
            args = _tokens(rest)
            command = args[0].upper() if args else ""
            store.commands.append(" ".join(args[:2]) if command != "LOGIN" else "LOGIN")
            reply = self.command(command, args[1:])
            self.send(tag + b" " + reply + b"\r\n")
            if command == "LOGOUT":
                return
            if command == "STARTTLS":
                self.starttls()

    def command(self, command: str, args: list[str]) -> bytes:
        caps = "IMAP4rev1 STARTTLS" + (" MOVE" if self.server.move else "")
        if command == "CAPABILITY":
            self.send(f"* CAPABILITY {caps}\r\n".encode())
        elif command == "LOGIN":
            if args != [USER, PASSWORD]:
                return b"NO [AUTHENTICATIONFAILED] Invalid credentials"
        elif command == "SELECT":
            if args[0] not in self.server.store.folders:
                return b"NO no such mailbox"
            self.folder = args[0]
            self.send(b"* FLAGS (\\Deleted \\Seen)\r\n* %d EXISTS\r\n" % len(self.messages()))
            self.send(b"* OK [UIDVALIDITY 1] UIDs valid\r\n")
            return b"OK [READ-WRITE] SELECT completed"
        elif command == "UID":
            return self.uid(args[0].upper(), args[1:])
        elif command in ("EXPUNGE", "CLOSE"):
            self.expunge(silent=command == "CLOSE")
        elif command == "LOGOUT":
            self.send(b"* BYE\r\n")
        elif command != "STARTTLS" and command != "NOOP":
            return b"BAD unknown command"
        return b"OK done"

    def messages(self) -> list[Message]:
        assert self.folder is not None
        return self.server.store.folders[self.folder]

    def expunge(self, *, silent: bool) -> None:
        with self.server.store.lock:
            messages = self.messages()
            for seq in range(len(messages), 0, -1):
                if "\\Deleted" in messages[seq - 1].flags:
                    del messages[seq - 1]
                    if not silent:
                        self.send(b"* %d EXPUNGE\r\n" % seq)

    def find(self, uid: str) -> tuple[int, Message] | None:
        return next(((i + 1, m) for i, m in enumerate(self.messages()) if m.uid == int(uid)), None)

    def uid(self, command: str, args: list[str]) -> bytes:
        store = self.server.store
        if command == "SEARCH":
            found = [str(m.uid) for m in self.messages() if "\\Deleted" not in m.flags]
            self.send(f"* SEARCH {' '.join(found)}".rstrip().encode() + b"\r\n")
            return b"OK SEARCH completed"
        hit = self.find(args[0])
        if hit is None:
            return b"OK nothing"
        seq, message = hit
        if command == "FETCH":
            head = b"* %d FETCH (UID %d BODY[] {%d}\r\n" % (seq, message.uid, len(message.raw))
            self.send(head + message.raw + b")\r\n")
        elif command == "STORE":
            message.flags.add("\\Deleted")
        elif command in ("COPY", "MOVE"):
            if args[1] not in store.folders:
                return b"NO [TRYCREATE] no such mailbox"
            store.deliver(message.raw, args[1])
            if command == "MOVE" and self.server.move:
                with store.lock:
                    self.messages().remove(message)
                self.send(b"* %d EXPUNGE\r\n" % seq)
            elif command == "MOVE":
                return b"BAD unknown command"
        return b"OK done"


class Pop3Handler(_Handler):
    """One POP3 session: a snapshot of the maildrop at PASS, DELEs applied at QUIT."""

    def handle(self) -> None:
        self.drop: list[Message] = []
        self.deleted: set[int] = set()
        self.send(b"+OK test POP3 ready\r\n")
        while line := self.rfile.readline():
            args = line.rstrip(b"\r\n").decode().split(" ", 1)
            command = args[0].upper()
            self.server.store.commands.append(command)
            self.send(self.command(command, args[1] if len(args) > 1 else "") + b"\r\n")
            if command == "QUIT":
                return
            if command == "STLS":
                self.starttls()

    def command(self, command: str, arg: str) -> bytes:
        store = self.server.store
        if command == "CAPA":
            return b"+OK\r\nUSER\r\nSTLS\r\nUIDL\r\n."
        if command in ("USER", "STLS", "NOOP"):
            return b"+OK"
        if command == "PASS":
            if arg != PASSWORD:
                return b"-ERR [AUTH] invalid credentials"
            with store.lock:
                self.drop = list(store.folders["INBOX"])
            return b"+OK logged in"
        live = [(n, m) for n, m in enumerate(self.drop, 1) if n not in self.deleted]
        if command == "STAT":
            return b"+OK %d %d" % (len(live), sum(len(m.raw) for _, m in live))
        if command == "LIST":
            return b"+OK\r\n" + b"".join(b"%d %d\r\n" % (n, len(m.raw)) for n, m in live) + b"."
        if command in ("RETR", "DELE"):
            number = int(arg)
            if not 1 <= number <= len(self.drop) or number in self.deleted:
                return b"-ERR no such message"
            if command == "DELE":
                self.deleted.add(number)
                return b"+OK deleted"
            lines = self.drop[number - 1].raw.replace(b"\r\n", b"\n").split(b"\n")
            body = b"".join((b"." + x if x.startswith(b".") else x) + b"\r\n" for x in lines[:-1] or [b""])
            return b"+OK message follows\r\n" + body + b"."
        if command == "QUIT":
            with store.lock:
                gone = {id(self.drop[n - 1]) for n in self.deleted}
                store.folders["INBOX"] = [m for m in store.folders["INBOX"] if id(m) not in gone]
            return b"+OK bye"
        return b"-ERR unknown command"


@contextmanager
def serving(
    protocol: str,
    store: Store,
    tls: ssl.SSLContext | None = None,
    *,
    implicit_tls: bool = False,
    move: bool = True,
) -> Iterator[int]:
    """Serve `store` over `protocol` ("imap" or "pop3") on 127.0.0.1; yields the port."""
    handler = ImapHandler if protocol == "imap" else Pop3Handler
    server = _Server(handler, store, tls, implicit_tls, move)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def unused_port() -> int:
    """A port on 127.0.0.1 nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
