-- Retention for every final state: failed, expired, cancelled and suppressed email is archived and
-- deleted like sent email (worker.ops.archiving). What outlives such an email in the database is what
-- outlives a sent one: a row in archived_emails when it belonged to a campaign (so `campaigns stats`
-- still counts its failure, bounce or suppression) or, sent, carried an unsubscribe token. The row
-- now carries the final status, when it ended and its last error. Still no address is copied here:
-- an address the last error echoes ("550 <ada@example.com>: unknown") is masked to ***@domain on the
-- way in, so privacy erasure has nothing to find in this table (the archive files hold the full
-- records, and erasure rewrites them). Rows archived before this revision are sent ones: they get
-- status 'sent' and their sent_at as finished_at.
ALTER TABLE mailroom.archived_emails
    ADD COLUMN status text NOT NULL DEFAULT 'sent'
        CHECK (status IN ('sent', 'bounced', 'failed', 'cancelled', 'suppressed')),
    ADD COLUMN finished_at timestamptz,
    ADD COLUMN last_error text,
    ADD COLUMN bounced boolean NOT NULL DEFAULT false;
UPDATE mailroom.archived_emails SET finished_at = sent_at;
-- finished_at stays nullable for writers that know only sent_at (it is then the sent row's age).
ALTER TABLE mailroom.archived_emails
    ALTER COLUMN sent_at DROP NOT NULL,
    ADD CONSTRAINT archived_emails_sent_check CHECK ((status IN ('sent', 'bounced')) = (sent_at IS NOT NULL)),
    ADD CONSTRAINT archived_emails_finished_check CHECK (status IN ('sent', 'bounced') OR finished_at IS NOT NULL);
CREATE INDEX archived_emails_finished_at_idx ON mailroom.archived_emails USING brin (finished_at);

CREATE OR REPLACE FUNCTION mailroom.email_queue_keep_archived() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    keep_from timestamptz;
BEGIN
    INSERT INTO mailroom.archived_emails
        (email_id, sent_at, campaign_id, unsubscribe_token, track_opens, track_clicks,
         status, finished_at, last_error, bounced)
    SELECT id, sent_at, campaign_id,
           CASE WHEN status = 'sent' AND NOT transactional THEN unsubscribe_token END,
           track_opens, track_clicks, status, coalesce(finished_at, sent_at),
           regexp_replace(last_error, '[A-Za-z0-9.!#$%&''*+/=?^_`{|}~-]+@', '***@', 'g'),
           status = 'bounced' OR coalesce(error_details ->> 'outcome' = 'bounced', false)
    FROM old_rows
    WHERE status IN ('sent', 'bounced', 'failed', 'cancelled', 'suppressed')
      AND (campaign_id IS NOT NULL
           OR (status = 'sent' AND unsubscribe_token IS NOT NULL AND NOT transactional))
    ON CONFLICT DO NOTHING;
    -- A day of margin: an email's last send log is written in the transaction that ends it. Sent
    -- rows go by sent_at as they always did; the others by finished_at (both BRIN-indexed).
    keep_from := (SELECT min(attempted_at) FROM mailroom.send_logs) - interval '1 day';
    DELETE FROM mailroom.archived_emails WHERE sent_at < keep_from OR finished_at < keep_from;
    RETURN NULL;
END;
$$;

-- Retention finds old cancelled email by this index, as it finds the other final states by theirs
-- (email_queue_sent_idx, email_queue_failed_idx, email_queue_suppressed_idx).
CREATE INDEX email_queue_cancelled_idx ON mailroom.email_queue (finished_at) WHERE status = 'cancelled';
-- Email a DSN turned bounced after it was sent (revision 0006's bounce intake) ages by sent_at, as sent email.
CREATE INDEX email_queue_bounced_idx ON mailroom.email_queue (sent_at) WHERE status = 'bounced';
