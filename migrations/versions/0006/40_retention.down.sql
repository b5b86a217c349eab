-- Back to archived_emails of sent email only (rows of other final states go: 0005 has no place for them).
DROP INDEX mailroom.email_queue_cancelled_idx;
DROP INDEX mailroom.email_queue_bounced_idx;
CREATE OR REPLACE FUNCTION mailroom.email_queue_keep_archived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO mailroom.archived_emails
        (email_id, sent_at, campaign_id, unsubscribe_token, track_opens, track_clicks)
    SELECT id, sent_at, campaign_id, CASE WHEN NOT transactional THEN unsubscribe_token END,
           track_opens, track_clicks
    FROM old_rows
    WHERE status = 'sent' AND (campaign_id IS NOT NULL OR (unsubscribe_token IS NOT NULL AND NOT transactional))
    ON CONFLICT DO NOTHING;
    -- A day of margin: an email's sent log is written in the transaction that sets its sent_at.
    DELETE FROM mailroom.archived_emails
    WHERE sent_at < (SELECT min(attempted_at) FROM mailroom.send_logs) - interval '1 day';
    RETURN NULL;
END;
$$;
UPDATE mailroom.archived_emails SET status = 'sent' WHERE status = 'bounced';
DELETE FROM mailroom.archived_emails WHERE status <> 'sent';
DROP INDEX mailroom.archived_emails_finished_at_idx;
ALTER TABLE mailroom.archived_emails
    DROP CONSTRAINT archived_emails_finished_check,
    DROP CONSTRAINT archived_emails_sent_check,
    ALTER COLUMN sent_at SET NOT NULL,
    DROP COLUMN bounced,
    DROP COLUMN last_error,
    DROP COLUMN finished_at,
    DROP COLUMN status;
