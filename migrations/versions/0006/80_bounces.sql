-- The outside world answers after `sent`: a delivery status notification (RFC 3464) or a
-- complaint (RFC 5965) arrives at the email's VERP return path. A permanent failure turns the
-- email `bounced` (a state after `sent`), each report is one row of bounce_events (unique by a
-- dedupe key, so a redelivered report changes nothing twice), and what cannot be read is kept
-- in bounce_quarantine for an operator.
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_status_check;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_status_check
    CHECK (status IN ('unrendered', 'pending', 'assigned', 'sent', 'failed', 'cancelled', 'suppressed',
                      'bounced'));
-- A bounced email keeps the time it was sent.
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_check3;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_sent_at_check
    CHECK ((status IN ('sent', 'bounced')) = (sent_at IS NOT NULL));


-- A reminder whose email bounced after it was sent is `bounced` too (it would read `queued`).
CREATE OR REPLACE FUNCTION mailroom.reminder_logs_follow_email() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE mailroom.reminder_logs r
    SET status = CASE NEW.status
                     WHEN 'sent' THEN 'sent'
                     WHEN 'failed' THEN CASE WHEN NEW.error_details ->> 'outcome' = 'bounced'
                                             THEN 'bounced' ELSE 'failed' END
                     WHEN 'bounced' THEN 'bounced'
                     WHEN 'suppressed' THEN 'suppressed'
                     WHEN 'cancelled' THEN 'cancelled'
                     ELSE 'queued'  -- pending again: retried by an operator
                 END,
        finished_at = CASE WHEN NEW.status IN ('sent', 'failed', 'suppressed', 'cancelled', 'bounced')
                           THEN coalesce(NEW.finished_at, now()) END,
        error_message = CASE NEW.status
                            WHEN 'failed' THEN NEW.last_error
                            WHEN 'bounced' THEN NEW.last_error
                            WHEN 'suppressed' THEN NEW.suppression_reason
                            WHEN 'cancelled' THEN 'the reminder email was cancelled'
                        END
    WHERE r.id = NEW.reference_id::bigint AND r.email_id = NEW.id;
    RETURN NULL;
END $$;

-- One row per recipient report of a DSN or ARF report that was applied. No foreign key to the
-- queue: retention deletes sent email long before the record of its bounce may go.
CREATE TABLE mailroom.bounce_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now(),
    email_id bigint,
    recipient text NOT NULL CHECK (recipient = lower(recipient)),
    kind text NOT NULL CHECK (kind IN ('hard', 'soft', 'complaint')),
    status text,            -- enhanced status code as reported (5.1.1), or the ARF Feedback-Type
    action text,            -- RFC 3464 Action (failed, delayed), NULL for complaints
    diagnostic text,        -- Diagnostic-Code as reported, size-capped by the intake
    source text NOT NULL CHECK (source IN ('dsn', 'arf', 'plain')),
    source_message_id text, -- the report's own Message-ID
    raw_size integer NOT NULL CHECK (raw_size >= 0),
    dedupe_key text NOT NULL UNIQUE
);
CREATE INDEX bounce_events_email_idx ON mailroom.bounce_events (email_id);
CREATE INDEX bounce_events_received_idx ON mailroom.bounce_events USING brin (received_at);

-- Reports Mailroom could not read or could not trust (no valid token, no known email).
CREATE TABLE mailroom.bounce_quarantine (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now(),
    reason text NOT NULL,
    envelope_recipient text,
    raw bytea NOT NULL,          -- the first 256 KiB of the message
    raw_size integer NOT NULL CHECK (raw_size >= 0),
    digest bytea NOT NULL UNIQUE -- sha256 of the whole message: a redelivery is kept once
);

CREATE TRIGGER bounce_events_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_events
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
CREATE TRIGGER bounce_quarantine_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_quarantine
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
