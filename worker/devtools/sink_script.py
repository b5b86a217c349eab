"""What the sink answers: scripted replies per recipient (4xx/5xx, drop, stall) and a refused share."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

logger = logging.getLogger("worker.devtools.sink")

Stage = Literal["RCPT", "DATA"]
Matcher = str | Callable[[str], bool]

SERVER_HOSTNAME: Final = "mailroom-sink"
DEFAULT_WAIT_TIMEOUT: Final = 5.0


@dataclass(frozen=True)
class Reply:
    """A canned SMTP reply such as ``Reply(450, "4.2.0 Mailbox busy")``; a 2xx reply accepts."""

    code: int
    text: str = ""

    def __post_init__(self) -> None:
        if not 200 <= self.code <= 599:
            raise ValueError(f"SMTP reply code must be 200-599, got {self.code}")
        if "\r" in self.text or "\n" in self.text:
            raise ValueError("SMTP reply text must be a single line")

    @classmethod
    def parse(cls, line: str) -> Reply:
        """Parse a reply line such as ``"550 5.1.1 User unknown"``."""
        code, _, text = line.strip().partition(" ")
        if not (len(code) == 3 and code.isdigit()):
            raise ValueError(f"not an SMTP reply line: {line!r}")
        return cls(int(code), text.strip())

    @property
    def line(self) -> str:
        """The reply as sent on the wire, without CRLF."""
        return f"{self.code} {self.text}".rstrip()

    @property
    def accepts(self) -> bool:
        """Whether this reply accepts the recipient or message (2xx)."""
        return 200 <= self.code < 300


@dataclass(frozen=True)
class Accept:
    """Accept with the sink's normal reply (``250 2.1.5 OK`` for RCPT, ``250 2.0.0 OK: queued as ...``)."""


@dataclass(frozen=True)
class Drop:
    """Close the connection without replying (for DATA: after the body is read, before the final reply)."""


@dataclass(frozen=True)
class Stall:
    """Do not answer: forever (``seconds=None``) or for ``seconds``, then carry on as if unscripted."""

    seconds: float | None = None


ACCEPT: Final = Accept()
Action = Reply | Accept | Drop | Stall
ActionLike = Action | str


def _as_action(action: ActionLike) -> Action:
    return Reply.parse(action) if isinstance(action, str) else action


def _normalise(address: str) -> str:
    return address.strip().lower()


class Rule:
    """Scripted answers for one stage and the recipients a matcher selects; the last action repeats."""

    def __init__(self, stage: Stage, match: Matcher, actions: Sequence[ActionLike]) -> None:
        if not actions:
            raise ValueError("a rule needs at least one action")
        self.stage: Final = stage
        self.match: Final = match
        self.actions: Final = tuple(_as_action(a) for a in actions)
        self.hits = 0
        """How many attempts this rule has answered so far."""

    def matches(self, address: str) -> bool:
        """Whether the rule applies to ``address`` (case-insensitive for a string matcher)."""
        if isinstance(self.match, str):
            return _normalise(self.match) == _normalise(address)
        return self.match(address)

    def _take(self) -> Action:
        action = self.actions[min(self.hits, len(self.actions) - 1)]
        self.hits += 1
        return action

    def __repr__(self) -> str:
        return f"Rule({self.stage}, {self.match!r}, {self.actions!r}, hits={self.hits})"


class Script:
    """Thread-safe ordered rules; the first rule (in order added) that matches a recipient answers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[Rule] = []

    def on_rcpt(self, match: Matcher, *actions: ActionLike) -> Rule:
        """Answer ``RCPT TO`` for matching recipients: one action per attempt, the last one repeating."""
        return self._add(Rule("RCPT", match, actions))

    def on_data(self, match: Matcher, *actions: ActionLike) -> Rule:
        """Answer the end of ``DATA`` for envelopes with a matching recipient, one action per attempt."""
        return self._add(Rule("DATA", match, actions))

    def clear(self) -> None:
        """Forget every rule."""
        with self._lock:
            self._rules.clear()

    def next_action(self, stage: Stage, recipients: Sequence[str]) -> Action | None:
        """Consume and return the scripted action for this attempt, or None when no rule matches."""
        with self._lock:
            for rule in self._rules:
                if rule.stage == stage and any(rule.matches(r) for r in recipients):
                    return rule._take()
        return None

    def _add(self, rule: Rule) -> Rule:
        with self._lock:
            self._rules.append(rule)
        return rule


@dataclass(frozen=True)
class RefuseShare:
    """Refuse fixed shares of recipients, picked by address hash: 4xx ``temporary``, 5xx ``permanent``."""

    temporary: float = 0.0
    permanent: float = 0.0
    temporary_reply: Reply = Reply(450, "4.2.1 Mailbox temporarily unavailable")
    permanent_reply: Reply = Reply(550, "5.1.1 User unknown")

    def __post_init__(self) -> None:
        for name, share in (("temporary", self.temporary), ("permanent", self.permanent)):
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"{name} share must be between 0 and 1, got {share}")
        if self.temporary + self.permanent > 1.0:
            raise ValueError("temporary + permanent shares must not exceed 1")

    def reply_for(self, address: str) -> Reply | None:
        """The refusal this address always gets, or None if it is accepted."""
        digest = hashlib.sha256(_normalise(address).encode("utf-8", "surrogateescape")).digest()
        point = int.from_bytes(digest[:8], "big") / 2**64
        if point < self.permanent:
            return self.permanent_reply
        if point < self.permanent + self.temporary:
            return self.temporary_reply
        return None
