"""A rate limit for the doors strangers knock on (the bounce receiver, the signing page, the login): a token bucket per client network, in bounded memory that a flood cannot wipe.

A bucket that has refilled to `burst` holds no information (a new bucket is the same), so only
such buckets are forgotten to make room. When every remembered bucket is still refilling (more
clients than `clients` within one refill period: a flood), clients not yet remembered share one
overflow bucket; the buckets of the clients already known, the flooder's own included, are kept.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from worker.core.connection_gate import client_key

DEFAULT_CLIENTS = 10_000


class RateLimiter:
    """A token bucket per client network: `per_minute` messages a minute, up to `burst` at once."""

    def __init__(
        self,
        per_minute: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        clients: int = DEFAULT_CLIENTS,
    ) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self.clock = clock
        self.clients = max(1, clients)
        # (tokens, when last counted), least recently used first
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._overflow: tuple[float, float] | None = None

    def allow(self, client: str) -> bool:
        """Take one token for `client` (an address; counted by `client_key`); False when its bucket is empty."""
        now = self.clock()
        key = client_key(client)
        if key in self._buckets:
            self._buckets.move_to_end(key)
            allowed, self._buckets[key] = self._take(self._buckets[key], now)
            return allowed
        if self._make_room(now):
            allowed, self._buckets[key] = self._take((self.burst, now), now)
            return allowed
        allowed, self._overflow = self._take(self._overflow or (self.burst, now), now)
        return allowed

    def remembered(self) -> int:
        """How many client buckets are held (never more than `clients`)."""
        return len(self._buckets)

    def _take(self, bucket: tuple[float, float], now: float) -> tuple[bool, tuple[float, float]]:
        tokens = self._tokens(bucket, now)
        if tokens < 1.0:
            return False, (tokens, now)
        return True, (tokens - 1.0, now)

    def _tokens(self, bucket: tuple[float, float], now: float) -> float:
        tokens, last = bucket
        return min(self.burst, tokens + max(0.0, now - last) * self.rate)

    def _make_room(self, now: float) -> bool:
        """Forget refilled buckets, least recently used first, until one more fits; False when none can go."""
        while len(self._buckets) >= self.clients:
            oldest, bucket = next(iter(self._buckets.items()))
            if self._tokens(bucket, now) < self.burst:
                return False  # the least recently used is still refilling: forgetting it would reset a limit
            del self._buckets[oldest]
        return True
