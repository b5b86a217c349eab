DROP TRIGGER IF EXISTS email_queue_keep_archived ON mailroom.email_queue;
DROP FUNCTION IF EXISTS mailroom.email_queue_keep_archived();
DROP TABLE IF EXISTS mailroom.archived_emails;
DROP INDEX IF EXISTS mailroom.unsubscribe_list_campaign_idx;
DROP INDEX IF EXISTS mailroom.email_queue_unsubscribe_token_idx;
ALTER TABLE mailroom.email_queue DROP COLUMN IF EXISTS unsubscribe_token;
