-- Undo 30_signatures.sql.
DROP TRIGGER IF EXISTS email_queue_reminder_outcome ON mailroom.email_queue;
DROP FUNCTION IF EXISTS mailroom.reminder_logs_follow_email();
