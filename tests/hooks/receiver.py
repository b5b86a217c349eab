"""A webhook receiver on a real loopback socket, in the test process: it records every POST and
answers as a test tells it (an outage's 503s, a 410, a redirect, or no answer at all)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks.webhooks import Webhook


@dataclass
class Post:
    """One POST as it arrived, and what it was answered."""

    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def id(self) -> str:
        """Its webhook-id."""
        return self.headers["webhook-id"]

    @property
    def event(self) -> dict[str, Any]:
        """Its JSON body."""
        return dict(json.loads(self.body))


@dataclass
class Receiver:
    """The server: where it listens, what it answers, what it saw."""

    answer: Callable[[Post], int] = lambda post: 204
    hang: bool = False
    location: str | None = None
    posts: list[Post] = field(default_factory=list)
    url: str = ""
    _runner: web.AppRunner | None = None
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> Receiver:
        """Listen on a free loopback port."""
        app = web.Application()
        app.router.add_post("/hooks", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/hooks"
        return self

    async def stop(self) -> None:
        """Answer whatever hangs, then stop."""
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        post = Post({k.lower(): v for k, v in request.headers.items()}, body, 0)
        if self.hang:
            async with self._arrived:
                self.posts.append(post)
                self._arrived.notify_all()
            await self._release.wait()
            return web.Response(status=204)
        post.status = self.answer(post)
        async with self._arrived:
            self.posts.append(post)
            self._arrived.notify_all()
        if self.location:
            return web.Response(status=post.status, headers={"Location": self.location})
        return web.Response(status=post.status, text="" if post.status < 300 else "receiver says no")

    async def until(self, done: Callable[[list[Post]], bool], seconds: float = 60.0) -> list[Post]:
        """Wait until `done(posts)` holds (each POST wakes the wait); the posts."""
        async with asyncio.timeout(seconds), self._arrived:
            await self._arrived.wait_for(lambda: done(self.posts))
        return list(self.posts)

    def delivered(self) -> dict[str, Post]:
        """The POSTs answered 2xx, by webhook-id."""
        return {p.id: p for p in self.posts if 200 <= p.status < 300}


def verified(secret: str, post: Post) -> dict[str, Any]:
    """The event, verified by the Standard Webhooks reference library (raises when the signature is wrong)."""
    return dict(Webhook(secret).verify(post.body, post.headers))
