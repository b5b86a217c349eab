"""Commands of `mailroom`, one module per group, loaded only when they run.

`ENTRIES` names every top-level command: where its click object lives, its line in `mailroom
--help` and its section. Earlier spellings stay as aliases for a release (`ingest` is now `orders
ingest`, `keygen` is `keys generate`): they run the new command and say so on stderr.
"""

from __future__ import annotations

from worker.cli.framework import Entry

_M = "worker.cli.commands."
DELIVER, STEER, SENDERS, PEOPLE, ADMIN = (
    "Send and deliver",
    "Watch and steer the queue",
    "Senders, bounces and incoming events",
    "People, accounts and documents",
    "Administer",
)

ENTRIES: dict[str, Entry] = {
    "enqueue": Entry(_M + "enqueue:enqueue", "enqueue email from JSON lines", DELIVER),
    "my": Entry(_M + "my:my", "the email your database role enqueued, and what became of it", DELIVER),
    "worker": Entry(_M + "worker:worker", "deliver email (run one or many, on any hosts)", DELIVER),
    "tracker": Entry(
        _M + "tracker:tracker",
        "serve open pixels, click redirects and one-click unsubscribe over HTTP",
        DELIVER,
    ),
    "demo": Entry(_M + "dev:demo", "run the whole product locally", DELIVER),
    "sink": Entry(_M + "dev:sink", "run the local SMTP server that catches mail", DELIVER),
    "stats": Entry(_M + "queue:stats", "queue depth and sender usage", STEER),
    "retry": Entry(_M + "queue:retry", "send failed emails again", STEER),
    "cancel": Entry(_M + "queue:cancel", "cancel emails that are not yet sent", STEER),
    "health": Entry(
        _M + "health:health", "check the queue; exit 1 with the reasons when it is unhealthy", STEER
    ),
    "webhooks": Entry(
        _M + "webhooks:webhooks",
        "endpoints that receive signed events: sent, bounced, opened, failed, ... (add, list, replay)",
        STEER,
    ),
    "campaigns": Entry(
        _M + "campaigns:campaigns", "campaign statistics, List-Id, postal address and open tracking", STEER
    ),
    "senders": Entry(_M + "senders:senders", "manage sender accounts", SENDERS),
    "bounces": Entry(
        _M + "bounces:bounces", "take in bounces and complaints sent to VERP return paths", SENDERS
    ),
    "suppressions": Entry(
        _M + "suppressions:suppressions",
        "the suppression list: list, history, add, remove, export and import addresses not mailed",
        SENDERS,
    ),
    "dmarc": Entry(
        _M + "dmarc:dmarc", "DMARC aggregate reports: read them in, show pass and fail by source", SENDERS
    ),
    "orders": Entry(
        _M + "orders:orders",
        "record order events (JSON lines) and enqueue their emails exactly once",
        SENDERS,
    ),
    "accounts": Entry(
        _M + "accounts:accounts", "user accounts: create, list, suspend, unsuspend, recover, activate", PEOPLE
    ),
    "people": Entry(_M + "people:people", "people whose birthday gets an email in their time zone", PEOPLE),
    "events": Entry(_M + "people:events", "scheduled birthday events", PEOPLE),
    "docs": Entry(
        _M + "docs:docs",
        "documents to acknowledge: signers, Ed25519 signatures, reminders, checksums",
        PEOPLE,
    ),
    "db": Entry(
        _M + "db:db", "migrate the schema; show, serve, stop, back up and restore the database", ADMIN
    ),
    "keys": Entry(
        _M + "keys:keys", "make a new secret key; rotate the key that encrypts stored secrets", ADMIN
    ),
    "maintenance": Entry(
        _M + "maintenance:maintenance",
        "archive old email, purge the inbox, create and drop partitions",
        ADMIN,
    ),
    "archive": Entry(
        _M + "archive:archive", "list, verify and restore the archive files of email and send logs", ADMIN
    ),
    "privacy": Entry(
        _M + "privacy:privacy", "export or erase everything stored about an email address", ADMIN
    ),
    "audit": Entry(_M + "audit:audit", "the audit trail of sensitive operations, and its hash chain", ADMIN),
    # Earlier spellings, kept for a release.
    "ingest": Entry("", "", SENDERS, alias_of=("orders", "ingest")),
    "keygen": Entry("", "", ADMIN, alias_of=("keys", "generate")),
}
