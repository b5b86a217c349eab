"""`mailroom campaigns stats CAMPAIGN`: a campaign's sent, failed, bounced, opened, clicked and unsubscribed counts."""

from __future__ import annotations

import json
import sys

import click

from worker.cli.framework import Command, Database, Group, json_option, with_database

CAMPAIGNS = """\
Statistics of the emails enqueued with a campaign_id (the "campaign_id" of `mailroom enqueue`'s
JSON lines, or mailroom.EmailRequest(campaign_id=...)): sent, failed, bounced, opened, clicked and
unsubscribed, with their rates. Reading them changes nothing.

Examples:
  mailroom campaigns stats spring-sale
  mailroom campaigns stats spring-sale --json | jq .rates"""

STATS = """\
Counts and rates for the emails enqueued with campaign_id CAMPAIGN. Opened and clicked count
emails with at least one open or click (each event is also counted). Failure and bounce rates are
over finished attempts (sent + failed); open and click rates over the sent emails that carried an
open pixel or tracked links (blank when none did); unsubscribe rate over emails sent.
Changes nothing. Exit status 0, 1 when no email belongs to the campaign.

Examples:
  mailroom campaigns stats spring-sale
  mailroom campaigns stats spring-sale --json"""


@click.group(cls=Group, help=CAMPAIGNS)
def campaigns() -> None:
    """`mailroom campaigns`: its actions below."""


@campaigns.command(
    "stats",
    cls=Command,
    help=STATS,
    short_help="sent, failed, bounced, opened, clicked and unsubscribed counts and rates",
)
@click.argument("campaign", metavar="CAMPAIGN")
@json_option
@with_database
def stats(db: Database, campaign: str, as_json: bool) -> int:
    """Print one campaign's counts and rates."""
    from worker.core.db import connect
    from worker.tracking.campaigns import campaign_stats, format_stats

    with connect(db.url) as conn:
        figures = campaign_stats(conn, campaign)
    if figures.emails == 0 and figures.unsubscribed == 0:
        print(f"error: no email belongs to campaign {campaign!r}", file=sys.stderr)
        return 1
    print(json.dumps(figures.as_json(), indent=2) if as_json else format_stats(figures))
    return 0
