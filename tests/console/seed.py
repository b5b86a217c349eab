"""Fixed console test data around a frozen clock: every id, time and name on screen is set here."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg

FROZEN_NOW = datetime(2026, 3, 16, 10, 30, tzinfo=UTC)
LABEL = "mailroom@test"

SENDERS = """
INSERT INTO mailroom.sender_accounts (name, from_email, smtp_host, smtp_port, smtp_security, daily_limit,
                                      warmup_stage, warmup_limit, status, status_reason, limit_reached_on,
                                      last_used_at)
VALUES ('primary', 'noreply@shop.example', 'smtp.example', 587, 'starttls', 2000, 0, NULL, 'active', NULL, NULL,
        %(now)s - interval '2 minutes'),
       ('low-limit', 'hello@shop.example', 'smtp.example', 587, 'starttls', 25, 0, NULL,
        'paused_limit_reached', 'daily limit of 25 reached', (%(now)s AT TIME ZONE 'UTC')::date,
        %(now)s - interval '14 minutes'),
       ('warming', 'news@shop.example', 'smtp.example', 587, 'starttls', 5000, 2, 200, 'warming_up', NULL, NULL,
        %(now)s - interval '3 hours'),
       ('backup', 'backup@shop.example', 'smtp2.example', 465, 'tls', 1000, 0, NULL, 'paused',
        'maintenance window', NULL, NULL)
"""

USAGE = """
INSERT INTO mailroom.sender_usage (sender_account_id, day, sent, bounces, errors)
SELECT id, (%(now)s AT TIME ZONE 'UTC')::date, sent, bounces, errors
FROM mailroom.sender_accounts
JOIN (VALUES ('primary', 412, 3, 1), ('low-limit', 25, 1, 0), ('warming', 171, 0, 2)) v(name, sent, bounces, errors)
USING (name)
"""

# Email: 12 failed (1001-1012), 4 retrying (2001-2004), 40 pending (3001-3040, 10 due), 2 assigned, 1 suppressed,
# 1 sent a minute ago (6001): with the live worker below, a healthy queue (no banner).
EMAILS = """
INSERT INTO mailroom.email_queue (id, recipient_email, subject, text_body, priority, scheduled_for, campaign_id,
                                  max_retries, created_at)
SELECT g, r.addr, r.subject, 'body', r.priority, r.scheduled_for, r.campaign, 5, %(now)s - interval '1 day'
FROM generate_series(1001, 1012) g
CROSS JOIN LATERAL (SELECT (ARRAY['ada.lovelace', 'grace.hopper', 'alan.turing', 'edsger', 'barbara.liskov',
                                  'donald.knuth'])[1 + g %% 6] || '@example.com' AS addr,
                           (ARRAY['Your order has shipped', 'Reset your password', 'Welcome to the shop',
                                  'Invoice 2026-0316'])[1 + g %% 4] AS subject,
                           0 AS priority, %(now)s - interval '2 hours' AS scheduled_for, NULL::text AS campaign) r
UNION ALL
SELECT g, 'user' || g || '@example.org', 'Spring sale starts now', 'body', 0,
       %(now)s + make_interval(mins => (g - 2000) * 7), 'spring-sale', 5, %(now)s - interval '1 day'
FROM generate_series(2001, 2004) g
UNION ALL
SELECT g, 'reader' || g || '@example.net',
       CASE WHEN g %% 3 = 0 THEN 'Password recovery code' ELSE 'March newsletter' END, 'body',
       CASE WHEN g %% 3 = 0 THEN 10 WHEN g %% 3 = 1 THEN 0 ELSE -5 END,
       %(now)s + make_interval(mins => (g - 3010) * 5),
       CASE WHEN g %% 3 = 0 THEN NULL WHEN g %% 2 = 0 THEN 'newsletter-march' ELSE 'spring-sale' END,
       5, %(now)s - interval '1 day'
FROM generate_series(3001, 3040) g
UNION ALL
SELECT g, 'busy' || g || '@example.com', 'Order confirmation', 'body', 0, %(now)s - interval '1 minute', NULL, 5,
       %(now)s - interval '1 hour'
FROM generate_series(4001, 4002) g
UNION ALL
SELECT 5001, 'bounced@example.com', 'Order confirmation', 'body', 0, %(now)s - interval '1 hour', NULL, 5,
       %(now)s - interval '1 hour'
UNION ALL
SELECT 6001, 'delivered@example.com', 'Order confirmation', 'body', 0, %(now)s - interval '2 minutes', NULL, 5,
       %(now)s - interval '2 minutes'
"""

CLAIM = """
UPDATE mailroom.email_queue SET status = 'assigned', lease_owner = 'seed', lease_token = gen_random_uuid(),
       lease_expires_at = %(now)s + interval '5 minutes'
WHERE id BETWEEN 1001 AND 1012 OR id BETWEEN 2001 AND 2004 OR id IN (4001, 4002, 5001, 6001)
"""

FINISH = """
UPDATE mailroom.email_queue
SET status = 'failed', retry_count = 5,
    last_error = (ARRAY['550 5.1.1 <mailbox> unknown user', '554 5.7.1 message rejected as spam',
                        '421 4.4.2 connection timed out', '552 5.3.4 message too big'])[1 + id %% 4]
WHERE id BETWEEN 1001 AND 1012;
UPDATE mailroom.email_queue
SET status = 'pending', retry_count = id - 2000, next_retry_at = scheduled_for,
    last_error = '451 4.7.1 greylisted, try again later'
WHERE id BETWEEN 2001 AND 2004;
UPDATE mailroom.email_queue SET status = 'suppressed', suppression_reason = 'on the bounce list (hard)'
WHERE id = 5001;
UPDATE mailroom.email_queue SET finished_at = %(now)s - make_interval(mins => ((1013 - id) * 9)::int)
WHERE id BETWEEN 1001 AND 1012;
UPDATE mailroom.email_queue SET finished_at = %(now)s - interval '50 minutes' WHERE id = 5001;
UPDATE mailroom.email_queue SET status = 'sent', sent_at = %(now)s - interval '1 minute' WHERE id = 6001;
"""

SEND_LOGS = """
INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, attempt, outcome,
                                smtp_code, enhanced_code, response, duration_ms, worker)
SELECT %(now)s - make_interval(mins => m, secs => k * 7), 9000 + m * 100 + k,
       (SELECT id FROM mailroom.sender_accounts WHERE name = 'primary'), 'someone@example.com', 1,
       CASE WHEN k = 0 AND m %% 9 = 0 THEN 'permanent' ELSE 'sent' END,
       CASE WHEN k = 0 AND m %% 9 = 0 THEN 550 ELSE 250 END, NULL, 'ok', 40, 'seed'
FROM generate_series(0, 59) m
CROSS JOIN LATERAL generate_series(0, 2 + (m * 7) %% 6) k;
INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, attempt, outcome,
                                smtp_code, enhanced_code, response, duration_ms, worker)
SELECT q.finished_at - make_interval(mins => 60 * (5 - a)), q.id,
       (SELECT id FROM mailroom.sender_accounts WHERE name = 'primary'), q.recipient_email, a + 1,
       CASE WHEN a < 5 THEN 'transient' ELSE 'permanent' END,
       CASE WHEN a < 5 THEN 451 ELSE 550 END, CASE WHEN a < 5 THEN '4.7.1' ELSE '5.1.1' END,
       CASE WHEN a < 5 THEN '451 4.7.1 greylisted' ELSE q.last_error END, 120 + a, 'seed'
FROM mailroom.email_queue q CROSS JOIN generate_series(0, 5) a
WHERE q.id BETWEEN 1001 AND 1012
"""

ACCOUNTS = """
INSERT INTO mailroom.accounts (id, email, login, status, locale, status_changed_at, activated_at, suspended_at)
SELECT g, lower(n) || '@example.com', lower(n),
       CASE WHEN g %% 4 = 0 THEN 'suspended' WHEN g %% 4 = 1 THEN 'provisioned' ELSE 'active' END,
       CASE WHEN g %% 5 = 0 THEN 'fr' ELSE 'en' END,
       %(now)s - make_interval(hours => (g * 5)::int),
       CASE WHEN g %% 4 IN (0, 2, 3) THEN %(now)s - make_interval(days => g::int) END,
       CASE WHEN g %% 4 = 0 THEN %(now)s - make_interval(hours => (g * 5)::int) END
FROM unnest(ARRAY['Ada', 'Grace', 'Alan', 'Edsger', 'Barbara', 'Donald', 'Margaret', 'Ken', 'Dennis', 'Frances',
                  'John', 'Radia']) WITH ORDINALITY AS t(n, g)
"""

DOCUMENTS = """
INSERT INTO mailroom.documents (doc_id, title) VALUES
    ('nda-2026', 'Mutual NDA 2026'), ('handbook-v3', 'Employee handbook v3'), ('offer-17', 'Offer letter 17');
INSERT INTO mailroom.expected_signers (doc_id, email, name)
SELECT 'nda-2026', lower(n) || '@example.com', n FROM unnest(ARRAY['Ada', 'Grace', 'Alan', 'Edsger']) n
UNION ALL
SELECT 'handbook-v3', lower(n) || '@example.com', n
FROM unnest(ARRAY['Ada', 'Grace', 'Alan', 'Edsger', 'Barbara', 'Donald', 'Margaret', 'Ken', 'Dennis',
                  'Frances']) n
UNION ALL
SELECT 'offer-17', lower(n) || '@example.com', n FROM unnest(ARRAY['John', 'Radia']) n;
"""

SIGN = """
INSERT INTO mailroom.signatures (doc_id, signer_email, signer_name, signed_at, nonce, payload, payload_hash,
                                 signature, prev_hash)
VALUES (%(doc)s, %(email)s, %(name)s, %(at)s, %(nonce)s, 'payload', repeat(md5(%(nonce)s), 2), 'sig', %(prev)s)
"""

PEOPLE = """
SELECT set_config('mailroom.now', %(now)s::text, true);
INSERT INTO mailroom.people (id, email, first_name, last_name, date_of_birth, time_zone)
VALUES ('00000000-0000-4000-8000-000000000001', 'ada@example.com', 'Ada', 'Lovelace', '1990-03-16', 'Europe/London'),
       ('00000000-0000-4000-8000-000000000002', 'grace@example.com', 'Grace', 'Hopper', '1985-03-17',
        'America/New_York'),
       ('00000000-0000-4000-8000-000000000003', 'alan@example.com', 'Alan', 'Turing', '1992-03-17', 'Asia/Tokyo'),
       ('00000000-0000-4000-8000-000000000004', 'edsger@example.com', 'Edsger', 'Dijkstra', '1980-07-01',
        'Europe/Amsterdam');
"""

TROUBLE_EVENTS = """
INSERT INTO mailroom.events (id, person_id, status, due_at, local_due_at, time_zone, idempotency_key,
                             failure_reason)
VALUES ('00000000-0000-4000-9000-000000000001', '00000000-0000-4000-8000-000000000004', 'missed',
        %(now)s - interval '3 days', (%(now)s - interval '3 days') AT TIME ZONE 'Europe/Amsterdam',
        'Europe/Amsterdam', 'seed:missed', NULL),
       ('00000000-0000-4000-9000-000000000002', '00000000-0000-4000-8000-000000000001', 'failed',
        %(now)s - interval '2 days', (%(now)s - interval '2 days') AT TIME ZONE 'Europe/London',
        'Europe/London', 'seed:failed', 'template birthday/en missing')
"""

# Opens, clicks and unsubscribes over the 24 hours before the frozen clock: a day's curve peaking ten
# hours ago, every event inside its hour (h hours ago minus 1..59 minutes).
TRACKING = """
INSERT INTO mailroom.open_events (occurred_at, email_id, campaign_id, user_agent)
SELECT %(now)s - make_interval(hours => h, mins => k), 3000 + k, 'spring-sale', 'Mozilla/5.0'
FROM generate_series(0, 23) h
CROSS JOIN LATERAL generate_series(1, 4 + 2 * greatest(0, 12 - abs(h - 10))) k;
INSERT INTO mailroom.click_events (occurred_at, email_id, link_token, url, campaign_id, user_agent)
SELECT %(now)s - make_interval(hours => h, mins => 2 * k), 3000 + k, gen_random_uuid(),
       'https://shop.example/spring', 'spring-sale', 'Mozilla/5.0'
FROM generate_series(0, 23) h
CROSS JOIN LATERAL generate_series(1, greatest(0, 12 - abs(h - 10)) / 2) k;
INSERT INTO mailroom.unsubscribe_list (email, source, campaign_id, unsubscribed_at)
SELECT 'left' || h || '@example.net', 'one_click', 'spring-sale', %(now)s - make_interval(hours => h, mins => 30)
FROM unnest(ARRAY[1, 2, 6, 13, 14, 22]) h;
"""


def seed(url: str, now: datetime = FROZEN_NOW) -> None:
    """Insert the fixed data set, committed."""
    params = {"now": now}
    with psycopg.connect(url) as conn:
        for statement in (SENDERS, USAGE, EMAILS, CLAIM):
            conn.execute(statement, params)
        for statement in FINISH.split(";"):
            if statement.strip():
                conn.execute(statement, params)
        for statement in SEND_LOGS.split(";"):
            if statement.strip():
                conn.execute(statement, params)
        conn.execute(ACCOUNTS, params)
        for statement in DOCUMENTS.split(";"):
            if statement.strip():
                conn.execute(statement)
        previous: dict[str, str | None] = {}
        for doc, names in (
            ("nda-2026", ["Ada", "Grace", "Alan"]),
            ("handbook-v3", ["Ada", "Grace", "Alan", "Edsger"]),
            ("offer-17", ["John", "Radia"]),
        ):
            for i, name in enumerate(names):
                nonce = f"{doc}-nonce-{i:08d}"
                conn.execute(
                    SIGN,
                    {
                        "doc": doc,
                        "email": f"{name.lower()}@example.com",
                        "name": name,
                        "at": now,
                        "nonce": nonce,
                        "prev": previous.get(doc),
                    },
                )
                previous[doc] = conn.execute("SELECT repeat(md5(%s), 2)", (nonce + "x",)).fetchone()[0]  # type: ignore[index]
        for statement in PEOPLE.split(";"):
            if statement.strip():
                conn.execute(statement, params)
        conn.execute(TROUBLE_EVENTS, params)
        # A worker alive now: health's heartbeat check uses the database's clock, not the frozen one.
        conn.execute("INSERT INTO mailroom.workers (name) VALUES ('seed-worker:1')")
        for statement in TRACKING.split(";"):
            if statement.strip():
                conn.execute(statement, params)
