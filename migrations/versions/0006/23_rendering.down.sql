DROP INDEX mailroom.email_queue_unrendered_idx;
-- Email not rendered yet cannot be kept as it is below this revision: failed, with the reason.
UPDATE mailroom.email_queue
SET status = CASE WHEN status = 'unrendered' THEN 'failed' ELSE status END, last_error = 'not rendered when revision 0006 was undone',
    subject = coalesce(nullif(subject, ''), '(not rendered)'), text_body = coalesce(text_body, '(not rendered)')
WHERE status = 'unrendered' OR (text_body IS NULL AND html_body IS NULL);
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_unrendered_has_template;
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_check;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_check CHECK (text_body IS NOT NULL OR html_body IS NOT NULL);
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_status_check;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_status_check
    CHECK (status IN ('pending', 'assigned', 'sent', 'failed', 'cancelled', 'suppressed'));
CREATE OR REPLACE FUNCTION mailroom.email_queue_before_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- Bulk COPY sends NULL for "now": the database clock decides, not the client's.
    NEW.scheduled_for := coalesce(NEW.scheduled_for, now());
    IF NEW.status <> 'pending' THEN
        RAISE EXCEPTION 'a new email starts pending, not %', NEW.status USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE OR REPLACE FUNCTION mailroom.email_queue_before_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of mailroom.email_queue is immutable' USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT (
            (OLD.status = 'pending'    AND NEW.status IN ('assigned', 'cancelled', 'suppressed', 'failed'))
         OR (OLD.status = 'assigned'   AND NEW.status IN ('pending', 'sent', 'failed', 'suppressed'))
         OR (OLD.status = 'failed'     AND NEW.status IN ('pending', 'cancelled'))
         OR (OLD.status = 'suppressed' AND NEW.status IN ('pending', 'cancelled'))
        ) THEN
            RAISE EXCEPTION 'email % cannot move from % to %', OLD.id, OLD.status, NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        CASE NEW.status
            WHEN 'assigned' THEN NEW.assigned_at := now();
            WHEN 'sent' THEN NEW.sent_at := coalesce(NEW.sent_at, now()); NEW.finished_at := now();
            WHEN 'pending' THEN NEW.finished_at := NULL; NEW.suppression_reason := NULL;
            ELSE NEW.finished_at := now();
        END CASE;
        IF NEW.status <> 'assigned' THEN
            NEW.lease_owner := NULL;
            NEW.lease_token := NULL;
            NEW.lease_expires_at := NULL;
        END IF;
    END IF;
    RETURN NEW;
END $$;
