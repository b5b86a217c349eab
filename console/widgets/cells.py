"""Single-line cell renderers: ages, bars, statuses, and masked addresses."""

from __future__ import annotations

from datetime import datetime

from rich.text import Text

from worker.core.masking import mask_address
from worker.core.terminal import printable

STATUS_STYLES = {
    "active": "green",
    "warming_up": "cyan",
    "paused": "yellow",
    "paused_limit_reached": "yellow",
    "suspended": "bold red",
    "unreachable": "bold red",
    "provisioned": "cyan",
    "failed": "red",
    "retrying": "yellow",
    "pending": "default",
    "missed": "yellow",
}


STATUS_LABELS = {"paused_limit_reached": "at daily limit"}


def status_cell(status: str) -> Text:
    """A status word coloured by what it means to an operator."""
    label = STATUS_LABELS.get(status, status.replace("_", " "))
    return Text(label, style=STATUS_STYLES.get(status, "default"))


def duration(seconds: float) -> str:
    """A compact duration: 45s, 12m, 3h05m, 2d04h."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def ago(moment: datetime | None, now: datetime) -> str:
    """How long before `now` a moment was ('-' when never)."""
    if moment is None:
        return "-"
    seconds = (now - moment).total_seconds()
    return f"in {duration(seconds)}" if seconds < 0 else f"{duration(seconds)} ago"


def until(moment: datetime | None, now: datetime) -> str:
    """How long after `now` a moment comes ('now' when already due)."""
    if moment is None:
        return "-"
    seconds = (moment - now).total_seconds()
    return f"in {duration(seconds)}" if seconds > 0 else "due now"


def bar(value: int, total: int, width: int = 12) -> Text:
    """A text bar of value/total that turns yellow from 80% and red when full."""
    ratio = 1.0 if total <= 0 and value > 0 else (value / total if total > 0 else 0.0)
    ratio = max(0.0, min(1.0, ratio))
    filled = round(ratio * width)
    style = "red" if ratio >= 1.0 else "yellow" if ratio >= 0.8 else "green"
    text = Text()
    text.append("█" * filled, style=style)
    text.append("░" * (width - filled), style="bright_black")
    return text


def usage(value: int, total: int, width: int = 12) -> Text:
    """A bar followed by 'value/total'."""
    text = bar(value, total, width)
    text.append(f" {value}/{total}")
    return text


def progress(done: int, total: int, width: int = 12) -> Text:
    """Completion as a bar and 'done/total': cyan while under way, green when complete."""
    ratio = done / total if total > 0 else 0.0
    filled = round(max(0.0, min(1.0, ratio)) * width)
    text = Text()
    text.append("█" * filled, style="green" if total and done >= total else "cyan")
    text.append("░" * (width - filled), style="bright_black")
    text.append(f" {done}/{total}")
    return text


SPARK_LEVELS = "▁▂▃▄▅▆▇█"


def spark(values: list[int], style: str = "cyan", cell_width: int = 1) -> Text:
    """A one-line sparkline, one block (`cell_width` wide) per value, scaled to the largest value.

    Zero is a dim baseline, so an hour with no events is visibly empty rather than missing.
    """
    top = max(values, default=0)
    text = Text()
    for value in values:
        if value <= 0 or top <= 0:
            text.append("▁" * cell_width, style="bright_black")
            continue
        level = max(1, round(value / top * len(SPARK_LEVELS)))
        text.append(SPARK_LEVELS[level - 1] * cell_width, style=style)
    return text


def masked(address: str | None) -> str:
    """A recipient address as the console shows it: masked, like in the logs."""
    return mask_address(address) if address else "-"


def rate_cell(part: int, whole: int, limit: float, *, enough: int) -> Text:
    """A share as a percentage, red past `limit` once there are `enough` to judge; a dash before any."""
    if not whole:
        return Text("-", justify="right")
    share = part / whole
    digits = 2 if share < 0.1 else 1
    over = whole >= enough and share > limit
    return Text(f"{share:.{digits}%}", style="bold red" if over else "default", justify="right")


def one_line(text: str | None, limit: int = 80) -> str:
    """Flatten a multi-line value (an SMTP reply) into one cell, cut at `limit` characters.

    Control and bidi characters are shown as escapes: the text was written outside (a remote server,
    a recipient's report) and must not move the cursor or turn the line around."""
    if not text:
        return ""
    flat = printable(" ".join(text.split()))
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def attempts_made(status: str, retry_count: int) -> int:
    """Attempts an email has had: each retry counts one more; a finished (failed or sent) email had one past its last retry.

    A retrying (pending) email's counter was raised by the attempt that failed, so it equals the attempts made.
    """
    return retry_count + 1 if status in ("failed", "sent") else retry_count


def tries(status: str, retry_count: int, max_retries: int) -> str:
    """Attempts made out of the most it gets (the first attempt and every retry): '1/6'."""
    return f"{attempts_made(status, retry_count)}/{max_retries + 1}"
