-- The console's Overview (issue 4, with issue 7's opens, clicks and unsubscribes per hour).
-- Opens and clicks reach the console like every other change: one notification per statement (the
-- tracker writes its events in group-committed batches, so a flood costs one notification a batch).
CREATE TRIGGER open_events_notify AFTER INSERT ON mailroom.open_events
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
CREATE TRIGGER click_events_notify AFTER INSERT ON mailroom.click_events
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

-- Opens, clicks and unsubscribes of the last 24 hours by time: an index-only range scan of this
-- month's partition (the campaign indexes serve it too, by skip scan, but slow down as campaigns grow),
-- and never the whole (never pruned) unsubscribe list.
CREATE INDEX open_events_occurred_at_idx ON mailroom.open_events (occurred_at);
CREATE INDEX click_events_occurred_at_idx ON mailroom.click_events (occurred_at);
CREATE INDEX unsubscribe_list_unsubscribed_at_idx ON mailroom.unsubscribe_list (unsubscribed_at);

-- Retrying email (pending with attempts behind it) is usually a small share of a large pending set:
-- the Failures screen pages it and the Overview counts it without walking every pending email.
CREATE INDEX email_queue_retrying_idx ON mailroom.email_queue (scheduled_for, id)
    WHERE status = 'pending' AND retry_count > 0;
