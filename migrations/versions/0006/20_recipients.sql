-- Many recipients: `recipient_email` stays the first To (indexes, logs and suppression key on it);
-- more To addresses, Cc, Bcc and Reply-To ride beside it, NULL for the common single-recipient email.
-- Bcc is envelope only: never a header.
ALTER TABLE mailroom.email_queue
    ADD COLUMN to_extra text[],
    ADD COLUMN cc text[],
    ADD COLUMN bcc text[],
    ADD COLUMN reply_to text[];

-- What happened to each recipient of a many-recipient email that is not the email's own outcome:
-- dropped at claim time (suppressed) or refused at RCPT while others were accepted (refused).
CREATE TABLE mailroom.recipient_outcomes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email_id bigint NOT NULL REFERENCES mailroom.email_queue (id) ON DELETE CASCADE,
    recipient text NOT NULL CHECK (length(recipient) BETWEEN 3 AND 254),
    kind text NOT NULL CHECK (kind IN ('to', 'cc', 'bcc')),
    outcome text NOT NULL CHECK (outcome IN ('suppressed', 'refused', 'accepted')),
    smtp_code integer CHECK (smtp_code BETWEEN 100 AND 599),
    enhanced_code text CHECK (enhanced_code ~ '^[245]\.\d{1,3}\.\d{1,3}$'),
    reason text CHECK (length(reason) <= 2000),
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX recipient_outcomes_email_idx ON mailroom.recipient_outcomes (email_id);
