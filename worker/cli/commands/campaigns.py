"""`mailroom campaigns stats CAMPAIGN`: a campaign's sent, failed, bounced, opened, clicked and unsubscribed counts."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from worker.core.config import Settings


def cmd_campaigns(args: argparse.Namespace, settings: Settings) -> int:
    """Print one campaign's counts and rates."""
    from worker.core.db import connect, database_url
    from worker.tracking.campaigns import campaign_stats, format_stats

    with connect(database_url(settings)) as conn:
        stats = campaign_stats(conn, args.campaign)
    if stats.emails == 0 and stats.unsubscribed == 0:
        print(f"error: no email belongs to campaign {args.campaign!r}", file=sys.stderr)
        return 1
    print(json.dumps(stats.as_json(), indent=2) if args.json else format_stats(stats))
    return 0


CAMPAIGNS = """\
Statistics of the emails enqueued with a campaign_id (reference 05): sent, failed, bounced,
opened, clicked and unsubscribed, with their rates. Reading them changes nothing.

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


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom campaigns stats`."""
    raw = argparse.RawDescriptionHelpFormatter
    parser = sub.add_parser(
        "campaigns", help="campaign statistics", description=CAMPAIGNS, formatter_class=raw
    )
    actions = parser.add_subparsers(dest="campaigns_command", required=True, metavar="ACTION")
    stats = actions.add_parser(
        "stats",
        help="sent, failed, bounced, opened, clicked and unsubscribed counts and rates",
        description=STATS,
        formatter_class=raw,
    )
    stats.add_argument("campaign", metavar="CAMPAIGN", help="the campaign_id given at enqueue")
    stats.add_argument("--json", action="store_true", help="machine-readable output")
    stats.set_defaults(handler=cmd_campaigns)
