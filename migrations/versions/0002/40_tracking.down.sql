DROP INDEX IF EXISTS mailroom.unsubscribe_list_campaign_idx;
DROP INDEX IF EXISTS mailroom.email_queue_unsubscribe_token_idx;
ALTER TABLE mailroom.email_queue DROP COLUMN IF EXISTS unsubscribe_token;
