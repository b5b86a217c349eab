-- Dropping a partitioned index drops every partition's index with it.
DROP INDEX mailroom.send_logs_campaign_idx;
DROP INDEX mailroom.send_logs_recipient_idx;
