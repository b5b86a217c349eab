"""The overview's figures, honest at any queue size: exact counts, or estimates marked as such with a bound.

Every count walks one partial index and stops one row past `cap`: under the cap it is exact. A count that
reached the cap is known to be at least the cap; a 1% page sample of the queue then estimates it. The sample
is never used for a count that finished under the cap, so a handful of retrying email among a million
pending reads as exactly that handful (a 1% sample of 32 rows reads as 0).

Rates: the attempt failure rate (every attempt that did not deliver, retries included) over the last hour
of the send log, beside the final failure rate (email that ended failed among the email that ended sent or
failed in the same hour), each labelled with its window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

RATE_WINDOW = "last hour"

# Each count walks one partial index and stops one row past the cap.
QUEUE_COUNTS = """
SELECT (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'pending' LIMIT %(cap)s) s) AS pending,
       (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'pending' AND scheduled_for <= %(now)s LIMIT %(cap)s) s) AS due_now,
       (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'pending' AND scheduled_for > %(now)s LIMIT %(cap)s) s) AS scheduled_later,
       (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'pending' AND retry_count > 0 LIMIT %(cap)s) s) AS retrying,
       (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'assigned' LIMIT %(cap)s) s) AS assigned,
       (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'failed' LIMIT %(cap)s) s) AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM mailroom.email_queue
         WHERE status = 'suppressed' LIMIT %(cap)s) s) AS suppressed,
       (SELECT min(scheduled_for) FROM mailroom.email_queue
         WHERE status = 'pending' AND scheduled_for <= %(now)s) AS oldest_due
"""

# About 1% of the queue's pages: each share of the sampled rows times the table's row count as the planner
# last measured it (the sample's own size varies too much from run to run to scale by 100). The same pages
# each time (REPEATABLE), so an unchanged queue shows an unchanged estimate.
QUEUE_SAMPLE = """
SELECT count(*) AS sampled,
       (SELECT reltuples FROM pg_class WHERE oid = 'mailroom.email_queue'::regclass) AS reltuples,
       count(*) FILTER (WHERE status = 'pending') AS pending,
       count(*) FILTER (WHERE status = 'pending' AND scheduled_for <= %(now)s) AS due_now,
       count(*) FILTER (WHERE status = 'pending' AND scheduled_for > %(now)s) AS scheduled_later,
       count(*) FILTER (WHERE status = 'pending' AND retry_count > 0) AS retrying,
       count(*) FILTER (WHERE status = 'assigned') AS assigned,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       count(*) FILTER (WHERE status = 'suppressed') AS suppressed
FROM mailroom.email_queue TABLESAMPLE SYSTEM (1) REPEATABLE (7)
"""

COUNT_KEYS = ("pending", "due_now", "scheduled_later", "retrying", "assigned", "failed", "suppressed")

# The last hour of the send log: runtime partition pruning keeps this on the newest partition. An attempt
# failed when it did not deliver and was not suppressed (like `mailroom health`), retries included.
SENT_PER_MINUTE = """
SELECT floor(extract(epoch FROM %(now)s::timestamptz - attempted_at) / 60)::int AS minutes_ago,
       count(*) FILTER (WHERE outcome = 'sent') AS sent,
       count(*) FILTER (WHERE outcome NOT IN ('sent', 'suppressed')) AS failed,
       count(*) FILTER (WHERE outcome <> 'suppressed') AS attempts
FROM mailroom.send_logs
WHERE attempted_at > %(now)s::timestamptz - interval '1 hour' AND attempted_at <= %(now)s
GROUP BY 1
"""

# Email that ended in the last hour, over the sent and failed indexes.
FINISHED_LAST_HOUR = """
SELECT (SELECT count(*) FROM mailroom.email_queue WHERE status = 'sent'
         AND sent_at > %(now)s::timestamptz - interval '1 hour' AND sent_at <= %(now)s) AS sent,
       (SELECT count(*) FROM mailroom.email_queue WHERE status = 'failed'
         AND finished_at > %(now)s::timestamptz - interval '1 hour' AND finished_at <= %(now)s) AS failed
"""


@dataclass(frozen=True)
class Count:
    """A count as the console shows it: exact, or an estimate with the bound known for sure."""

    value: int
    exact: bool = True
    at_least: int = 0

    def label(self) -> str:
        """'1,234' when exact; '~1.0M (est.)' when estimated above the bound; '≥50,000' when only the bound is known."""
        if self.exact:
            return f"{self.value:,}"
        if self.value > self.at_least:
            return f"~{short(self.value)} (est.)"
        return f"≥{self.at_least:,}"


def short(n: int) -> str:
    """A large number in few characters: 1.0M, 48k, 300."""
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n // 1000}k"
    return f"{n:,}"


@dataclass
class Rates:
    """The last hour's attempts and finished email: the two failure rates and what they are out of."""

    attempts: int = 0
    failed_attempts: int = 0
    finished: int = 0
    failed_final: int = 0

    @property
    def attempt_failure_rate(self) -> float | None:
        """Failed attempts (retries included) among all attempts, or None with no attempts."""
        return self.failed_attempts / self.attempts if self.attempts else None

    @property
    def final_failure_rate(self) -> float | None:
        """Email that ended failed among email that ended sent or failed, or None when none ended."""
        return self.failed_final / self.finished if self.finished else None


class Reader(Protocol):
    """Where the figures read from (the console's `ConsoleData`): read queries, and the exact-count cap."""

    exact_limit: int

    async def fetch(self, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """The rows of one read query."""
        ...


async def queue_counts(data: Reader, now: datetime) -> tuple[dict[str, Count], datetime | None]:
    """Each queue count exact under the data's cap, else estimated from a sample and bounded by the cap."""
    cap = data.exact_limit
    row = (await data.fetch(QUEUE_COUNTS, {"now": now, "cap": cap + 1}))[0]
    counts = {key: Count(int(row[key])) for key in COUNT_KEYS}
    over = [key for key in COUNT_KEYS if counts[key].value > cap]
    if over:
        sample = (await data.fetch(QUEUE_SAMPLE, {"now": now}))[0]
        sampled, rows = int(sample["sampled"]), float(sample["reltuples"] or 0)
        for key in over:
            # Never analyzed (reltuples -1) or an empty sample: only the bound is known.
            share = int(sample[key]) / sampled if sampled and rows > 0 else 0.0
            counts[key] = Count(round(share * rows), exact=False, at_least=cap)
    return counts, row["oldest_due"]


async def last_hour(data: Reader, now: datetime) -> tuple[list[float], Rates]:
    """Email sent in each of the last 60 minutes (oldest first) and the last hour's failure rates."""
    minutes = await data.fetch(SENT_PER_MINUTE, {"now": now})
    per_minute = [0.0] * 60
    for row in minutes:
        ago = int(row["minutes_ago"])
        if 0 <= ago < 60:
            per_minute[59 - ago] = float(row["sent"])
    finished: dict[str, Any] = (await data.fetch(FINISHED_LAST_HOUR, {"now": now}))[0]
    rates = Rates(
        attempts=sum(int(r["attempts"]) for r in minutes),
        failed_attempts=sum(int(r["failed"]) for r in minutes),
        finished=int(finished["sent"]) + int(finished["failed"]),
        failed_final=int(finished["failed"]),
    )
    return per_minute, rates
