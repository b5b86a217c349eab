-- Signed acknowledgements (reference 04): a reminder's log row follows its email's fate.
-- Reminders are enqueued with reference_type = 'reminder_log' and reference_id = the log row's id;
-- this trigger copies the email's outcome into the log, so the delivery engine knows nothing of reminders.

CREATE FUNCTION mailroom.reminder_logs_follow_email() RETURNS trigger LANGUAGE plpgsql AS $$
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

-- Only reminder emails whose status changed to something other than assigned run the function.
CREATE TRIGGER email_queue_reminder_outcome AFTER UPDATE OF status ON mailroom.email_queue
    FOR EACH ROW
    WHEN (NEW.reference_type = 'reminder_log' AND NEW.status IS DISTINCT FROM OLD.status
          AND NEW.status <> 'assigned' AND NEW.reference_id ~ '^[0-9]{1,18}$')
    EXECUTE FUNCTION mailroom.reminder_logs_follow_email();
