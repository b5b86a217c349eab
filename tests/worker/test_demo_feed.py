"""The demo's feed: names no run repeats in one database, and a summary that reads right."""

from __future__ import annotations

import random
from collections import Counter

import psycopg

from worker.core.config import Settings
from worker.devtools.demo_feed import NOTHING_TO_READ, Feed, new_document


def test_two_feeds_with_the_same_seed_in_one_database_never_take_the_same_document_id(
    db_url: str, settings: Settings
) -> None:
    # Two runs of the demo in one home: each its own process, so each used to count its ids from 1
    # again ("document 'demo-expenses-policy-5' already exists" whenever their choices met).
    feeds = [Feed(db_url, settings, random.Random(7), [new_document]) for _ in range(2)]
    for feed in feeds:
        feed.round()
        feed.round()

    assert [feed.errors for feed in feeds] == [Counter(), Counter()]
    assert [feed.done for feed in feeds] == [Counter(document=2), Counter(document=2)]
    with psycopg.connect(db_url) as conn:
        ids = [r[0] for r in conn.execute("SELECT doc_id FROM mailroom.documents").fetchall()]
        signers = conn.execute(
            "SELECT count(DISTINCT email), count(*) FROM mailroom.expected_signers"
        ).fetchone()
    assert len(ids) == len(set(ids)) == 4
    assert signers is not None and signers[0] == signers[1]  # every person the feeds made is another


def test_the_summary_counts_what_the_feed_did_in_words_that_read_right(settings: Settings) -> None:
    feed = Feed("", settings, random.Random(), [])
    feed.done.update({NOTHING_TO_READ: 2, "receipt": 1, "person": 3, "order event": 2})

    assert feed.summary() == "2 order events, 3 people, 2 readers with nothing to read yet, 1 receipt"
