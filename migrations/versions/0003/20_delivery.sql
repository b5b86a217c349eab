-- Sent, not yet applied: the worker's write-ahead record of every email an SMTP server accepted.
--
-- A slot commits one row here for each accepted email before its next message goes out (so a
-- killed worker sends at most one message per connection twice), and moves its batch's rows into
-- email_queue and send_logs in one statement at the end of the batch. Updating email_queue costs
-- far more per statement than per row (its checks and index predicates are set up for every
-- statement), so the hot path is this narrow table instead; lease rescue applies whatever a dead
-- worker left here, so an email recorded here is never sent again.
CREATE TABLE mailroom.sent_journal (
    email_id            bigint NOT NULL,
    lease_token         uuid NOT NULL,
    sender_account_id   bigint NOT NULL,
    sent_at             timestamptz NOT NULL DEFAULT clock_timestamp(),
    smtp_code           integer,
    enhanced_code       text,
    response            text NOT NULL,
    duration_ms         integer NOT NULL,
    message_id          text,
    worker              text NOT NULL
);
CREATE INDEX sent_journal_token_idx ON mailroom.sent_journal (lease_token);
-- A small, hot table: vacuum it as soon as a few thousand rows went through.
ALTER TABLE mailroom.sent_journal SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0);
