"""The engine's SQL, all of it: claim, lease renewal, journal, completion, release and rescue; and the
sender accounts as the engine reads and charges them (eligibility, quota, pacing, circuits).

The rules behind these statements live in the schema (`migrations/schema.sql`): the functions they
call carry their reasoning in their `COMMENT ON`."""

from __future__ import annotations

# Looking up an email its claim still holds, by its id, is written
# `CASE WHEN q.status = 'assigned' THEN q.lease_token END = <token>` in every statement below that does
# it for one email or one claim's (COMPLETE, JOURNAL_SENT, RELEASE, UNCLAIM): one expression rather
# than `q.status = 'assigned' AND q.lease_token = <token>`, so that no partial index on assigned email
# can serve the lookup and the primary key does. With statistics taken while nothing was assigned (a
# queue loaded in bulk and analyzed, as before any drain), the planner chose email_queue_lease_idx and
# read every assigned email for each one looked up (60 buffers an email journalled, 40% of the
# server's CPU in a drain: see docs/performance.md). tests/worker/test_held_lookups.py holds each of
# them to it. FORGET_ORPHANED_JOURNAL keeps the partial index on purpose: it checks many old journal
# rows at once, and reading the assigned emails once (a hash anti-join) is what it should do.

# Claim due email in priority order, skipping rows another worker holds. Suppression is decided
# here, at claim time, so an address listed a second ago is not mailed: the claim joins each
# recipient's bounce_list and unsubscribe_list rows and mailroom.suppression_verdict (schema.sql), the
# rule every caller applies, judges them; PostgreSQL inlines it into this statement.
#
# The soft-bounce hold is the claim's own: an address whose last soft bounce is less than a day old
# and not yet suppressed is not mailed before that day is over (the email stays pending, rescheduled,
# no attempt charged).
#
# An email with more recipients (to_extra, cc, bcc not NULL) has each of them checked the same way
# (`many`): the suppressed ones come back as `dropped` ({lower-cased address: reason}), to be left out
# of the envelope and recorded, and the email is suppressed only when every recipient is. The check is
# a subquery inside CASE, which PostgreSQL evaluates only for those rows: the common one-recipient
# email pays three NULL tests. The verdict is materialized so that subquery is planned once (inlined,
# every use of `many` below would copy it).
#
# What is due and what has outlived the queue lifetime is judged by the database's clock moved by the
# engine's (`%(ahead)s` seconds: 0 but in tests, see `worker.engine.clock`); leases by the database's alone.
CLAIM = """
WITH due AS (
    SELECT id FROM mailroom.email_queue
    WHERE status = 'pending' AND stream = %(stream)s AND scheduled_for <= now() + make_interval(secs => %(ahead)s)
      -- an email with a From of its own goes through an account that may send for its domain
      AND (from_email IS NULL OR lower(split_part(from_email, '@', 2)) = ANY(%(domains)s::text[]))
    ORDER BY stream, priority DESC, scheduled_for, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), verdict AS MATERIALIZED (
    SELECT d.id,
           q.created_at < now() + make_interval(secs => %(ahead)s - %(lifetime)s)
               OR q.expires_at <= now() + make_interval(secs => %(ahead)s) AS expired,
           q.expires_at <= now() + make_interval(secs => %(ahead)s) AS own_lifetime_ended,
           mailroom.suppression_verdict(b.bounce_type, b.bounce_count, u.email IS NOT NULL, q.transactional)
               AS reason,
           CASE WHEN b.bounce_type = 'soft'
                     AND b.last_bounced_at > now() + make_interval(secs => %(ahead)s) - interval '1 day'
                THEN b.last_bounced_at + interval '1 day'
           END AS held_until,
           CASE WHEN q.to_extra IS NOT NULL OR q.cc IS NOT NULL OR q.bcc IS NOT NULL THEN (
               SELECT jsonb_build_object(
                          'all', bool_and(r.reason IS NOT NULL),
                          'dropped', coalesce(jsonb_object_agg(r.address, r.reason) FILTER (WHERE r.reason IS NOT NULL),
                                              '{}'::jsonb))
               FROM (
                   SELECT lower(e.address) AS address,
                          coalesce(
                              mailroom.suppression_verdict(rb.bounce_type, rb.bounce_count, ru.email IS NOT NULL,
                                                           q.transactional),
                              -- its copy went out in an attempt the session then cut short
                              CASE WHEN EXISTS (SELECT 1 FROM mailroom.recipient_outcomes ro
                                                WHERE ro.email_id = q.id AND ro.outcome = 'accepted'
                                                  AND lower(ro.recipient) = lower(e.address))
                                   THEN 'already delivered' END
                          ) AS reason
                   FROM unnest(ARRAY[q.recipient_email] || coalesce(q.to_extra, '{}') || coalesce(q.cc, '{}')
                               || coalesce(q.bcc, '{}')) AS e(address)
                   LEFT JOIN mailroom.bounce_list rb ON rb.email = lower(e.address)
                   LEFT JOIN mailroom.unsubscribe_list ru ON ru.email = lower(e.address)
               ) r
           ) END AS many
    FROM due d
    JOIN mailroom.email_queue q ON q.id = d.id
    LEFT JOIN mailroom.bounce_list b ON b.email = lower(q.recipient_email)
    LEFT JOIN mailroom.unsubscribe_list u ON u.email = lower(q.recipient_email)
), decided AS (
    SELECT v.*,
           CASE WHEN v.expired THEN 'failed'
                WHEN coalesce((v.many ->> 'all')::boolean, v.reason IS NOT NULL) THEN 'suppressed'
                WHEN v.held_until IS NOT NULL AND v.reason IS NULL THEN 'pending'  -- a soft bounce not suppressed
                ELSE 'assigned' END AS next_status
    FROM verdict v
)
UPDATE mailroom.email_queue q
SET status = v.next_status,
    -- held by the soft-bounce policy: pending until the day after the bounce, no lease, no attempt
    scheduled_for = CASE WHEN v.next_status = 'pending' THEN v.held_until ELSE q.scheduled_for END,
    suppression_reason = CASE WHEN v.expired THEN NULL
                              WHEN v.many IS NULL THEN v.reason
                              -- every recipient suppressed, the first To among them: its reason stands for all
                              WHEN (v.many ->> 'all')::boolean THEN 'every recipient suppressed; the first: ' || v.reason
                         END,
    last_error = CASE WHEN v.own_lifetime_ended THEN %(own_expired)s
                      WHEN v.expired THEN %(expired)s
                      ELSE q.last_error END,
    failure_kind = CASE WHEN v.expired THEN 'expired' END,
    lease_owner = CASE WHEN v.next_status = 'pending' THEN NULL ELSE %(owner)s END,
    lease_token = CASE WHEN v.next_status = 'pending' THEN NULL ELSE %(token)s::uuid END,
    lease_expires_at = CASE WHEN v.next_status = 'pending' THEN NULL ELSE now() + make_interval(secs => %(lease)s) END,
    sender_account_id = CASE WHEN v.next_status = 'pending' THEN q.sender_account_id ELSE %(sender)s END
FROM decided v
WHERE q.id = v.id
RETURNING q.id, q.status, q.last_error, q.recipient_email, q.recipient_name, q.subject, q.text_body, q.html_body, q.headers,
          q.created_at, q.retry_count, q.max_retries, q.campaign_id, q.suppression_reason,
          q.to_extra, q.cc, q.bcc, q.reply_to, v.many -> 'dropped' AS dropped,
          q.transactional, q.template, q.reference_type, q.attachments, q.from_email, q.from_name
"""

# What the claim dropped from many-recipient emails, once per recipient however often the email is claimed.
RECORD_DROPPED = """
INSERT INTO mailroom.recipient_outcomes (email_id, recipient, kind, outcome, reason)
SELECT (d.r ->> 'email_id')::bigint, d.r ->> 'recipient', d.r ->> 'kind', 'suppressed', d.r ->> 'reason'
FROM jsonb_array_elements(%(dropped)s::jsonb) WITH ORDINALITY AS d(r, n)
WHERE NOT EXISTS (SELECT 1 FROM mailroom.recipient_outcomes o
                  WHERE o.email_id = (d.r ->> 'email_id')::bigint AND lower(o.recipient) = lower(d.r ->> 'recipient')
                    AND o.outcome = 'suppressed')
ORDER BY d.n
"""

# A refusal of one recipient of a many-recipient email at RCPT (the others' fate is the email's).
RECORD_REFUSED = """
INSERT INTO mailroom.recipient_outcomes (email_id, recipient, kind, outcome, smtp_code, enhanced_code, reason)
SELECT %(email_id)s, d.r ->> 'recipient', d.r ->> 'kind', 'refused', (d.r ->> 'code')::int, d.r ->> 'enhanced',
       left(d.r ->> 'reason', 2000)
FROM jsonb_array_elements(%(refused)s::jsonb) WITH ORDINALITY AS d(r, n)
ORDER BY d.n
"""

# The reason CLAIM gives a recipient whose copy an earlier attempt delivered: left out, not suppressed.
ALREADY_DELIVERED = "already delivered"

# The recipients of a many-recipient email whose copy was accepted in an attempt that did not end
# sent (the session was cut short after it): the claim leaves them out of the retry.
RECORD_ACCEPTED = """
INSERT INTO mailroom.recipient_outcomes (email_id, recipient, kind, outcome)
SELECT %(email_id)s, d.r ->> 'recipient', d.r ->> 'kind', 'accepted'
FROM jsonb_array_elements(%(accepted)s::jsonb) WITH ORDINALITY AS d(r, n)
ORDER BY d.n
"""

# Run before CLAIM in the same transaction. Without statistics (a queue just loaded in bulk, before
# autovacuum analyzes it) the planner guesses a handful of due rows and sorts every due row by
# priority on each claim: a cost that grows with the backlog. The claim index already holds that
# order, so reading it and stopping at the batch size costs the same for ten rows or ten million.
CLAIM_IN_INDEX_ORDER = "SET LOCAL enable_sort = off"

LOG_SUPPRESSED = """
INSERT INTO mailroom.send_logs (email_id, sender_account_id, recipient_email, campaign_id, attempt, outcome,
                                response, worker)
SELECT id, NULL, recipient_email, campaign_id, retry_count + 1, 'suppressed', suppression_reason, %(owner)s
FROM mailroom.email_queue WHERE id = ANY(%(ids)s)
"""

# Record one attempt in one statement. Only rows still held under this claim's lease token
# change: a worker finishing after its lease expired and the email was handed to another never
# overwrites that worker's result.
COMPLETE = """
WITH r AS (
    SELECT %(id)s::bigint AS id, %(outcome)s::text AS outcome, %(log_outcome)s::text AS log_outcome,
           %(code)s::int AS code, %(enhanced)s::text AS enhanced, %(response)s::text AS response,
           %(duration_ms)s::int AS duration_ms, %(retry_at)s::timestamptz AS retry_at,
           %(message_id)s::text AS message_id
), done AS (
    UPDATE mailroom.email_queue q
    SET status = CASE r.outcome WHEN 'sent' THEN 'sent' WHEN 'retry' THEN 'pending'
                                WHEN 'release' THEN 'pending' ELSE 'failed' END,
        retry_count = q.retry_count + CASE WHEN r.outcome = 'retry' THEN 1 ELSE 0 END,
        scheduled_for = CASE WHEN r.outcome = 'retry' THEN r.retry_at ELSE q.scheduled_for END,
        next_retry_at = CASE WHEN r.outcome = 'retry' THEN r.retry_at END,
        last_error = CASE WHEN r.outcome = 'sent' THEN q.last_error ELSE concat_ws(' ', r.code, r.response) END,
        error_details = CASE WHEN r.outcome = 'sent' THEN q.error_details
                             ELSE jsonb_build_object('code', r.code, 'enhanced', r.enhanced, 'outcome', r.log_outcome)
                        END,
        failure_kind = CASE WHEN r.outcome = 'failed' THEN 'attempt' END,
        message_id = coalesce(r.message_id, q.message_id),
        sender_account_id = %(sender)s
    FROM r
    WHERE q.id = r.id AND CASE WHEN q.status = 'assigned' THEN q.lease_token END = %(token)s
    RETURNING q.id, q.recipient_email, q.campaign_id, q.retry_count
)
INSERT INTO mailroom.send_logs (email_id, sender_account_id, recipient_email, campaign_id, attempt, outcome,
                                smtp_code, enhanced_code, response, duration_ms, worker)
SELECT d.id, %(sender)s, d.recipient_email, d.campaign_id,
       d.retry_count + CASE WHEN r.outcome = 'retry' THEN 0 ELSE 1 END,
       r.log_outcome, r.code, r.enhanced, left(r.response, 2000), r.duration_ms, %(owner)s
FROM done d JOIN r ON r.id = d.id
RETURNING email_id
"""

# Record accepted email in the journal (mailroom.sent_journal in schema.sql), many at once: the
# group commit of every slot's sends. Only emails still held under the claim that sent them are
# recorded; the ids returned are those, so a slot whose lease was lost stops sending.
JOURNAL_SENT = """
INSERT INTO mailroom.sent_journal (email_id, lease_token, sender_account_id, smtp_code, enhanced_code,
                                   response, duration_ms, message_id, worker)
SELECT r.id, r.token, r.sender, r.code, r.enhanced, left(r.response, 2000), r.duration_ms, r.message_id,
       %(owner)s
FROM jsonb_to_recordset(%(sent)s::jsonb)
     AS r(id bigint, token uuid, sender bigint, code int, enhanced text, response text, duration_ms int,
          message_id text)
-- A subquery per row, not a join: one primary-key probe each, whatever the planner thinks of the queue's size.
-- FOR KEY SHARE, of an email the claim still holds only: a lease rescue under way holds the row; this
-- waits for it, then sees the email pending and journals nothing (lease renewals take a weaker lock
-- and never wait on it). An email the claim no longer holds is neither locked nor waited for.
WHERE EXISTS (SELECT 1 FROM mailroom.email_queue q
              WHERE q.id = r.id AND CASE WHEN q.status = 'assigned' THEN q.lease_token END = r.token
              FOR KEY SHARE)
RETURNING email_id
"""

# Move journalled sends into the queue and the attempt log, for the given claims, in one statement.
# A journal row whose claim no longer holds its email (the lease was lost and the email handed on)
# is dropped without touching the email: its late result never overwrites the new holder's.
APPLY_SENT = "SELECT mailroom.apply_sent_journal(%s)"

# Hand claimed email back. One already in the journal was sent: it stays assigned until its
# claim's journal is applied (by the slot, or by lease rescue), never pending again.
RELEASE = """
UPDATE mailroom.email_queue q SET status = 'pending'
WHERE q.id = ANY(%(ids)s) AND CASE WHEN q.status = 'assigned' THEN q.lease_token END = %(token)s
  AND NOT EXISTS (SELECT 1 FROM mailroom.sent_journal j WHERE j.email_id = q.id AND j.lease_token = q.lease_token)
"""

RECORD_BOUNCES = """
INSERT INTO mailroom.bounce_list (email, bounce_type, reason, smtp_code, enhanced_code, sender_account_id,
                                  campaign_id)
SELECT lower(e), 'hard', reason, code, enhanced, %(sender)s, campaign
FROM unnest(%(emails)s::text[], %(reasons)s::text[], %(codes)s::int[], %(enhanced)s::text[],
            %(campaigns)s::text[]) AS b(e, reason, code, enhanced, campaign)
ON CONFLICT (email) DO UPDATE
SET last_bounced_at = now(), bounce_count = mailroom.bounce_list.bounce_count + 1,
    bounce_type = CASE WHEN mailroom.bounce_list.bounce_type = 'complaint' THEN 'complaint' ELSE 'hard' END,
    reason = EXCLUDED.reason, smtp_code = EXCLUDED.smtp_code, enhanced_code = EXCLUDED.enhanced_code
"""

COUNT_USAGE = """
INSERT INTO mailroom.sender_usage (sender_account_id, day, bounces, errors)
VALUES (%(sender)s, (now() AT TIME ZONE 'UTC')::date, %(bounces)s, %(errors)s)
ON CONFLICT (sender_account_id, day) DO UPDATE
SET bounces = mailroom.sender_usage.bounces + EXCLUDED.bounces,
    errors = mailroom.sender_usage.errors + EXCLUDED.errors
"""

TOUCH_SENDER = "UPDATE mailroom.sender_accounts SET last_used_at = now() WHERE id = %s RETURNING id"

# Returns the id only to the one attempt that suspended it: the others in flight say nothing more.
SUSPEND_SENDER = """
UPDATE mailroom.sender_accounts SET status = 'suspended', status_reason = %(reason)s
WHERE id = %(sender)s AND status <> 'suspended'
RETURNING id
"""

# Two statements, each its own transaction: renewal never holds a claim row while it waits for an
# email row (finish and rescue take the claim row first), so it cannot take part in a deadlock.
# The tokens returned are the claims renewed: a rescued claim's row is gone, and its lease with it.
RENEW_CLAIMS = """
UPDATE mailroom.claims SET expires_at = now() + make_interval(secs => %(lease)s)
WHERE lease_token = ANY(%(tokens)s::uuid[])
RETURNING lease_token
"""
RENEW_LEASES = """
UPDATE mailroom.email_queue SET lease_expires_at = now() + make_interval(secs => %(lease)s)
WHERE status = 'assigned' AND lease_token = ANY(%(tokens)s::uuid[])
RETURNING id
"""

# Every transaction that touches a claim takes its locks in one order -- the claim row, the sender
# row, then the emails -- so workers claiming, finishing and rescuing at once never deadlock: why, with
# mailroom.claims in schema.sql.
LOCK_SENDER = "SELECT 1 FROM mailroom.sender_accounts WHERE id = %s FOR UPDATE"

# A claim's row, written in the claim's own transaction with the quota reserved for it.
INSERT_CLAIM = """
INSERT INTO mailroom.claims (lease_token, sender_account_id, owner, day, reserved, expires_at)
VALUES (%(token)s, %(sender)s, %(owner)s, %(day)s, %(reserved)s, now() + make_interval(secs => %(lease)s))
"""

# Claimed emails beyond the quota granted go straight back, in the claim's own transaction.
UNCLAIM = """
UPDATE mailroom.email_queue q SET status = 'pending'
WHERE q.id = ANY(%(ids)s) AND CASE WHEN q.status = 'assigned' THEN q.lease_token END = %(token)s
"""

# A permanent refusal used quota like a send (the provider counted it).
COUNT_USED = "UPDATE mailroom.claims SET used = used + 1 WHERE lease_token = %(token)s"

# The claim row is locked before its emails (the order rescue takes); None when it is gone (rescued).
LOCK_CLAIM = "SELECT reserved, used, day FROM mailroom.claims WHERE lease_token = %s FOR UPDATE"
END_CLAIM = "DELETE FROM mailroom.claims WHERE lease_token = %s"

# Pending email past the queue lifetime, and pending or unrendered email past its own (expires_at),
# fails with the reason, due or not (claiming catches the rest).
EXPIRE_PENDING = """
WITH ended AS (
    SELECT id, true AS own FROM mailroom.email_queue
    WHERE expires_at <= now() + make_interval(secs => %(ahead)s) AND status IN ('pending', 'unrendered')
    UNION
    SELECT id, false FROM mailroom.email_queue
    WHERE status = 'pending' AND created_at < now() + make_interval(secs => %(ahead)s - %(lifetime)s)
)
UPDATE mailroom.email_queue q
SET status = 'failed', failure_kind = 'expired',
    last_error = CASE WHEN e.own THEN %(own_reason)s ELSE %(reason)s END
FROM (SELECT id, bool_or(own) AS own FROM ended GROUP BY id) e
WHERE q.id = e.id AND q.status IN ('pending', 'unrendered')
RETURNING q.id
"""

# A killed worker's row is forgotten a day after its last beat (health counts only recent ones).
HEARTBEAT = """
WITH gone AS (DELETE FROM mailroom.workers WHERE seen_at < now() - interval '1 day')
INSERT INTO mailroom.workers (name) VALUES (%(name)s)
ON CONFLICT (name) DO UPDATE SET seen_at = now()
"""
WORKER_GONE = "DELETE FROM mailroom.workers WHERE name = %(name)s"

# Rows whose worker died: back to the queue, except those its journal says were sent, which become
# sent (with their attempt logged). Only rows still under the expired lease are touched.
# Expired claims back to the queue with their journal applied and unused quota refunded; the lock
# order that keeps sent email sent is described with mailroom.rescue_expired_claims in schema.sql.
RESCUE_EXPIRED = "SELECT * FROM mailroom.rescue_expired_claims()"

# Journal rows nobody will apply: their claim lost its email (rescued, then handed on) while the
# worker that wrote them was gone. Old ones only, so a live claim's rows are never touched.
FORGET_ORPHANED_JOURNAL = """
DELETE FROM mailroom.sent_journal s
WHERE s.sent_at < now() - make_interval(secs => %(age)s)
  AND NOT EXISTS (SELECT 1 FROM mailroom.email_queue q
                  WHERE q.id = s.email_id AND q.lease_token = s.lease_token AND q.status = 'assigned')
"""

# When the next email is due, and when the first lease runs out (a draining worker waits for that
# email too: it may come back to the queue).
NEXT_DUE = """
SELECT (SELECT min(scheduled_for) FROM mailroom.email_queue WHERE status = 'pending') AS due,
       (SELECT min(lease_expires_at) FROM mailroom.email_queue WHERE status = 'assigned') AS lease_end
"""

# What a draining worker still waits for: email due now, or email under a lease (a live worker may hand
# it back, and a dead worker's comes back when its lease expires and the rescue returns it).
# Due email that one of the given senders (its streams and From domains, as JSON) may send.
ANY_DUE = """
SELECT EXISTS (
    SELECT 1 FROM jsonb_to_recordset(%(senders)s::jsonb) AS s(streams text[], domains text[])
    CROSS JOIN LATERAL (
        SELECT 1 FROM mailroom.email_queue q
        WHERE q.status = 'pending' AND q.stream = ANY(s.streams)
          AND q.scheduled_for <= now() + make_interval(secs => %(ahead)s)
          AND (q.from_email IS NULL OR lower(split_part(q.from_email, '@', 2)) = ANY(s.domains))
        LIMIT 1) d)
"""
# A claim under way anywhere (a live lease; expired ones were just rescued).
ANY_HELD = """
SELECT EXISTS (SELECT 1 FROM mailroom.claims)
    OR EXISTS (SELECT 1 FROM mailroom.email_queue WHERE status = 'assigned')
"""


# == sender accounts: which are eligible, quota, pacing, circuits ==

ELIGIBLE_SENDERS = """
SELECT id, name, from_email, from_name, smtp_host, smtp_port, smtp_security, smtp_username,
       smtp_password_encrypted, send_delay_ms, batch_size, max_connections,
       dkim_domain, dkim_selector, dkim_private_key_encrypted, circuit_state,
       connect_timeout_seconds, command_timeout_seconds, data_timeout_seconds,
       bounce_domain, relay_provider, auth_type, oauth_token_url, oauth_client_id,
       oauth_client_secret_encrypted, oauth_refresh_token_encrypted, allow_plaintext_login,
       gmail_subject_email, gmail_key_encrypted, postal_address, streams,
       mailroom.sender_from_domains(from_domains, from_email) AS from_domains
FROM mailroom.sender_accounts
WHERE (status IN ('active', 'warming_up')
       OR (status = 'paused_limit_reached' AND limit_reached_on < (now() AT TIME ZONE 'UTC')::date))
  -- an open circuit is left alone until its backoff has passed, then one worker probes it
  AND (circuit_state = 'closed' OR circuit_retry_at <= now())
ORDER BY id
"""

# A refresh token the OAuth2 endpoint rotated replaces the one it was given, and nothing an operator
# stored since (or a key rotation re-encrypted): then the stored one stays, and is used next time.
SAVE_ROTATED_GRANT = """
UPDATE mailroom.sender_accounts SET oauth_refresh_token_encrypted = %(new)s
WHERE id = %(id)s AND auth_type = 'oauth2' AND oauth_refresh_token_encrypted = %(old)s
RETURNING oauth_refresh_token_encrypted
"""

OPEN_CIRCUIT = "SELECT mailroom.open_circuit(%s, %s, %s, %s)"
TAKE_PROBE = "SELECT mailroom.take_probe(%s, %s)"
CLOSE_CIRCUIT = "SELECT mailroom.close_circuit(%s)"

# The day is the one reserve_quota counts on (now() is the statement's transaction time in both).
RESERVE = "SELECT mailroom.reserve_quota(%s, %s) AS granted, (now() AT TIME ZONE 'UTC')::date AS day"
RELEASE_QUOTA = "SELECT mailroom.release_quota(%s, %s, %s)"

# Take the next send slot of a paced account; returns how many seconds to wait for it (0: now).
# The row lock orders every worker's sends, so together they keep one send per send_delay_ms.
TAKE_SEND_SLOT = """
INSERT INTO mailroom.sender_pacing AS p (sender_account_id, next_send_at)
VALUES (%(sender)s, clock_timestamp() + make_interval(secs => %(delay)s))
ON CONFLICT (sender_account_id) DO UPDATE
SET next_send_at = greatest(p.next_send_at, clock_timestamp()) + make_interval(secs => %(delay)s)
RETURNING greatest(0, extract(epoch FROM p.next_send_at - clock_timestamp())::float8 - %(delay)s)
"""
