"""Progress of a long command on standard error: a bar redrawn in place on a terminal, plain lines otherwise."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO

BAR_WIDTH = 28
REDRAW_SECONDS = 0.1  # a bar redrawn more often only costs time


class ReadPosition:
    """How far into its input each numbered line ends, kept only until the line's result is shown."""

    def __init__(self) -> None:
        self.chars = 0
        self._ends: deque[tuple[int, int]] = deque()

    def follow(self, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
        """Pass `lines` through, noting where each ends."""
        for number, line in lines:
            self.chars += len(line)
            self._ends.append((number, self.chars))
            yield number, line

    def done_through(self, number: int) -> int:
        """How much of the input lies at or before line `number` (whose result is now out)."""
        reached = 0
        while self._ends and self._ends[0][0] <= number:
            reached = self._ends.popleft()[1]
        return reached


class Progress:
    """Lines done, their rate and (when the input's size is known) a bar with the share done and time left."""

    def __init__(
        self,
        stream: IO[str],
        what: str,
        total: int | None,
        *,
        bar: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream, self.what, self.total, self.bar, self.clock = stream, what, total, bar, clock
        self.started = clock()
        self._drawn_at: float | None = None
        self._width = 0

    def update(self, lines: int, position: int, *, final: bool = False) -> None:
        """Show `lines` done, `position` characters into the input; a bar is redrawn at most 10 times a second."""
        now = self.clock()
        if self.bar and not final and self._drawn_at is not None and now - self._drawn_at < REDRAW_SECONDS:
            return
        self._drawn_at = now
        rate = lines / max(now - self.started, 1e-9)
        text = f"{self.what}: {lines:,} lines done ({rate:,.0f} lines/s)"
        if self.bar and self.total:
            share = 1.0 if final else min(position / self.total, 1.0)
            filled = round(share * BAR_WIDTH)
            left = (now - self.started) * (1 - share) / share if share > 0 else None
            eta = "" if final or left is None else f", about {left:,.0f}s left"
            text = f"{self.what}: [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {share:4.0%}  {lines:,} lines"
            text += f" ({rate:,.0f}/s{eta})"
        if self.bar:
            # Redrawn in place; spaces cover what a longer previous line left behind.
            self.stream.write("\r" + text.ljust(self._width))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, lines: int) -> None:
        """The last state, and the bar's line ended so that what follows starts on its own line."""
        self.update(lines, self.total or 0, final=True)
        if self.bar:
            self.stream.write("\n")
            self.stream.flush()
