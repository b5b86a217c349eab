"""What campaign mail carries for inbox providers: List-Id, Feedback-ID, a text part and a visible footer.

Decided when the message is built (`worker.core.message.build_message`), because the footer's
unsubscribe link is each recipient's own (the one in that copy's `List-Unsubscribe`) and the postal
address may be the sending account's. Everything added is derived from the stored email and the
configured addresses, so the same email is always dressed the same way by the same sender.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from worker.core.validation import ValidationError

# C0 and C1 controls, DEL: none of them belongs in an address printed in a footer or a header.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# RFC 5322 dot-atom-text, the form of RFC 2919's list-label and namespace.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_DOT_ATOM = re.compile(rf"^{_ATEXT}(?:\.{_ATEXT})+$")
_LABEL_NOISE = re.compile(r"[^a-z0-9]+")
_DOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+$")
# The tracker's https/http URL in a List-Unsubscribe value (the first entry; mailto may follow).
_UNSUBSCRIBE_URL = re.compile(r"<(https?://[^<>\s]+/u/[^<>\s]+)>")
_BODY_END = re.compile(r"</body\s*>", re.IGNORECASE)

POSTAL_MIN, POSTAL_MAX = 5, 300
MISSING_POSTAL = (
    "the email of campaign {campaign} needs a physical postal address (CAN-SPAM) and none is set: "
    "mailroom campaigns set {campaign} --postal-address '...', "
    "or one on every sender account (mailroom campaigns sender-address NAME '...'), "
    "or MAILROOM_POSTAL_ADDRESS"
)


@dataclass(frozen=True)
class Campaign:
    """One `mailroom.campaigns` row: how that campaign's email is dressed."""

    list_id: str | None = None
    postal_address: str | None = None
    track_opens: bool = True


@dataclass(frozen=True)
class Dress:
    """What one email gets when it is built: headers added and the footer's postal address."""

    headers: Mapping[str, str]
    footer: bool  # a visible footer (unsubscribe link when the email has one, postal address)
    postal_address: str | None


SELECT_CAMPAIGNS = "SELECT campaign_id, list_id, postal_address, track_opens FROM mailroom.campaigns"


def check_postal_address(field: str, value: str) -> str:
    """The address as it will be printed (trimmed), or `ValidationError`: plain text on one line."""
    from worker.core.validation import ValidationError

    if _CONTROL.search(value):
        raise ValidationError(field, "control characters (line breaks included) are not allowed")
    value = value.strip()
    if not POSTAL_MIN <= len(value) <= POSTAL_MAX:
        raise ValidationError(field, f"must be {POSTAL_MIN} to {POSTAL_MAX} characters")
    return value


def check_list_id(field: str, value: str) -> str:
    """A List-Id as RFC 2919 writes it between < and >: ASCII dot-atom with at least one dot."""
    from worker.core.validation import ValidationError

    if len(value) > 255 or not _DOT_ATOM.match(value):
        raise ValidationError(field, "must look like news.example.com (ASCII letters, digits, dots)")
    return value


def label(text: str) -> str:
    """A header-safe form of a campaign, kind or account name: lower-case ASCII letters, digits and
    dashes. Anything else is replaced, and then a short hash keeps two different names apart."""
    import hashlib

    plain = _LABEL_NOISE.sub("-", text.lower()).strip("-")[:40].strip("-")
    if plain == text:
        return plain
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{plain}-{digest}" if plain else f"x{digest}"


def mail_domain(from_email: str) -> str:
    """The From address's domain as ASCII (IDNA), for a List-Id namespace and a Feedback-ID."""
    domain = from_email.rpartition("@")[2].lower()
    try:
        domain = domain.encode("idna").decode("ascii")
    except UnicodeError:
        return label(domain) + ".invalid"
    return domain if _DOMAIN.match(domain) else label(domain) + ".invalid"


def list_id(campaign_id: str, configured: str | None, from_email: str) -> str:
    """The campaign's List-Id value: the one configured, else `<campaign-label>.<From domain>`."""
    return f"<{configured or label(campaign_id) + '.' + mail_domain(from_email)}>"


def feedback_id(campaign_or_kind: str, sender: str, from_email: str) -> str:
    """Gmail's Feedback-ID: campaign (or the kind of transactional email), sender account, and the
    From domain as the stable sender identifier; colons separate the fields, so none is in a field."""
    return f"{label(campaign_or_kind)}:{label(sender)}:mailroom:{mail_domain(from_email)}"


def email_kind(row: Mapping[str, Any]) -> str:
    """What a transactional email is, for Feedback-ID: its template, else its reference type."""
    return str(row.get("template") or row.get("reference_type") or "transactional")


def is_marketing(row: Mapping[str, Any]) -> bool:
    """Campaign or other non-transactional email. A row without the column (built outside the claim)
    is judged by the unsubscribe header enqueue writes only for non-transactional email."""
    transactional = row.get("transactional")
    if transactional is None:
        return "List-Unsubscribe" in (row.get("headers") or {})
    return not transactional


def needs_postal_address(campaign_id: str | None, marketing: bool) -> bool:
    """Whether an email may not leave without a physical postal address (CAN-SPAM): commercial email,
    which is a campaign's email that is not transactional. Other non-transactional email (a birthday
    greeting has no campaign) shows the address in its footer when one is known, and is never refused
    for want of one."""
    return marketing and bool(campaign_id)


def missing_postal_address(field: str, campaign_id: str) -> ValidationError:
    """The refusal of a campaign's email without a postal address, saying how to give it one."""
    import shlex

    from worker.core.validation import ValidationError

    return ValidationError(field, MISSING_POSTAL.format(campaign=shlex.quote(campaign_id)))


def dress_for(
    row: Mapping[str, Any],
    *,
    sender: str,
    from_email: str,
    sender_postal_address: str | None,
    campaigns: Mapping[str, Campaign],
    default_postal_address: str | None,
    footer_transactional: bool = False,
) -> Dress:
    """Headers and footer for one stored email sent by one sender account.

    Raises `ValidationError` for a campaign's email without any postal address (the campaign's, the
    sender account's, MAILROOM_POSTAL_ADDRESS as `default_postal_address`): it must not leave
    without one (`needs_postal_address`). `footer_transactional` is MAILROOM_POSTAL_FOOTER_TRANSACTIONAL.
    """
    campaign_id = row.get("campaign_id")
    campaign = campaigns.get(campaign_id) if campaign_id else None
    postal = (
        (campaign.postal_address if campaign else None) or sender_postal_address or default_postal_address
    )
    marketing = is_marketing(row)
    kind = campaign_id if campaign_id else email_kind(row)
    headers = _headers(campaign_id or None, campaign.list_id if campaign else None, kind, sender, from_email)
    if postal is None and needs_postal_address(campaign_id, marketing):
        raise missing_postal_address("postal_address", str(campaign_id))
    footer = marketing or (footer_transactional and postal is not None)
    return Dress(headers, footer, postal if footer else None)


# Thousands of emails a second share a few campaigns, kinds and accounts: their headers are made once.
@functools.lru_cache(maxsize=4096)
def _headers(
    campaign_id: str | None, configured_list_id: str | None, kind: str, sender: str, from_email: str
) -> Mapping[str, str]:
    """List-Id (a campaign's email) and Feedback-ID (`kind`: the campaign, else the kind of email), read-only."""
    headers: dict[str, str] = {}
    if campaign_id:
        headers["List-Id"] = list_id(campaign_id, configured_list_id, from_email)
    headers["Feedback-ID"] = feedback_id(kind, sender, from_email)
    return MappingProxyType(headers)


def unsubscribe_url(headers: Mapping[str, str]) -> str | None:
    """The tracker's unsubscribe URL in the email's List-Unsubscribe (the same token), if any."""
    found = _UNSUBSCRIBE_URL.search(headers.get("List-Unsubscribe", ""))
    return found.group(1) if found else None


def footer_text(url: str | None, postal: str | None) -> str:
    """The plain-text footer: a separator, the unsubscribe link, the postal address."""
    lines = ["", "", "--"]
    if url:
        lines.append(f"You receive this email because you subscribed. Unsubscribe: {url}")
    if postal:
        lines.append(postal)
    return "\n".join(lines) + "\n"


def footer_html(url: str | None, postal: str | None) -> str:
    """The HTML footer; the address and URL escaped (an address is text, never markup)."""
    import html as html_lib

    parts = []
    if url:
        href = html_lib.escape(url, quote=True)
        parts.append(
            f'You receive this email because you subscribed. <a href="{href}">Unsubscribe</a> at any time.'
        )
    if postal:
        parts.append(html_lib.escape(postal))
    inner = "<br>".join(parts)
    return f'<hr><p style="font-size:12px;color:#555555">{inner}</p>'


def add_footer(
    text: str | None, html: str | None, url: str | None, postal: str | None
) -> tuple[str, str | None]:
    """Text (made from the HTML when the email has none) and HTML with the footer at their end."""
    if text is None or not text.strip():
        from worker.core.html_text import text_from_html

        text = text_from_html(html or "")
    text = text.rstrip("\r\n") + footer_text(url, postal)
    if html is not None and html.strip():
        block = footer_html(url, postal)
        ends = list(_BODY_END.finditer(html))
        html = html[: ends[-1].start()] + block + html[ends[-1].start() :] if ends else html + block
    return text, html


@dataclass(frozen=True)
class CampaignBook:
    """What enqueue needs to know about campaigns, as `mailroom.campaign_mail_policy` says it (built by
    `book_from_policies`): which carry an open pixel, which have a postal address (their own, or every
    sender account has one), and whether campaigns not listed have one. MAILROOM_POSTAL_ADDRESS is the
    settings'."""

    track_opens: Mapping[str, bool]
    has_postal_address: frozenset[str]
    unlisted_have_postal_address: bool

    def opens(self, campaign_id: str | None) -> bool:
        """Whether this campaign's email gets an open pixel (when it is tracked at all)."""
        return self.track_opens.get(campaign_id, True) if campaign_id else True

    def require_postal_address(
        self, campaign_id: str | None, transactional: bool, default: str | None
    ) -> None:
        """Refuse a campaign's email that could only leave without a postal address (`needs_postal_address`)."""
        if not needs_postal_address(campaign_id, not transactional):
            return
        if default or campaign_id in self.has_postal_address or self.unlisted_have_postal_address:
            return
        raise missing_postal_address("campaign_id", str(campaign_id))


# What the database says of each campaign asked (`mailroom.campaign_mail_policy`, the one rule: any role
# may ask it): whether its email carries an open pixel, whether a postal address is known for it.
POLICIES = (
    "SELECT u.campaign_id, p.track_opens, p.has_postal_address"
    " FROM unnest(%s::text[]) AS u(campaign_id), mailroom.campaign_mail_policy(u.campaign_id) AS p"
)
# The same for every campaign with a row, and a NULL campaign for those without (the bulk command's
# book: its lines are read while the book is in use).
EVERY_POLICY = (
    "SELECT c.campaign_id, p.track_opens, p.has_postal_address"
    " FROM (SELECT campaign_id FROM mailroom.campaigns UNION ALL SELECT NULL) AS c,"
    " mailroom.campaign_mail_policy(c.campaign_id) AS p"
)


def book_from_policies(rows: Iterable[Sequence[Any]]) -> CampaignBook:
    """The book of the campaigns in rows of (campaign, track_opens, has_postal_address), from
    `POLICIES` or `EVERY_POLICY`; a NULL campaign's row stands for every campaign not listed."""
    track_opens: dict[str, bool] = {}
    with_address: set[str] = set()
    unlisted_have_address = False
    for campaign_id, opens, has_address in rows:
        if campaign_id is None:
            unlisted_have_address = bool(has_address)
            continue
        track_opens[campaign_id] = bool(opens)
        if has_address:
            with_address.add(campaign_id)
    return CampaignBook(track_opens, frozenset(with_address), unlisted_have_address)


# Nothing known of any campaign: open pixels on, no postal address but MAILROOM_POSTAL_ADDRESS.
NO_CAMPAIGNS = CampaignBook({}, frozenset(), False)


def load_policies(conn: Any, requests: Iterable[Any]) -> CampaignBook:
    """The policies of the campaigns these requests' rows need (`POLICIES`, which any application role
    may ask); no statement when none does."""
    from psycopg.rows import tuple_row

    from worker.core.email_rows import campaigns_to_ask

    if not (campaigns := campaigns_to_ask(requests)):
        return NO_CAMPAIGNS
    with conn.cursor(row_factory=tuple_row) as cur:
        return book_from_policies(cur.execute(POLICIES, (campaigns,)).fetchall())


def load_book(conn: Any) -> CampaignBook:
    """Every campaign's policy at once, for a bulk load whose campaigns are not known in advance."""
    from psycopg.rows import tuple_row

    with conn.cursor(row_factory=tuple_row) as cur:
        return book_from_policies(cur.execute(EVERY_POLICY).fetchall())
