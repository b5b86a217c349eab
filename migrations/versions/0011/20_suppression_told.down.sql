-- Undo 20_suppression_told: every caller told the reason again, the manual kind worded as a bounce.
CREATE OR REPLACE VIEW mailroom.my_emails WITH (security_barrier) AS
SELECT id, status, recipient_email, subject, idempotency_key, reference_type, reference_id, priority,
       scheduled_for, created_at, sent_at, finished_at, retry_count, max_retries, next_retry_at, last_error,
       suppression_reason
FROM mailroom.email_queue
WHERE enqueued_by = session_user;
COMMENT ON COLUMN mailroom.my_emails.suppression_reason IS NULL;

CREATE OR REPLACE FUNCTION mailroom.enqueue_outcome(email_id bigint)
RETURNS TABLE (id bigint, status text, suppressed boolean, suppression_reason text)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT e.id, e.status, e.status = 'suppressed', e.suppression_reason
    FROM mailroom.email_queue e
    WHERE e.id = enqueue_outcome.email_id AND e.enqueued_by = session_user
$$;
COMMENT ON FUNCTION mailroom.enqueue_outcome(bigint) IS
    'The state of an email the calling role enqueued: whether it was stored suppressed and why. Granted to application roles by mailroom.grant_app_role.';

CREATE OR REPLACE FUNCTION mailroom.enqueue_suppression(
    status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean
) RETURNS text LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE
        WHEN status <> 'pending' THEN NULL
        WHEN to_extra IS NULL AND cc IS NULL AND bcc IS NULL THEN mailroom.suppression_reason(recipient, transactional)
        WHEN bool_and(mailroom.suppression_reason(a, transactional) IS NOT NULL)
            THEN 'every recipient suppressed; the first: ' || mailroom.suppression_reason(recipient, transactional)
    END
    FROM unnest(ARRAY[recipient] || coalesce(to_extra, '{}') || coalesce(cc, '{}') || coalesce(bcc, '{}')) AS r(a)
$$;
COMMENT ON FUNCTION mailroom.enqueue_suppression(text, text, text[], text[], text[], boolean) IS
    'Why a new email is stored suppressed (every recipient suppressed), NULL when it is queued; the Python API returns it with the id.';

CREATE OR REPLACE FUNCTION mailroom.email_queue_suppress_listed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mailroom.bounce_list) AND NOT EXISTS (SELECT 1 FROM mailroom.unsubscribe_list) THEN
        RETURN NULL;  -- nothing suppressed: nothing to look up
    END IF;
    UPDATE mailroom.email_queue q SET status = 'suppressed', suppression_reason = s.reason
    FROM (SELECT n.id, mailroom.enqueue_suppression(n.status, n.recipient_email, n.to_extra, n.cc, n.bcc,
                                                    n.transactional) AS reason
          FROM new_rows n WHERE n.status = 'pending') s
    WHERE q.id = s.id AND s.reason IS NOT NULL;
    RETURN NULL;
END $$;

DROP FUNCTION mailroom.email_suppression(text, text, text[], text[], text[], boolean);
DROP FUNCTION mailroom.suppression_told(text);

CREATE OR REPLACE FUNCTION mailroom.suppression_reason(address text, transactional boolean) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(
        (SELECT CASE WHEN b.bounce_type IN ('hard', 'complaint', 'manual')
                         THEN 'on the bounce list (' || b.bounce_type || ')'
                     WHEN b.bounce_count >= 3 THEN 'on the bounce list (soft, ' || b.bounce_count || ' times)'
                END
         FROM mailroom.bounce_list b WHERE b.email = lower(address)),
        (SELECT 'unsubscribed' FROM mailroom.unsubscribe_list u
         WHERE u.email = lower(address) AND NOT transactional))
$$;
COMMENT ON FUNCTION mailroom.suppression_reason(text, boolean) IS
    'Why email to this address is not sent (hard bounce, complaint, manual, soft three times, or unsubscribed for non-transactional email), NULL when it may be sent.';
