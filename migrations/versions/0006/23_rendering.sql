-- Email enqueued from SQL with a template: stored `unrendered` (its template, locale and data), rendered
-- by the worker's renderer with the same catalog and sandbox as the Python API, then `pending` with the
-- content that will be sent (or `failed` with the template's error). Claims never see it before.
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_status_check;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_status_check
    CHECK (status IN ('unrendered', 'pending', 'assigned', 'sent', 'failed', 'cancelled', 'suppressed'));
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_check;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_check
    CHECK (text_body IS NOT NULL OR html_body IS NOT NULL
           OR (template IS NOT NULL AND status IN ('unrendered', 'failed', 'cancelled')));
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_unrendered_has_template
    CHECK (status <> 'unrendered' OR template IS NOT NULL);
CREATE INDEX email_queue_unrendered_idx ON mailroom.email_queue (id) WHERE status = 'unrendered';

CREATE OR REPLACE FUNCTION mailroom.email_queue_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Bulk COPY sends NULL for "now": the database clock decides, not the client's.
    NEW.scheduled_for := coalesce(NEW.scheduled_for, now());
    IF NEW.status NOT IN ('pending', 'unrendered') THEN
        RAISE EXCEPTION 'a new email starts pending (or unrendered), not %', NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

-- Revision 0006's transitions, all here: unrendered (this part) and sent -> bounced (a DSN, part 80).
CREATE OR REPLACE FUNCTION mailroom.email_queue_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of mailroom.email_queue is immutable' USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    IF NEW.status = 'pending' AND OLD.status = 'failed' AND NEW.text_body IS NULL AND NEW.html_body IS NULL THEN
        NEW.status := 'unrendered';  -- retrying an email its template failed to render: render it again
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT (
            (OLD.status = 'unrendered' AND NEW.status IN ('pending', 'failed', 'cancelled'))
         OR (OLD.status = 'failed'     AND NEW.status = 'unrendered')
         OR (OLD.status = 'pending'    AND NEW.status IN ('assigned', 'cancelled', 'suppressed', 'failed'))
         OR (OLD.status = 'assigned'   AND NEW.status IN ('pending', 'sent', 'failed', 'suppressed'))
         OR (OLD.status = 'failed'     AND NEW.status IN ('pending', 'cancelled'))
         OR (OLD.status = 'suppressed' AND NEW.status IN ('pending', 'cancelled'))
         OR (OLD.status = 'sent'       AND NEW.status = 'bounced')
        ) THEN
            RAISE EXCEPTION 'email % cannot move from % to %', OLD.id, OLD.status, NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        CASE NEW.status
            WHEN 'assigned' THEN NEW.assigned_at := now();
            WHEN 'sent' THEN NEW.sent_at := coalesce(NEW.sent_at, now()); NEW.finished_at := now();
            WHEN 'pending', 'unrendered' THEN NEW.finished_at := NULL; NEW.suppression_reason := NULL;
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
