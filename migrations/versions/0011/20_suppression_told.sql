-- What a suppressed enqueue tells. An application role could enqueue to any address, ask
-- mailroom.enqueue_outcome, roll back, and read the kind of the address's listing (a complaint, a hard
-- bounce, an operator's suppression) however another tenant's mail had put it there, leaving no trace.
-- The rule, once (mailroom.suppression_told): whoever may read the suppression list (SELECT on
-- mailroom.bounce_list: operators, the read-only role) is told why; anyone else only that the email will
-- not be sent. Every way an application learns it applies it: mailroom.enqueue_outcome, mailroom.my_emails,
-- and the Python API's mailroom.enqueue_suppression (its INSERT ... RETURNING and its lookup by key). The
-- queue keeps storing the reason itself, for operators.
--
-- And the wording: an operator's suppression is not a bounce; it reads "suppressed by an operator (manual)".

-- 1. Why email to an address is not sent (the same rule, the manual kind worded for what it is).
CREATE OR REPLACE FUNCTION mailroom.suppression_reason(address text, transactional boolean) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(
        (SELECT CASE WHEN b.bounce_type = 'manual' THEN 'suppressed by an operator (manual)'
                     WHEN b.bounce_type IN ('hard', 'complaint') THEN 'on the bounce list (' || b.bounce_type || ')'
                     WHEN b.bounce_count >= 3 THEN 'on the bounce list (soft, ' || b.bounce_count || ' times)'
                END
         FROM mailroom.bounce_list b WHERE b.email = lower(address)),
        (SELECT 'unsubscribed' FROM mailroom.unsubscribe_list u
         WHERE u.email = lower(address) AND NOT transactional))
$$;
COMMENT ON FUNCTION mailroom.suppression_reason(text, boolean) IS
    'Why email to this address is not sent (hard bounce, complaint, an operator''s suppression, soft three times, or unsubscribed for non-transactional email), NULL when it may be sent.';

-- 2. What the caller is told of a suppression. session_user, not current_user: inside a SECURITY DEFINER
-- function (enqueue_outcome, enqueue_suppression) current_user is the schema's owner, session_user
-- still the role that connected.
CREATE FUNCTION mailroom.suppression_told(reason text) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN reason IS NULL THEN NULL
                WHEN has_table_privilege(session_user, 'mailroom.bounce_list'::regclass, 'SELECT') THEN reason
                ELSE 'suppressed: the address is on the suppression list (an operator can say why)'
           END
$$;
COMMENT ON FUNCTION mailroom.suppression_told(text) IS
    'What the connected role is told of a suppression: the reason when it may read the suppression list (SELECT on mailroom.bounce_list), else only that the address is on it. Used by every answer an application gets: enqueue_outcome, my_emails, enqueue_suppression.';

-- 3. The verdict itself, for the statement trigger that stores it: granted to no one.
CREATE FUNCTION mailroom.email_suppression(
    status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean
) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN status <> 'pending' THEN NULL
        WHEN to_extra IS NULL AND cc IS NULL AND bcc IS NULL THEN mailroom.suppression_reason(recipient, transactional)
        WHEN bool_and(mailroom.suppression_reason(a, transactional) IS NOT NULL)
            THEN 'every recipient suppressed; the first: ' || mailroom.suppression_reason(recipient, transactional)
    END
    FROM unnest(ARRAY[recipient] || coalesce(to_extra, '{}') || coalesce(cc, '{}') || coalesce(bcc, '{}')) AS r(a)
$$;
REVOKE EXECUTE ON FUNCTION mailroom.email_suppression(text, text, text[], text[], text[], boolean) FROM PUBLIC;
COMMENT ON FUNCTION mailroom.email_suppression(text, text, text[], text[], text[], boolean) IS
    'Why a new email is stored suppressed (every recipient suppressed), NULL when it is queued: the reason mailroom.email_queue_suppress_listed stores. Granted to no one.';

-- What the Python API's INSERT ... RETURNING is told (its grants to the roles that write the queue stay).
CREATE OR REPLACE FUNCTION mailroom.enqueue_suppression(
    status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean
) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT mailroom.suppression_told(mailroom.email_suppression(status, recipient, to_extra, cc, bcc, transactional))
$$;
COMMENT ON FUNCTION mailroom.enqueue_suppression(text, text, text[], text[], text[], boolean) IS
    'Whether a new email is stored suppressed, as its caller is told (mailroom.suppression_told), NULL when it is queued; the Python API returns it with the id.';

CREATE OR REPLACE FUNCTION mailroom.email_queue_suppress_listed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mailroom.bounce_list) AND NOT EXISTS (SELECT 1 FROM mailroom.unsubscribe_list) THEN
        RETURN NULL;  -- nothing suppressed: nothing to look up
    END IF;
    UPDATE mailroom.email_queue q SET status = 'suppressed', suppression_reason = s.reason
    FROM (SELECT n.id, mailroom.email_suppression(n.status, n.recipient_email, n.to_extra, n.cc, n.bcc,
                                                  n.transactional) AS reason
          FROM new_rows n WHERE n.status = 'pending') s
    WHERE q.id = s.id AND s.reason IS NOT NULL;
    RETURN NULL;
END $$;

-- 4. What an application reads of its own email.
CREATE OR REPLACE FUNCTION mailroom.enqueue_outcome(email_id bigint)
RETURNS TABLE (id bigint, status text, suppressed boolean, suppression_reason text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT e.id, e.status, e.status = 'suppressed', mailroom.suppression_told(e.suppression_reason)
    FROM mailroom.email_queue e
    WHERE e.id = enqueue_outcome.email_id AND e.enqueued_by = session_user
$$;
COMMENT ON FUNCTION mailroom.enqueue_outcome(bigint) IS
    'The state of an email the calling role enqueued: whether it was stored suppressed, and why as far as it may know (mailroom.suppression_told). Granted to application roles by mailroom.grant_app_role.';

CREATE OR REPLACE VIEW mailroom.my_emails WITH (security_barrier) AS
SELECT id, status, recipient_email, subject, idempotency_key, reference_type, reference_id, priority,
       scheduled_for, created_at, sent_at, finished_at, retry_count, max_retries, next_retry_at, last_error,
       mailroom.suppression_told(suppression_reason) AS suppression_reason
FROM mailroom.email_queue
WHERE enqueued_by = session_user;
COMMENT ON COLUMN mailroom.my_emails.suppression_reason IS
    'Why the email is suppressed, as far as the reading role may know (mailroom.suppression_told).';
