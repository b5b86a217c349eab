"""Bounce and complaint webhooks on the tracker: the generic one, Postmark's and SendGrid's.

Each route authenticates the request before reading it (a secret that is not configured makes its
route a 404), maps the payload to `WebhookEvent`s and hands them to the sink the command line gave
the tracker (the bounce producers' `apply_events`), on a connection of its own in a thread. The
answer to an authenticated request is one neutral 202 whatever became of its events (recorded,
duplicate, unmatched and quarantined, or ignored: that goes to the log), so a webhook never tells
whether an email or an address exists. A bad signature is a 401, a payload that is not what the
route expects a 400: never a 500. No route fetches anything its request names, except SNS's
certificate and subscription URLs, and those only on the SNS host (`worker.tracking.sns`).

The generic webhook signs `<timestamp>.<body>` (not the body alone) so the timestamp cannot be
changed to replay an old request; events are idempotent besides.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from aiohttp import web

from worker.core.config import Settings
from worker.core.db import connection_kwargs
from worker.core.webhook_events import EventKind, EventOutcome, EventSink, WebhookEvent
from worker.tracking import providers, sns
from worker.tracking.providers import Mapped, PayloadError, clean
from worker.tracking.webhook_counting import counted

log = logging.getLogger("mailroom.tracker")

MAX_BODY = 1024 * 1024
MAX_EVENTS = 1000
REPLAY_WINDOW_SECONDS = 300
SIGNATURE_HEADER = "X-Mailroom-Signature"
TIMESTAMP_HEADER = "X-Mailroom-Timestamp"
_KINDS: dict[str, EventKind] = {"hard": "hard", "soft": "soft", "complaint": "complaint"}
_JSON_HEADERS = {"Cache-Control": "no-store"}


@dataclass(frozen=True)
class Webhooks:
    """What the webhook routes need: where the database is, the secrets, and what applies events."""

    url: str
    settings: Settings
    sink: EventSink
    sendgrid_key: providers.PublicKey | None = None
    clock: Callable[[], float] = field(default=time.time)
    sns: sns.SnsVerifier = field(default_factory=sns.SnsVerifier)


WEBHOOKS = web.AppKey("webhooks", Webhooks)


def add_routes(app: web.Application, url: str, settings: Settings, sink: EventSink) -> None:
    """Serve the webhooks on `app`; a malformed SendGrid key is a `ConfigError` now, not at the first request."""
    key = providers.load_sendgrid_key(settings.sendgrid_webhook_public_key)
    app[WEBHOOKS] = Webhooks(url, settings, sink, key)
    if not settings.ses_topic_arns:
        log.info("/webhooks/ses refuses every SNS message: MAILROOM_SES_TOPIC_ARNS lists no topic")
    elif app[WEBHOOKS].sns.store() is None:
        log.error("/webhooks/ses refuses every SNS message: no trusted root certificates (set SSL_CERT_FILE)")
    app.router.add_post("/webhooks/bounces", counted("generic", generic))
    app.router.add_post("/webhooks/postmark", counted("postmark", postmark))
    app.router.add_post("/webhooks/sendgrid", counted("sendgrid", sendgrid))
    app.router.add_post("/webhooks/ses", counted("ses", ses))


def _answer(text: str, status: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response({"error": text}, status=status, headers={**_JSON_HEADERS, **(headers or {})})


async def _body(request: web.Request) -> bytes | None:
    """The request body, or None past `MAX_BODY` (read from the stream: the app's own limit is for forms)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def fresh(timestamp: str | None, now: float) -> bool:
    """Whether a Unix-seconds timestamp header is within the replay window of now."""
    try:
        value = int((timestamp or "").strip())
    except ValueError:
        return False
    return abs(now - value) <= REPLAY_WINDOW_SECONDS


def generic_signature(secret: str, timestamp: str, body: bytes) -> str:
    """The `X-Mailroom-Signature` value for a body sent at `timestamp`: HMAC-SHA256 of `<timestamp>.<body>`."""
    digest = hmac.new(secret.encode("utf-8"), timestamp.encode("utf-8") + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def _generic_denied(request: web.Request, body: bytes, hooks: Webhooks) -> web.Response | None:
    secret = hooks.settings.webhook_secret
    if secret is None:
        return _answer("this webhook is not configured", 404)
    timestamp = request.headers.get(TIMESTAMP_HEADER, "")
    if not fresh(timestamp, hooks.clock()):
        return _answer(f"missing or stale {TIMESTAMP_HEADER}", 401)
    expected = generic_signature(secret, timestamp.strip(), body).encode("ascii")
    given = request.headers.get(SIGNATURE_HEADER, "").strip().lower().encode("utf-8", "replace")
    if not hmac.compare_digest(expected, given):
        return _answer("bad signature", 401)
    return None


def map_generic(payload: Any) -> list[Mapped]:
    """The generic webhook's JSON (one object or a list of them) as events; `PayloadError` when malformed."""
    items = payload if isinstance(payload, list) else [payload]
    if not items or len(items) > MAX_EVENTS:
        raise PayloadError(f"expected 1 to {MAX_EVENTS} events")
    return [_generic_event(item, n) for n, item in enumerate(items)]


def _generic_event(item: Any, n: int) -> WebhookEvent:
    if not isinstance(item, dict):
        raise PayloadError(f"event {n} is not an object")
    recipient = clean(item.get("recipient"), 254)
    if recipient is None or "@" not in recipient:
        raise PayloadError(f"event {n}: recipient must be an address")
    kind = _KINDS.get(str(item.get("type")))
    if kind is None:
        raise PayloadError(f"event {n}: type must be hard, soft or complaint")
    email_id = item.get("email_id")
    if email_id is not None and (isinstance(email_id, bool) or not isinstance(email_id, int)):
        raise PayloadError(f"event {n}: email_id must be an integer")
    for name in ("message_id", "status", "diagnostic", "event_id"):
        if item.get(name) is not None and not isinstance(item[name], str | int):
            raise PayloadError(f"event {n}: {name} must be a string")
    return WebhookEvent(
        source="webhook",
        recipient=recipient,
        kind=kind,
        event_id=clean(item.get("event_id"), 200),
        raw=json.dumps(item, sort_keys=True).encode("utf-8", "replace"),
        email_id=email_id,
        message_id=clean(item.get("message_id"), 998),
        status=clean(item.get("status"), 32),
        diagnostic=clean(item.get("diagnostic"), 1000),
        smtp_code=providers.smtp_code(clean(item.get("diagnostic"), 1000)),
    )


def _apply(hooks: Webhooks, events: Sequence[WebhookEvent]) -> list[EventOutcome]:
    """Apply events on a short-lived connection (webhooks are rare next to pixels: no pool is kept)."""
    with psycopg.connect(hooks.url, **connection_kwargs(hooks.settings)) as conn:
        return hooks.sink(conn, events)


async def _receive(
    request: web.Request,
    denied: Callable[[web.Request, bytes, Webhooks], web.Response | None],
    mapper: Callable[[Any], list[Mapped]],
) -> web.Response:
    """Authenticate, read, map and apply one webhook request."""
    hooks = request.app[WEBHOOKS]
    body = await _body(request)
    if body is None:
        return _answer(f"body over {MAX_BODY} bytes", 413)
    refusal = denied(request, body, hooks)
    if refusal is not None:
        log.warning("webhook %s refused: %s", request.path, refusal.status)
        return refusal
    try:
        mapped = mapper(json.loads(body))
    except (ValueError, RecursionError) as exc:  # PayloadError is a ValueError, so is bad JSON
        return _answer(f"malformed payload: {str(exc)[:200]}", 400)
    return await _respond(request, hooks, mapped)


def accepted(count: int) -> web.Response:
    """The one answer to every authenticated, well-formed request: how many items it carried, nothing more."""
    return web.json_response({"accepted": count}, status=202, headers=_JSON_HEADERS)


async def _respond(request: web.Request, hooks: Webhooks, mapped: list[Mapped]) -> web.Response:
    """Apply the events among `mapped`, log what became of each, and answer the neutral 202."""
    events = [m for m in mapped if isinstance(m, WebhookEvent)]
    outcomes = await asyncio.to_thread(_apply, hooks, events) if events else []
    verdicts = Counter[str](o.verdict for o in outcomes)
    verdicts["ignored"] = len(mapped) - len(events)
    log.info("webhook %s: %s", request.path, ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()) if n))
    return accepted(len(mapped))


async def generic(request: web.Request) -> web.Response:
    """POST /webhooks/bounces: Mailroom's own signed JSON events."""
    return await _receive(request, _generic_denied, map_generic)


async def postmark(request: web.Request) -> web.Response:
    """POST /webhooks/postmark: Postmark's Bounce and SpamComplaint webhooks, behind HTTP basic auth."""
    return await _receive(request, _postmark_denied, providers.map_postmark)


async def sendgrid(request: web.Request) -> web.Response:
    """POST /webhooks/sendgrid: SendGrid's signed Event Webhook."""
    return await _receive(request, _sendgrid_denied, providers.map_sendgrid)


def _sendgrid_denied(request: web.Request, body: bytes, hooks: Webhooks) -> web.Response | None:
    if hooks.sendgrid_key is None:
        return _answer("this webhook is not configured", 404)
    timestamp = request.headers.get(providers.SENDGRID_TIMESTAMP, "")
    if not fresh(timestamp, hooks.clock()):
        return _answer(f"missing or stale {providers.SENDGRID_TIMESTAMP}", 401)
    signature = request.headers.get(providers.SENDGRID_SIGNATURE, "")
    if not providers.sendgrid_verified(hooks.sendgrid_key, signature, timestamp, body):
        return _answer("bad signature", 401)
    return None


def _postmark_denied(request: web.Request, body: bytes, hooks: Webhooks) -> web.Response | None:
    user, password = hooks.settings.postmark_webhook_user, hooks.settings.postmark_webhook_password
    if not user or not password:
        return _answer("this webhook is not configured", 404)
    if not providers.basic_auth_ok(request.headers.get("Authorization"), user, password):
        return _answer("bad credentials", 401, {"WWW-Authenticate": 'Basic realm="mailroom webhooks"'})
    return None


async def ses(request: web.Request) -> web.Response:
    """POST /webhooks/ses: SNS messages of the configured topics: subscriptions, SES bounces and complaints."""
    hooks = request.app[WEBHOOKS]
    if not hooks.settings.ses_topic_arns:
        return _answer("this webhook is not configured", 404)
    body = await _body(request)
    if body is None:
        return _answer(f"body over {MAX_BODY} bytes", 413)
    try:
        message = sns.parse_sns(json.loads(body))
    except (ValueError, RecursionError) as exc:
        return _answer(f"malformed payload: {str(exc)[:200]}", 400)
    # Before anything is fetched: a message of another topic costs the tracker nothing.
    if message.get("TopicArn") not in hooks.settings.ses_topic_arns:
        log.warning(
            "webhook %s refused: topic %r is not configured",  # %r: the sender's text, escaped
            request.path,
            clean(message.get("TopicArn"), 300),
        )
        return _answer("not a configured topic", 403)
    try:
        refusal = await hooks.sns.refusal(message, hooks.clock())
        if refusal is not None:
            log.warning("webhook %s refused: %s", request.path, refusal)
            return _answer(refusal, 401)
        if message["Type"] == "SubscriptionConfirmation":
            return await _confirm(hooks, message)
    except sns.UNREACHABLE as exc:  # AWS unreachable: SNS retries
        log.warning("webhook %s: AWS unreachable (%s)", request.path, exc)
        return _answer("AWS unreachable, try again", 503)
    if message["Type"] == "UnsubscribeConfirmation":
        return accepted(0)
    return await _respond(request, hooks, sns.map_ses(message))


async def _confirm(hooks: Webhooks, message: dict[str, Any]) -> web.Response:
    """Confirm a signed subscription of a configured topic by GETting its SubscribeURL (SNS's own only)."""
    if not await hooks.sns.confirm(message):
        log.warning(
            "SNS subscription to %s not confirmed: its SubscribeURL is not SNS's", message["TopicArn"]
        )
        return _answer("SubscribeURL is not an SNS confirmation of this topic", 400)
    log.info("confirmed the SNS subscription to %s", message["TopicArn"])
    return web.json_response({"confirmed": message["TopicArn"]}, status=200, headers=_JSON_HEADERS)
