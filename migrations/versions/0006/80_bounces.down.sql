DROP TABLE mailroom.bounce_quarantine;
DROP TABLE mailroom.bounce_events;
-- A bounced email was sent: below this revision it is `sent` again. The transition guard and the
-- reminder follower are held while it moves back (neither knows this move).
ALTER TABLE mailroom.email_queue DISABLE TRIGGER email_queue_before_update;
ALTER TABLE mailroom.email_queue DISABLE TRIGGER email_queue_reminder_outcome;
UPDATE mailroom.email_queue SET status = 'sent' WHERE status = 'bounced';
ALTER TABLE mailroom.email_queue ENABLE TRIGGER email_queue_reminder_outcome;
ALTER TABLE mailroom.email_queue ENABLE TRIGGER email_queue_before_update;
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_sent_at_check;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_check3 CHECK ((status = 'sent') = (sent_at IS NOT NULL));
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_status_check;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_status_check
    CHECK (status IN ('unrendered', 'pending', 'assigned', 'sent', 'failed', 'cancelled', 'suppressed'));
CREATE OR REPLACE FUNCTION mailroom.reminder_logs_follow_email() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE mailroom.reminder_logs r
    SET status = CASE NEW.status
                     WHEN 'sent' THEN 'sent'
                     WHEN 'failed' THEN CASE WHEN NEW.error_details ->> 'outcome' = 'bounced'
                                             THEN 'bounced' ELSE 'failed' END
                     WHEN 'suppressed' THEN 'suppressed'
                     WHEN 'cancelled' THEN 'cancelled'
                     ELSE 'queued'  -- pending again: retried by an operator
                 END,
        finished_at = CASE WHEN NEW.status IN ('sent', 'failed', 'suppressed', 'cancelled')
                           THEN coalesce(NEW.finished_at, now()) END,
        error_message = CASE NEW.status
                            WHEN 'failed' THEN NEW.last_error
                            WHEN 'suppressed' THEN NEW.suppression_reason
                            WHEN 'cancelled' THEN 'the reminder email was cancelled'
                        END
    WHERE r.id = NEW.reference_id::bigint AND r.email_id = NEW.id;
    RETURN NULL;
END $$;
