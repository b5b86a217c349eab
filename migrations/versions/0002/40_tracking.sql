-- Tracking and compliance (issue 7): the one-click unsubscribe token of non-transactional email.
-- It is separate from tracking_token on purpose: the open pixel's URL is fetched by image proxies,
-- security scanners and prefetchers, and knowing it must never be enough to unsubscribe anyone.
ALTER TABLE mailroom.email_queue ADD COLUMN unsubscribe_token uuid;
CREATE UNIQUE INDEX email_queue_unsubscribe_token_idx ON mailroom.email_queue (unsubscribe_token)
    WHERE unsubscribe_token IS NOT NULL;

-- `mailroom campaigns stats` counts a campaign's unsubscribes without scanning the whole list.
CREATE INDEX unsubscribe_list_campaign_idx ON mailroom.unsubscribe_list (campaign_id)
    WHERE campaign_id IS NOT NULL;

-- What outlives a sent email that retention archives and deletes: its unsubscribe token (a link in
-- a 100-day-old newsletter must still unsubscribe), its campaign and whether it carried a pixel or
-- tracked links (so `campaigns stats` still counts it). No address is copied here: the tracker
-- finds the recipient in the email's send log, which privacy erasure already anonymises, so a link
-- works as long as that log is kept (MAILROOM_LOG_RETENTION_MONTHS). Rows are written by the delete
-- itself (any delete of a sent email, whoever runs it), and rows whose send logs are gone are
-- pruned at the same time.
CREATE TABLE mailroom.archived_emails (
    email_id            bigint PRIMARY KEY,
    sent_at             timestamptz NOT NULL,
    campaign_id         text,
    unsubscribe_token   uuid,
    track_opens         boolean NOT NULL,
    track_clicks        boolean NOT NULL
);
CREATE UNIQUE INDEX archived_emails_unsubscribe_token_idx ON mailroom.archived_emails (unsubscribe_token)
    WHERE unsubscribe_token IS NOT NULL;
CREATE INDEX archived_emails_campaign_idx ON mailroom.archived_emails (campaign_id)
    WHERE campaign_id IS NOT NULL;
CREATE INDEX archived_emails_sent_at_idx ON mailroom.archived_emails USING brin (sent_at);

CREATE FUNCTION mailroom.email_queue_keep_archived() RETURNS trigger LANGUAGE plpgsql AS $$
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
CREATE TRIGGER email_queue_keep_archived AFTER DELETE ON mailroom.email_queue
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_keep_archived();
