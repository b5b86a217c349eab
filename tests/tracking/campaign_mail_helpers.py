"""Helpers for the campaign mail tests: a message as the worker sends it, and a realistic newsletter."""

from __future__ import annotations

from email import message_from_bytes, policy
from email.message import EmailMessage
from typing import Any

import psycopg
from psycopg.rows import dict_row

from worker.core.campaign_mail import Campaign, dress_for
from worker.core.config import Settings
from worker.core.message import build_message

FROM = "news@shop.example.com"

NEWSLETTER_PARAGRAPHS = [
    "This spring we opened our second workshop in the old mill by the river, and the first tables made "
    "there are now in the shop. Each one is built from oak that was felled locally and dried for two "
    "years before it reaches the bench, so the wood stays straight through every season.",
    "Many of you asked how we finish the tops. We use a hard wax oil in three thin coats, rubbed in by "
    "hand and left to cure for a week. It keeps the grain visible, resists water rings from a glass left "
    "overnight, and can be refreshed at home with a soft cloth and a little more oil once a year.",
    "Our repair service now covers chairs as well as tables. Bring in a wobbly chair and we will take it "
    "apart, clean the old glue from every joint, and put it back together with hide glue so that a future "
    "repair stays easy. Most repairs take two weeks and we will write to you when yours is ready.",
    "In May we will run two evening classes on sharpening chisels and plane irons. Places are limited to "
    "eight people so that everyone gets time at the stones with one of our makers. The classes last two "
    "hours and all tools are provided, though you are welcome to bring your own blades to work on.",
    "The timber yard behind the mill is now open on Saturday mornings. You can walk through the racks, "
    "see how boards are stacked with spacers so that air moves between them, and choose offcuts for your "
    "own projects. Offcuts are sold by weight and we will cut them to length while you wait.",
    "We have also changed how we deliver. Large pieces now travel in blankets rather than cardboard, and "
    "our two drivers carry them into the room where they will stand. The blankets come back with the van, "
    "which saves a great deal of packaging and means nothing arrives scuffed from a long journey.",
    "Several readers asked about caring for furniture near a radiator. Wood moves as the air dries in "
    "winter, so keep a table at least a metre from the heat if you can, and a bowl of water on the "
    "radiator helps more than you would think. Small gaps that open in January usually close by April.",
    "Our apprentice, who joined us two years ago, finished her first commission last month: a walnut "
    "writing desk with three drawers, each dovetailed by hand. The customer sent us a photograph of it in "
    "her study, and we have put it on the wall of the workshop where everyone who comes in can see it.",
    "For those who have asked about gift vouchers, they are now available in any amount from twenty "
    "pounds. A voucher can be spent on furniture, on repairs, on classes or on timber from the yard, and "
    "it stays valid for two full years from the day it is bought, so there is never any hurry to use it.",
    "Next month we will write about chairs: why a good chair is harder to make than a table, how we shape "
    "a seat with an adze and a travisher, and what to look for when you buy an old chair at an auction. "
    "We will also share a few photographs from the bending room, where the steam box lives.",
    "Finally, thank you to everyone who visited during the open weekend. We counted more than three "
    "hundred visitors, and the questions you asked about joinery and timber gave us ideas for the next "
    "few letters. If there is something you would like us to write about, simply reply to this email.",
]


def newsletter() -> tuple[str, str]:
    """A newsletter of a few hundred words, as text and as HTML with two links."""
    text = "Hello from the workshop,\n\n" + "\n\n".join(NEWSLETTER_PARAGRAPHS) + "\n\nThe Oak & Iron team\n"
    paragraphs = "".join(f"<p>{p}</p>" for p in NEWSLETTER_PARAGRAPHS)
    html = (
        "<html><head><title>Spring at the workshop</title></head><body>"
        "<h1>Spring at the workshop</h1><p>Hello from the workshop,</p>"
        f"{paragraphs}"
        '<p>See the new tables on <a href="https://shop.example.com/tables">our shop</a> or book a '
        '<a href="https://shop.example.com/classes">sharpening class</a>.</p>'
        "<p>The Oak &amp; Iron team</p></body></html>"
    )
    return text, html


def stored(db_url: str, email_id: int) -> dict[str, Any]:
    """The stored email as the claim hands it to the engine (the columns `ClaimedEmail` has)."""
    with psycopg.connect(db_url, row_factory=dict_row) as conn:
        row = conn.execute("SELECT * FROM mailroom.email_queue WHERE id = %s", (email_id,)).fetchone()
    assert row is not None
    return row


def sent_bytes(
    row: dict[str, Any],
    settings: Settings,
    *,
    sender: str = "newsletter",
    sender_postal_address: str | None = None,
    campaigns: dict[str, Campaign] | None = None,
    key: bytes | None = None,
) -> bytes:
    """The bytes the worker's sender account builds for the row (`worker.engine.execute.build` without DKIM)."""
    dress = dress_for(
        row,
        sender=sender,
        from_email=FROM,
        sender_postal_address=sender_postal_address,
        campaigns=campaigns or {},
        default_postal_address=settings.postal_address,
        footer_transactional=settings.postal_footer_transactional,
    )
    return build_message(row, FROM, "Oak and Iron", key, dress).content


def parsed(content: bytes) -> EmailMessage:
    """The message parsed as a mail client would."""
    message = message_from_bytes(content, policy=policy.default)
    assert isinstance(message, EmailMessage)
    return message


def parts(content: bytes) -> tuple[str, str | None]:
    """The decoded text part and HTML part (None when there is none)."""
    message = parsed(content)
    text = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert text is not None, "a text part is always present"
    return text.get_content(), html.get_content() if html is not None else None
