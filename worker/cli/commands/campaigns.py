"""`mailroom campaigns stats CAMPAIGN`: a campaign's sent, failed, bounced, opened, clicked and unsubscribed counts."""

from __future__ import annotations

import json

import click

from worker.cli.framework import Command, Database, Group, json_option, with_database

CAMPAIGNS = """\
Statistics of the emails enqueued with a campaign_id (the "campaign_id" of `mailroom enqueue`'s
JSON lines, or mailroom.EmailRequest(campaign_id=...)): sent, failed, bounced, opened, clicked and
unsubscribed, with their rates. Reading them changes nothing. `set` and `show` say how a
campaign's email is dressed (List-Id, the postal address in its footer, open tracking).

Examples:
  mailroom campaigns stats spring-sale
  mailroom campaigns set spring-sale --postal-address 'Acme Inc., 1 Main St, Springfield, IL 62701'
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
        click.echo(f"error: no email belongs to campaign {campaign!r}", err=True)
        return 1
    click.echo(json.dumps(figures.as_json(), indent=2) if as_json else format_stats(figures))
    return 0


SET = """\
How the email of campaign CAMPAIGN is dressed: its List-Id (RFC 2919; by default the campaign's
name and the From domain), the physical postal address in its footer (before the sender account's
and MAILROOM_POSTAL_ADDRESS), and whether it carries an open-tracking pixel (on by default; a pixel
in a short email costs spam score, see the campaign mail documentation). Open tracking applies to
email enqueued from now on; List-Id and address to email sent from now on. Options not given keep
their value. Exit status 0, 2 for a value that is refused (control characters, a List-Id that is
not a dot-atom, an address under 5 or over 300 characters).

Examples:
  mailroom campaigns set spring-sale --postal-address 'Acme Inc., 1 Main St, Springfield, IL 62701'
  mailroom campaigns set spring-sale --list-id spring.news.example.com --no-open-tracking"""

SHOW = """\
The settings of campaign CAMPAIGN (List-Id, postal address, open tracking), with the values its
email gets when nothing is set. Changes nothing. Exit status 0.

Examples:
  mailroom campaigns show spring-sale
  mailroom campaigns show spring-sale --json"""

SENDER_ADDRESS = """\
Set the physical postal address in the footer of campaign email sent by sender account NAME
(unless the campaign has its own), or remove it with --clear. Exit status 0, 1 when no such
sender account, 2 for an address that is refused.

Examples:
  mailroom campaigns sender-address newsletter 'Acme Inc., 1 Main St, Springfield, IL 62701'
  mailroom campaigns sender-address newsletter --clear"""

UPSERT = """
INSERT INTO mailroom.campaigns (campaign_id, list_id, postal_address, track_opens)
VALUES (%(c)s, %(list_id)s, %(postal)s, coalesce(%(opens)s, true))
ON CONFLICT (campaign_id) DO UPDATE SET
    list_id = CASE WHEN %(set_list)s THEN excluded.list_id ELSE mailroom.campaigns.list_id END,
    postal_address = CASE WHEN %(set_postal)s THEN excluded.postal_address ELSE mailroom.campaigns.postal_address END,
    track_opens = coalesce(%(opens)s, mailroom.campaigns.track_opens)
RETURNING campaign_id, list_id, postal_address, track_opens
"""
SELECT_ONE = (
    "SELECT campaign_id, list_id, postal_address, track_opens FROM mailroom.campaigns WHERE campaign_id = %s"
)
SET_SENDER_ADDRESS = "UPDATE mailroom.sender_accounts SET postal_address = %s WHERE name = %s RETURNING id"


def _describe(campaign: str, row: dict[str, object] | None) -> dict[str, object]:
    return {
        "campaign_id": campaign,
        "list_id": (row or {}).get("list_id"),
        "postal_address": (row or {}).get("postal_address"),
        "track_opens": (row or {}).get("track_opens", True),
    }


def _show(settings: dict[str, object], as_json: bool) -> None:
    from worker.core.terminal import printable as safe

    if as_json:
        click.echo(json.dumps(settings, indent=2))
        return
    click.echo(f"campaign {safe(str(settings['campaign_id']))}")
    click.echo(f"  List-Id         {safe(str(settings['list_id'] or '(campaign name . From domain)'))}")
    postal = settings["postal_address"]
    fallback = "(the sender account's, else MAILROOM_POSTAL_ADDRESS)"
    click.echo(f"  postal address  {safe(str(postal)) if postal else fallback}")
    click.echo(f"  open tracking   {'on' if settings['track_opens'] else 'off'}")


@campaigns.command(
    "set", cls=Command, help=SET, short_help="List-Id, postal address and open tracking of a campaign"
)
@click.argument("campaign", metavar="CAMPAIGN")
@click.option("--list-id", metavar="ID", help="List-Id such as spring.news.example.com ('' to derive it)")
@click.option("--postal-address", metavar="TEXT", help="postal address for the footer ('' to remove)")
@click.option("--open-tracking/--no-open-tracking", default=None, help="carry an open pixel or not")
@json_option
@with_database
def set_campaign(
    db: Database,
    campaign: str,
    list_id: str | None,
    postal_address: str | None,
    open_tracking: bool | None,
    as_json: bool,
) -> int:
    """Store a campaign's settings."""
    from psycopg.rows import dict_row

    from worker.core.campaign_mail import check_list_id, check_postal_address
    from worker.core.db import connect
    from worker.core.validation import ValidationError

    try:
        if not 1 <= len(campaign) <= 100 or any(ord(c) < 32 or ord(c) == 127 for c in campaign):
            raise ValidationError("campaign", "must be 1 to 100 characters without control characters")
        list_value = check_list_id("--list-id", list_id) if list_id else None
        postal = check_postal_address("--postal-address", postal_address) if postal_address else None
    except ValidationError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    params = {
        "c": campaign,
        "list_id": list_value,
        "postal": postal,
        "opens": open_tracking,
        "set_list": list_id is not None,
        "set_postal": postal_address is not None,
    }
    with connect(db.url) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(UPSERT, params).fetchone()
    _show(_describe(campaign, row), as_json)
    return 0


@campaigns.command(
    "show", cls=Command, help=SHOW, short_help="a campaign's List-Id, postal address, open tracking"
)
@click.argument("campaign", metavar="CAMPAIGN")
@json_option
@with_database
def show(db: Database, campaign: str, as_json: bool) -> int:
    """Print a campaign's settings."""
    from psycopg.rows import dict_row

    from worker.core.db import connect

    with connect(db.url) as conn, conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(SELECT_ONE, (campaign,)).fetchone()
    _show(_describe(campaign, row), as_json)
    return 0


@campaigns.command(
    "sender-address", cls=Command, help=SENDER_ADDRESS, short_help="a sender account's footer postal address"
)
@click.argument("name", metavar="NAME")
@click.argument("address", metavar="ADDRESS", required=False)
@click.option("--clear", is_flag=True, help="remove the sender account's postal address")
@with_database
def sender_address(db: Database, name: str, address: str | None, clear: bool) -> int:
    """Set or clear a sender account's postal address."""
    from worker.core.campaign_mail import check_postal_address
    from worker.core.db import connect
    from worker.core.validation import ValidationError

    if clear == (address is not None):
        click.echo("error: give either ADDRESS or --clear", err=True)
        return 2
    try:
        value = None if clear else check_postal_address("ADDRESS", address or "")
    except ValidationError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    with connect(db.url) as conn:
        found = conn.execute(SET_SENDER_ADDRESS, (value, name)).fetchone()
    if found is None:
        click.echo(f"error: no sender account named {name!r}", err=True)
        return 1
    click.echo(f"sender account {name}: postal address {'removed' if clear else 'set'}")
    return 0
