DROP TABLE mailroom.recipient_outcomes;
ALTER TABLE mailroom.email_queue DROP COLUMN to_extra, DROP COLUMN cc, DROP COLUMN bcc, DROP COLUMN reply_to;
