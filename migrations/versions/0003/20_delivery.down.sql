-- Sends a worker journalled but has not applied yet are applied first: dropping them would let
-- lease rescue return those emails to the queue, and they would be sent twice.
WITH j AS (
    DELETE FROM mailroom.sent_journal RETURNING *
), done AS (
    UPDATE mailroom.email_queue q
    SET status = 'sent', sent_at = j.sent_at, message_id = coalesce(j.message_id, q.message_id),
        sender_account_id = j.sender_account_id
    FROM j
    WHERE q.id = j.email_id AND q.lease_token = j.lease_token AND q.status = 'assigned'
    RETURNING q.id, q.recipient_email, q.campaign_id, q.retry_count, j.sent_at, j.sender_account_id,
              j.smtp_code, j.enhanced_code, j.response, j.duration_ms, j.worker
)
INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, campaign_id,
                                attempt, outcome, smtp_code, enhanced_code, response, duration_ms, worker)
SELECT sent_at, id, sender_account_id, recipient_email, campaign_id, retry_count + 1, 'sent', smtp_code,
       enhanced_code, response, duration_ms, worker
FROM done;

DROP TABLE mailroom.sent_journal;
