"""The webhooks' counting point: each provider request by its result (`worker.core.metrics`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from worker.core import metrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def result(status: int) -> str:
    """What an answer's status says happened: accepted, denied (signature or credentials), not_configured,
    refused (anything else the sender got wrong) or error (ours)."""
    if status < 400:
        return "accepted"
    if status in (401, 403):
        return "denied"
    if status == 404:
        return "not_configured"
    return "refused" if status < 500 else "error"


def counted(provider: str, handler: Handler) -> Handler:
    """`handler`, counting each request under `provider` by its result."""

    async def run(request: web.Request) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            metrics.count_webhook(provider, result(exc.status))
            raise
        except Exception:
            metrics.count_webhook(provider, "error")
            raise
        metrics.count_webhook(provider, result(response.status))
        return response

    return run
