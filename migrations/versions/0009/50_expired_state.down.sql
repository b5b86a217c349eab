-- Undo 50_expired_state.sql: an expired email is again one whose last_error is the queue lifetime's sentence.
DROP TRIGGER email_queue_clear_failure_kind ON mailroom.email_queue;
DROP FUNCTION mailroom.email_queue_clear_failure_kind();
ALTER TABLE mailroom.email_queue DROP COLUMN failure_kind;
