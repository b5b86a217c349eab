"""The sender accounts a worker process may use now, with their secrets decrypted and connections counted."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.rows import dict_row

from worker.core.campaign_mail import SELECT_CAMPAIGNS, Campaign
from worker.core.config import ConfigError, Settings
from worker.core.crypto import SecretBox, secret_box
from worker.engine.attempts import SmtpAccount
from worker.engine.database import Pool, fetch_scalar
from worker.engine.queue_sql import ELIGIBLE_SENDERS, SAVE_ROTATED_GRANT, TAKE_SEND_SLOT
from worker.engine.rows import ClaimedEmail
from worker.engine.shared import Shared
from worker.engine.transport import Deferred, Transport

# What only a sender that sends needs (SMTP, DKIM, OAuth2, the Gmail API) is loaded when first used: a
# worker that finds nothing due starts without it.
if TYPE_CHECKING:
    from worker.core.dkim import DkimKey
    from worker.engine.gmail_tokens import GmailAccount, GmailTokens
    from worker.engine.oauth import OAuthClient, TokenCache

log = logging.getLogger("mailroom.worker")

# How long the list of eligible senders is trusted before it is read again.
RELOAD_SECONDS = 5.0
# A stream a sender's claim found empty is tried after the others for this long.
EMPTY_RECHECK_SECONDS = 1.0


@dataclass(frozen=True)
class Sender:
    """An eligible sender account as the engine uses it."""

    account: SmtpAccount
    name: str
    from_email: str
    from_name: str | None
    send_delay_ms: int
    max_connections: int
    dkim: DkimKey | None = None
    circuit_state: str = "closed"  # closed, or open/half_open: then only its one probe email goes out
    # With a bounce domain (the sender's own, else MAILROOM_BOUNCE_DOMAIN): each email's MAIL FROM is
    # its own VERP return path on it, so a DSN names it. The settings hold the key that signs it.
    bounce_settings: Settings | None = None
    bounce_domain: str | None = None
    # postmark or sendgrid: each message carries the tag that relay's event webhooks hand back.
    relay_provider: str | None = None
    # The return-path key, which also signs Message-IDs and per-recipient unsubscribe links; None
    # without MAILROOM_SECRET_KEY (or its key file): Message-IDs are then ones the intake never trusts.
    message_key: bytes | None = None
    # Emails claimed for it at a time (None: the worker's --batch-size, also the ceiling).
    batch_size: int | None = None
    # The footer's postal address unless the campaign has one, and the campaigns read with the senders.
    postal_address: str | None = None
    campaigns: Mapping[str, Campaign] = field(default_factory=dict)
    default_postal_address: str | None = None  # MAILROOM_POSTAL_ADDRESS
    footer_transactional: bool = False  # MAILROOM_POSTAL_FOOTER_TRANSACTIONAL
    # The message streams whose email it sends, and the domains an email's own From may be in.
    streams: tuple[str, ...] = ("transactional", "broadcast")
    from_domains: tuple[str, ...] = ()

    @property
    def id(self) -> int:
        """The sender account's id."""
        return self.account.sender_id


class SenderBook:
    """Which senders this process may use: eligible in the database, quota left, a connection free."""

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self.pool = pool
        self.settings = settings
        self.senders: list[Sender] = []
        self.exhausted: set[int] = set()
        self._loaded_at = 0.0
        self._reads: Shared[None] = Shared()  # see `_load`
        self._forgotten_at = 0.0  # when `forget` was last called (`time.monotonic`)
        self._open: dict[int, int] = {}  # SMTP connections this process holds per sender account
        self._box: SecretBox | None = None
        self._key: bytes | None = None  # the return-path key once read (b"": there is none)
        # DKIM keys decrypted once per sender account (and again only when its stored key changes)
        self._dkim_keys: dict[tuple[int, bytes], DkimKey] = {}
        self._tokens: TokenCache | None = None  # see `tokens`
        # Gmail API access tokens (worker.engine.gmail_tokens), made when a Gmail API sender is first used
        self._gmail_tokens: GmailTokens | None = None
        # Campaigns looked for and not found, and when: not read again before the next reload
        self._absent_campaigns: dict[str, float] = {}
        self._turns: dict[int, int] = {}  # the stream each sender's next claim starts with
        self._empty: dict[int, dict[str, float]] = {}  # streams a sender's claim found empty, and when

    @property
    def tokens(self) -> TokenCache:
        """OAuth2 access tokens, shared by every SMTP connection of this process."""
        if self._tokens is None:
            from worker.engine.oauth import TokenCache

            self._tokens = TokenCache(store=self._store_refresh_token)
        return self._tokens

    def forget(self) -> None:
        """Read the senders again at the next pick (one was suspended or changed)."""
        self._loaded_at = 0.0
        self._forgotten_at = time.monotonic()

    def all_exhausted(self) -> bool:
        """No sender usable now: none eligible, or every eligible one has reached its limit."""
        return not self.senders or len(self.exhausted) >= len(self.senders)

    def routes(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """The streams and From domains of each sender usable now (none: every one exhausted)."""
        return [(s.streams, s.from_domains) for s in self.senders if s.id not in self.exhausted]

    def set_aside(self, sender_id: int) -> None:
        """Use this sender no more until the senders are read again (its circuit opened, its limit reached)."""
        self.exhausted.add(sender_id)

    async def with_campaigns(self, sender: Sender, emails: Sequence[ClaimedEmail]) -> Sender:
        """`sender` with the campaigns of `emails` as the database has them now.

        The book reads campaigns with the senders, every few seconds; a campaign set up just before
        its email was enqueued (`mailroom campaigns set ... --postal-address`) would otherwise be
        missing, and its email fail for want of the address the database holds. One read when a
        claim brings a campaign the book has not seen; one not in the database is not asked for
        again before the next reload."""
        now = time.monotonic()
        new = {
            e.campaign_id
            for e in emails
            if e.campaign_id
            and e.campaign_id not in sender.campaigns
            and now - self._absent_campaigns.get(e.campaign_id, -RELOAD_SECONDS) >= RELOAD_SECONDS
        }
        if not new:
            return sender
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(SELECT_CAMPAIGNS)
            campaigns = _campaigns(await cur.fetchall())
        for missing in new - campaigns.keys():
            self._absent_campaigns[missing] = now
        self.senders = [replace(s, campaigns=campaigns) for s in self.senders]
        return replace(sender, campaigns=campaigns)

    async def pick(self, index: int, held: int | None, tried: Collection[int] = ()) -> Sender | None:
        """The sender a slot should use: the one it holds a connection to, while that is usable,
        else one with quota left and fewer than `max_connections` open connections in this process;
        never one of `tried` (it had nothing due this turn)."""
        if time.monotonic() - self._loaded_at > RELOAD_SECONDS or not self.senders:
            await self._load()
        usable = [
            s
            for s in self.senders
            if s.id not in self.exhausted
            and s.id not in tried
            and (s.id == held or self._open.get(s.id, 0) < s.max_connections)
        ]
        if not usable:
            return None
        for sender in usable:
            if sender.id == held:
                return sender
        return usable[index % len(usable)]

    def serves_others(self, sender: Sender, tried: Collection[int]) -> bool:
        """Whether another sender, not yet tried, serves streams or From domains `sender` does not: email
        `sender` found nothing of may be due for it. False when every account serves the same (the
        common case: nothing more is asked of the database)."""
        return any(
            (s.streams, s.from_domains) != (sender.streams, sender.from_domains)
            for s in self.senders
            if s.id != sender.id and s.id not in tried and s.id not in self.exhausted
        )

    def streams_in_turn(self, sender: Sender) -> tuple[str, ...]:
        """The sender's streams in the order its next claim tries them: those with email at their last
        claim first, starting one further at each claim (no stream waits behind another), then those
        found empty in the last `EMPTY_RECHECK_SECONDS` (tried only when the others have nothing, so an
        empty stream costs a query a second at most while mail flows in another)."""
        if len(sender.streams) == 1:
            return sender.streams
        now = time.monotonic()
        found = self._empty.get(sender.id, {})
        empty = {s for s, at in found.items() if now - at < EMPTY_RECHECK_SECONDS}
        flowing = [s for s in sender.streams if s not in empty]
        if flowing:
            turn = self._turns[sender.id] = (self._turns.get(sender.id, -1) + 1) % len(flowing)
            flowing = flowing[turn:] + flowing[:turn]
        return (*flowing, *(s for s in sender.streams if s in empty))

    def claimed(self, sender: Sender, empty: Sequence[str], taken: str | None) -> None:
        """What a claim for the sender found: nothing due in `empty`, email in `taken` (if any)."""
        if len(sender.streams) == 1:
            return
        found = self._empty.setdefault(sender.id, {})
        now = time.monotonic()
        for stream in empty:
            found[stream] = now
        if taken is not None:
            found.pop(taken, None)

    async def use(self, sender: Sender, connections: dict[int, Transport]) -> None:
        """Make a slot's one SMTP connection the sender's (reconnecting if its settings changed)."""
        held = next(iter(connections), None)
        if sender.id == held and connections[held].account != sender.account:
            # The account was reconfigured (new password, host, TLS): reconnect with the new settings.
            await connections.pop(held).close()
            connections[sender.id] = Deferred(sender.account, self._transport)
        elif sender.id != held:
            self.opened(sender.id)
            if held is not None:
                await self.close(connections, held)
            connections[sender.id] = Deferred(sender.account, self._transport)

    def _transport(self, account: SmtpAccount) -> Transport:
        """A new connection for a slot: to the account's SMTP server, or to the Gmail API."""
        if account.gmail is None:
            from worker.engine.smtp import SmtpConnection

            return SmtpConnection(account, self.tokens)
        # Loaded with the first Gmail API sender: a worker without one never imports the HTTP client.
        from worker.engine.gmail import GmailConnection
        from worker.engine.gmail_tokens import GmailTokens

        if self._gmail_tokens is None:
            self._gmail_tokens = GmailTokens()
        return GmailConnection(account, self._gmail_tokens)

    def opened(self, sender_id: int) -> None:
        """Count a connection to the sender (before the next await, so two slots never both take the last)."""
        self._open[sender_id] = self._open.get(sender_id, 0) + 1

    async def close(self, connections: dict[int, Transport], sender_id: int) -> None:
        """Close a slot's connection to the sender and stop counting it."""
        await connections.pop(sender_id).close()
        self._open[sender_id] -= 1

    async def pace(self, sender: Sender) -> None:
        """Wait for the paced sender's next send slot, taken in PostgreSQL so every worker shares it."""
        if sender.send_delay_ms <= 0:
            return
        wait = await fetch_scalar(
            self.pool, TAKE_SEND_SLOT, {"sender": sender.id, "delay": sender.send_delay_ms / 1000}
        )
        if wait:
            await asyncio.sleep(float(wait))

    async def _load(self) -> None:
        """Read the eligible senders and campaigns. Slots asking together (every slot at start, each
        after `RELOAD_SECONDS`) share one read, as long as it began after the last `forget`: the
        answer is the same, and the database is asked once, not once a slot."""
        await self._reads.get(self._read, since=self._forgotten_at)

    async def _read(self) -> None:
        async with self.pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(ELIGIBLE_SENDERS)
            rows = await cur.fetchall()
            await cur.execute(SELECT_CAMPAIGNS)
            campaigns = _campaigns(await cur.fetchall())
        self._absent_campaigns.clear()
        senders = []
        for row in rows:
            try:
                sender = self._sender(row)
                senders.append(
                    replace(
                        sender,
                        postal_address=row["postal_address"],
                        campaigns=campaigns,
                        default_postal_address=self.settings.postal_address,
                        footer_transactional=self.settings.postal_footer_transactional,
                    )
                )
            except ConfigError as exc:
                log.error("sender account %s skipped: %s", row["name"], exc)
        self.senders = senders
        self._loaded_at = time.monotonic()
        self.exhausted.clear()

    def _sender(self, row: dict[str, Any]) -> Sender:
        password = None
        if row["smtp_password_encrypted"] is not None:
            password = self._secret_box().decrypt(row["smtp_password_encrypted"])
        dkim = self._dkim_key(row) if row["dkim_private_key_encrypted"] is not None else None
        settings = self.settings
        account = SmtpAccount(
            row["id"],
            row["smtp_host"],
            row["smtp_port"],
            row["smtp_security"],
            row["smtp_username"],
            password,
            connect_timeout=float(row["connect_timeout_seconds"] or settings.smtp_connect_timeout),
            command_timeout=float(row["command_timeout_seconds"] or settings.smtp_command_timeout),
            data_timeout=float(row["data_timeout_seconds"] or settings.smtp_data_timeout),
            oauth=self._oauth_client(row) if row["auth_type"] == "oauth2" else None,
            allow_plaintext_login=row["allow_plaintext_login"],
            gmail=self._gmail_account(row) if row["auth_type"] == "gmail" else None,
        )
        bounce_domain = row["bounce_domain"] or settings.bounce_domain
        return Sender(
            account,
            row["name"],
            row["from_email"],
            row["from_name"],
            row["send_delay_ms"],
            row["max_connections"],
            dkim,
            row["circuit_state"],
            settings if bounce_domain else None,
            bounce_domain,
            row["relay_provider"],
            self._message_key(),
            batch_size=row["batch_size"],
            streams=tuple(row["streams"]),
            from_domains=tuple(row["from_domains"]),
        )

    def _message_key(self) -> bytes | None:
        if self._key is None:
            from worker.core.return_path import optional_bounce_key

            self._key = optional_bounce_key(self.settings) or b""
            if not self._key:
                log.warning(
                    "no MAILROOM_SECRET_KEY: Message-IDs are not signed (no report can be matched by one), and"
                    " an email with several recipients carries unsubscribe links the tracker cannot check"
                )
        return self._key or None

    def _oauth_client(self, row: dict[str, Any]) -> OAuthClient:
        """The account's OAuth2 client with its secret and refresh token decrypted."""
        from worker.engine.oauth import OAuthClient

        box = self._secret_box()
        stored = bytes(row["oauth_refresh_token_encrypted"])
        return OAuthClient(
            row["oauth_token_url"],
            row["oauth_client_id"],
            box.decrypt(row["oauth_client_secret_encrypted"]),
            box.decrypt(stored),
            stored,
        )

    def _gmail_account(self, row: dict[str, Any]) -> GmailAccount:
        """A Gmail API sender's key (decrypted and checked) and user, and where the API is."""
        from worker.core.gmail_key import parse_service_account_key
        from worker.core.sender_settings import check_token_url
        from worker.core.validation import ValidationError
        from worker.engine.gmail_tokens import GmailAccount

        api_url = self.settings.gmail_api_url
        try:
            check_token_url(api_url)
            key = parse_service_account_key(self._secret_box().decrypt(row["gmail_key_encrypted"]))
        except ValidationError as exc:
            what = "MAILROOM_GMAIL_API_URL" if exc.field == "oauth_token_url" else "its service account key"
            raise ConfigError(f"{what} {exc.message}") from None
        return GmailAccount(key, row["gmail_subject_email"], api_url)

    async def _store_refresh_token(self, sender_id: int, old: bytes, new: str) -> bytes | None:
        """Store a rotated refresh token encrypted in place of `old`; the stored value, None if it had changed."""
        encrypted = self._secret_box().encrypt(new)
        try:
            stored = await fetch_scalar(
                self.pool, SAVE_ROTATED_GRANT, {"id": sender_id, "old": old, "new": encrypted}
            )
        except psycopg.Error as exc:
            # Kept in memory and stored at the next rotation; the old one usually still works meanwhile.
            log.warning("sender account %s: the rotated refresh token was not stored (%s)", sender_id, exc)
            return None
        return bytes(stored) if stored is not None else None

    def _secret_box(self) -> SecretBox:
        if self._box is None:
            self._box = secret_box(self.settings)
        return self._box

    def _dkim_key(self, row: dict[str, Any]) -> DkimKey:
        """The sender's DKIM key, decrypted the first time it is seen."""
        cache_key = (int(row["id"]), bytes(row["dkim_private_key_encrypted"]))
        key = self._dkim_keys.get(cache_key)
        if key is None:
            from worker.core.dkim import DkimKey

            pem = self._secret_box().decrypt(cache_key[1]).encode("ascii")
            key = DkimKey(row["dkim_domain"], row["dkim_selector"], pem)
            self._dkim_keys[cache_key] = key
        return key


def _campaigns(rows: Sequence[Mapping[str, Any]]) -> dict[str, Campaign]:
    """The campaigns table as the message builder reads it."""
    return {c["campaign_id"]: Campaign(c["list_id"], c["postal_address"], c["track_opens"]) for c in rows}
