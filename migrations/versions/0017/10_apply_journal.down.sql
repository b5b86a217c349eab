-- Back to revision 0016: the index on lease_token alone and the join with the deleted rows.

CREATE INDEX sent_journal_token_idx ON mailroom.sent_journal (lease_token);
DROP INDEX mailroom.sent_journal_token_email_idx;

CREATE OR REPLACE FUNCTION mailroom.apply_sent_journal(token uuid) RETURNS integer
    LANGUAGE sql
    AS $$
    WITH j AS (
        DELETE FROM mailroom.sent_journal WHERE lease_token = token RETURNING *
    ), done AS (
        UPDATE mailroom.email_queue q
        SET status = 'sent', sent_at = j.sent_at, message_id = coalesce(j.message_id, q.message_id),
            sender_account_id = j.sender_account_id
        FROM j
        WHERE q.id = j.email_id AND q.lease_token = j.lease_token AND q.status = 'assigned'
        RETURNING q.id, q.recipient_email, q.campaign_id, q.retry_count, j.sent_at, j.sender_account_id,
                  j.smtp_code, j.enhanced_code, j.response, j.duration_ms, j.worker
    ), logged AS (
        INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, campaign_id,
                                        attempt, outcome, smtp_code, enhanced_code, response, duration_ms, worker)
        SELECT sent_at, id, sender_account_id, recipient_email, campaign_id, retry_count + 1, 'sent', smtp_code,
               enhanced_code, response, duration_ms, worker
        FROM done
        RETURNING 1
    )
    SELECT count(*)::integer FROM logged
$$;

ALTER FUNCTION mailroom.apply_sent_journal(uuid) RESET ALL;
