"""One finding of a DNS check: about which name, how bad, a stable code and a sentence for people."""

from __future__ import annotations

import re
from dataclasses import dataclass

OK = "ok"
INFO = "info"
WARNING = "warning"
PROBLEM = "problem"
SEVERITIES = (OK, INFO, WARNING, PROBLEM)

MAX_DETAIL = 500
# Text from DNS is shown in terminals and the console: no control characters (escape sequences) survive.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def clean(text: str, limit: int = MAX_DETAIL) -> str:
    """`text` with control characters turned to spaces, cut to `limit` characters (an ellipsis when cut)."""
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class DnsFinding:
    """What one check found: the name it is about, ok/info/warning/problem, a code and the detail."""

    domain: str
    severity: str
    code: str
    detail: str

    def __post_init__(self) -> None:
        # Frozen: cleaned through object.__setattr__ so every finding is safe to store and print.
        object.__setattr__(self, "detail", clean(self.detail))
        object.__setattr__(self, "domain", clean(self.domain, 253))

    def as_dict(self) -> dict[str, str]:
        """JSON-friendly form."""
        return {"domain": self.domain, "severity": self.severity, "code": self.code, "detail": self.detail}
