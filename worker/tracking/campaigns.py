"""Campaign statistics: what was sent, what failed or bounced, and what came back (opens, clicks, unsubscribes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

# `sent` counts every email a relay accepted, those that bounced later (a DSN, a webhook) included;
# `bounced` counts the refusals at once and those later bounces; `complained` the recipients who
# reported an email as spam (bounce_events, which keep the campaign after retention).
# One statement: one pass over the campaign's queued emails (index on campaign_id), one over its
# archived ones, and the event tables and unsubscribe list by their campaign indexes. Email that
# retention has archived and deleted from the queue (sent, failed, bounced, suppressed, cancelled)
# is still counted, through `archived_emails`.
CAMPAIGN_STATS = """
WITH q AS (
    SELECT count(*) AS emails,
           count(*) FILTER (WHERE status IN ('sent', 'bounced')) AS sent,
           count(*) FILTER (WHERE status IN ('sent', 'bounced') AND track_opens) AS sent_with_pixel,
           count(*) FILTER (WHERE status IN ('sent', 'bounced') AND track_clicks) AS sent_with_links,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           count(*) FILTER (WHERE status = 'failed' AND error_details ->> 'outcome' = 'bounced')
               AS bounced_at_once,
           count(*) FILTER (WHERE status = 'bounced') AS bounced_later,
           count(*) FILTER (WHERE status = 'suppressed') AS suppressed,
           count(*) FILTER (WHERE status IN ('pending', 'assigned')) AS queued
    FROM mailroom.email_queue WHERE campaign_id = %(c)s
), a AS (
    SELECT count(*) AS emails,
           count(*) FILTER (WHERE status IN ('sent', 'bounced')) AS sent,
           count(*) FILTER (WHERE status IN ('sent', 'bounced') AND track_opens) AS sent_with_pixel,
           count(*) FILTER (WHERE status IN ('sent', 'bounced') AND track_clicks) AS sent_with_links,
           count(*) FILTER (WHERE status = 'failed') AS failed,
           count(*) FILTER (WHERE status = 'failed' AND bounced) AS bounced_at_once,
           count(*) FILTER (WHERE status = 'bounced') AS bounced_later,
           count(*) FILTER (WHERE status = 'suppressed') AS suppressed
    FROM mailroom.archived_emails WHERE campaign_id = %(c)s
)
SELECT
    q.emails + a.emails AS emails,
    q.sent + a.sent AS sent,
    q.failed + a.failed AS failed,
    q.bounced_at_once + a.bounced_at_once + q.bounced_later + a.bounced_later AS bounced,
    q.bounced_later + a.bounced_later AS bounced_after_sending,
    (SELECT count(DISTINCT (email_id, recipient)) FROM mailroom.bounce_events
     WHERE campaign_id = %(c)s AND kind = 'complaint') AS complained,
    q.suppressed + a.suppressed AS suppressed, q.queued,
    q.sent_with_pixel + a.sent_with_pixel AS sent_with_pixel,
    q.sent_with_links + a.sent_with_links AS sent_with_links,
    (SELECT count(DISTINCT email_id) FROM mailroom.open_events WHERE campaign_id = %(c)s) AS opened,
    (SELECT count(*) FROM mailroom.open_events WHERE campaign_id = %(c)s) AS opens,
    (SELECT count(DISTINCT email_id) FROM mailroom.click_events WHERE campaign_id = %(c)s) AS clicked,
    (SELECT count(*) FROM mailroom.click_events WHERE campaign_id = %(c)s) AS clicks,
    (SELECT count(*) FROM mailroom.unsubscribe_list WHERE campaign_id = %(c)s) AS unsubscribed
FROM q, a
"""


@dataclass(frozen=True)
class CampaignStats:
    """Counts for one campaign; opened and clicked count emails (unique), opens and clicks count events.

    `sent_with_pixel` and `sent_with_links` count the sent emails that could report an open or a
    click at all: open and click rates are taken over those, so untracked email (`track: false`,
    a text-only body, MAILROOM_TRACK_CAMPAIGNS off) neither lowers them nor shows as 0 %.
    """

    campaign_id: str
    emails: int
    sent: int
    failed: int
    bounced: int
    bounced_after_sending: int
    complained: int
    suppressed: int
    queued: int
    sent_with_pixel: int
    sent_with_links: int
    opened: int
    opens: int
    clicked: int
    clicks: int
    unsubscribed: int

    def rates(self) -> dict[str, float | None]:
        """Failure and bounce rates over finished attempts; opens and clicks over the sent emails that
        carried a pixel or tracked links; unsubscribes over emails sent. None when undefined."""
        attempted = self.sent + self.failed

        def ratio(part: int, whole: int) -> float | None:
            return part / whole if whole else None

        return {
            "failed": ratio(self.failed, attempted),
            "bounced": ratio(self.bounced, attempted),
            "opened": ratio(self.opened, self.sent_with_pixel),
            "clicked": ratio(self.clicked, self.sent_with_links),
            "complained": ratio(self.complained, self.sent),
            "unsubscribed": ratio(self.unsubscribed, self.sent),
        }

    def as_json(self) -> dict[str, Any]:
        """Counts and rates, for `--json`."""
        return {**asdict(self), "rates": self.rates()}


def campaign_stats(conn: psycopg.Connection[Any], campaign_id: str) -> CampaignStats:
    """Count one campaign's outcomes."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(CAMPAIGN_STATS, {"c": campaign_id}).fetchone()
    assert row is not None
    return CampaignStats(campaign_id=campaign_id, **{k: int(v) for k, v in row.items()})


def format_stats(stats: CampaignStats) -> str:
    """A small table for the terminal: count and rate per outcome."""
    rates = stats.rates()

    def pct(name: str) -> str:
        value = rates.get(name)
        return "" if value is None else f"{value:7.1%}"

    lines = [
        f"campaign {stats.campaign_id}: {stats.emails} email(s), {stats.queued} still queued, "
        f"{stats.suppressed} suppressed",
        f"{'':<14}{'count':>8} {'rate':>7}",
        f"{'sent':<14}{stats.sent:>8}",
        f"{'failed':<14}{stats.failed:>8} {pct('failed')}",
        f"{'bounced':<14}{stats.bounced:>8} {pct('bounced')}  ({stats.bounced_after_sending} after sending)",
        f"{'complained':<14}{stats.complained:>8} {pct('complained')}",
        f"{'opened':<14}{stats.opened:>8} {pct('opened')}  ({stats.opens} opens)",
        f"{'clicked':<14}{stats.clicked:>8} {pct('clicked')}  ({stats.clicks} clicks)",
        f"{'unsubscribed':<14}{stats.unsubscribed:>8} {pct('unsubscribed')}",
        "failed and bounced are rates of finished attempts; complained and unsubscribed of emails sent;"
        " opened and clicked",
        f"of the sent emails with an open pixel ({stats.sent_with_pixel}) or tracked links "
        f"({stats.sent_with_links}): a blank rate means none was tracked.",
        "Opens are approximate: image blocking hides some, and privacy proxies (Apple Mail Privacy "
        "Protection) and link scanners add others.",
    ]
    return "\n".join(lines)
