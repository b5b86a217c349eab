"""The Gmail API transport: a sender account's message, exactly as SMTP would carry it, through
`users.messages.send` as the Workspace user its service account impersonates.

A slot holds a `GmailConnection` where it would hold an `SmtpConnection` (same `send`, `close`,
`forget_announced`), so claims, quotas, warm-up, pacing, circuits and health are the SMTP path's own
code. The body is the built message (`worker.engine.execute.build`: the same builder, relay tag and DKIM signature),
base64url-encoded in `{"raw": ...}`. Gmail sets the envelope itself: the return path is the user's
address whatever the message says, so DSNs reach that mailbox (a mailbox poll collects them), not a
VERP address. Gmail sends to every address in the headers, so an email with several recipients (each
of whom gets a copy of their own over SMTP) is refused here rather than sent to all in one copy.

Each answer is judged by whose fault it is (`gmail_verdict`), and the attempt carries that verdict:
the email's (400, 413: a message Gmail will not take), the account's (401, 403: a revoked key, no
domain-wide delegation; it is suspended with Google's words), a pause (429 and the rate-limit 403s:
the circuit opens, the email is returned uncharged) or an outage (5xx, timeouts: the circuit too).
Gmail's id for the message is recorded in the reply text, where an SMTP relay's queue id is.
"""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any

import aiohttp

from worker.core.message import Envelope
from worker.engine.attempts import Attempt, SmtpAccount
from worker.engine.classify import Reply, Verdict, clean_reply
from worker.engine.gmail_tokens import GmailAccount, GmailTokens
from worker.engine.oauth import TokenRefused, TokenUnavailable

SEND_PATH = "/gmail/v1/users/me/messages/send"
# The reasons Google gives a 403 that means "slow down", not "not allowed".
RATE_LIMIT_REASONS = frozenset(
    {"rateLimitExceeded", "userRateLimitExceeded", "dailyLimitExceeded", "RESOURCE_EXHAUSTED",
     "RATE_LIMIT_EXCEEDED"}
)  # fmt: skip
MANY_RECIPIENTS = (
    "a Gmail API sender cannot send an email with several recipients: Gmail sends one copy to every "
    "address in its headers, so each recipient could not get a copy of their own; send it through an "
    "SMTP sender account"
)
_MAX_BODY = 64 * 1024
_MESSAGE_ID = re.compile(r"^[0-9A-Za-z_-]{1,200}$")


def gmail_verdict(status: int, reasons: frozenset[str]) -> Verdict:
    """What a Gmail API answer means: for the email, the sender account, or the sender's circuit."""
    if 200 <= status < 300:
        return Verdict.SENT
    if status == 429 or (status == 403 and reasons & RATE_LIMIT_REASONS):
        return Verdict.SENDER  # a pause: the circuit opens, the email goes back uncharged
    if status in (401, 403):
        return Verdict.AUTH  # a revoked key, no delegation, the API off: the account, suspended
    if status in (400, 413):
        return Verdict.PERMANENT  # Gmail will not take this message: retrying does not mend it
    return Verdict.SENDER  # 5xx, 404 (a wrong API address), anything else: the sender's side


class GmailConnection:
    """One slot's way to the Gmail API for one sender account: an HTTP session, opened when first used."""

    def __init__(self, account: SmtpAccount, tokens: GmailTokens | None = None) -> None:
        assert account.gmail is not None
        self.account = account
        self.gmail: GmailAccount = account.gmail
        self._tokens = tokens if tokens is not None else GmailTokens()
        self._session: aiohttp.ClientSession | None = None

    async def send(self, envelope: Envelope, upcoming: Envelope | None = None) -> Attempt:
        """Send one built message; never raises for HTTP or network trouble, it returns the verdict.
        (`upcoming` is for SMTP pipelining: an API call has nothing to announce.)"""
        started = time.perf_counter()
        if envelope.recipients:
            reply = Reply(None, MANY_RECIPIENTS, "data")
            return Attempt(reply, 0, verdict=Verdict.PERMANENT)
        verdict, reply = await self._send(envelope.content)
        return Attempt(reply, int((time.perf_counter() - started) * 1000), verdict=verdict)

    async def _send(self, content: bytes) -> tuple[Verdict, Reply]:
        session = self._open()
        raw = base64.urlsafe_b64encode(content).decode("ascii")
        refreshed = False
        while True:
            try:
                token = await self._tokens.token(
                    self.account.sender_id, self.gmail, session, self.account.connect_timeout
                )
            except TokenRefused as exc:
                return Verdict.AUTH, clean_reply(None, f"Google token endpoint refused: {exc}", "token")
            except TokenUnavailable as exc:
                return Verdict.SENDER, clean_reply(None, str(exc), "connect")
            try:
                status, body = await self._post(session, token, raw)
            except aiohttp.ClientConnectionError as exc:
                phase = "connect" if isinstance(exc, aiohttp.ClientConnectorError) else "data"
                return Verdict.SENDER, clean_reply(None, _said(exc), phase)
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                return Verdict.SENDER, clean_reply(None, _said(exc), "data")
            if status == 401 and not refreshed:
                # Revoked or expired early: one fresh token, then the refusal stands.
                self._tokens.refused(self.account.sender_id, token)
                refreshed = True
                continue
            return answer(status, body)

    async def _post(self, session: aiohttp.ClientSession, token: str, raw: str) -> tuple[int, bytes]:
        account = self.account
        timeout = aiohttp.ClientTimeout(total=account.data_timeout, sock_connect=account.connect_timeout)
        async with session.post(
            self.gmail.api_url + SEND_PATH,
            json={"raw": raw},
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
            allow_redirects=False,  # the bearer token goes to the API and nowhere else
            timeout=timeout,
        ) as response:
            return response.status, await response.content.read(_MAX_BODY)

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
        return self._session

    async def close(self) -> None:
        """Close the HTTP session (its connection to the API)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def forget_announced(self) -> None:
        """Nothing is ever announced ahead over the API (see `SmtpConnection.forget_announced`)."""


def answer(status: int, body: bytes) -> tuple[Verdict, Reply]:
    """The verdict and the reply to record for an answer of the API (Google's own words when it gave some)."""
    error = _json(body)
    if 200 <= status < 300:
        message_id = error.get("id") if isinstance(error, dict) else None
        if isinstance(message_id, str) and _MESSAGE_ID.match(message_id):
            return Verdict.SENT, clean_reply(None, f"Gmail API accepted it: message id {message_id}", "data")
        return Verdict.SENT, clean_reply(None, "Gmail API accepted it (no message id given)", "data")
    reasons, words = _error(error)
    verdict = gmail_verdict(status, reasons)
    said = f"Gmail API {status}"
    if reasons:
        said += " " + ",".join(sorted(reasons))
    if words:
        said += f": {words}"
    phase = "auth" if verdict is Verdict.AUTH else "data"
    return verdict, clean_reply(None, _printable(said, 500), phase)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


def _error(answer: Any) -> tuple[frozenset[str], str]:
    """The reasons (`error.errors[].reason`, `error.status`) and the message of a Google error answer."""
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict):
        return frozenset(), ""
    reasons: set[str] = set()
    items = error.get("errors")
    for item in items if isinstance(items, list) else ():
        reason = item.get("reason") if isinstance(item, dict) else None
        if isinstance(reason, str) and reason.isidentifier():
            reasons.add(reason)
    details = error.get("details")
    for item in details if isinstance(details, list) else ():
        # google.rpc.ErrorInfo, as newer answers give it beside (or instead of) `errors`
        reason = item.get("reason") if isinstance(item, dict) else None
        if isinstance(reason, str) and reason.isidentifier():
            reasons.add(reason)
    status = error.get("status")
    if isinstance(status, str) and status.isidentifier():
        reasons.add(status)
    message = error.get("message")
    return frozenset(reasons), message if isinstance(message, str) else ""


def _said(exc: BaseException) -> str:
    return f"Gmail API unreachable: {type(exc).__name__}: {exc}".strip()


def _printable(text: str, limit: int) -> str:
    return "".join(c if c.isprintable() else " " for c in text)[:limit]
