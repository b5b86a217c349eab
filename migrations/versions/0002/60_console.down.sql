DROP INDEX IF EXISTS mailroom.email_queue_retrying_idx;
DROP INDEX IF EXISTS mailroom.unsubscribe_list_unsubscribed_at_idx;
DROP INDEX IF EXISTS mailroom.click_events_occurred_at_idx;
DROP INDEX IF EXISTS mailroom.open_events_occurred_at_idx;
DROP TRIGGER IF EXISTS click_events_notify ON mailroom.click_events;
DROP TRIGGER IF EXISTS open_events_notify ON mailroom.open_events;
