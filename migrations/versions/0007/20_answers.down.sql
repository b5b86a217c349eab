DROP INDEX mailroom.bounce_events_undigested_idx;
ALTER TABLE mailroom.bounce_events DROP COLUMN digest_id;
DROP TABLE mailroom.complaint_digests;
ALTER TABLE mailroom.sender_accounts DROP COLUMN relay_provider, DROP COLUMN bounce_domain;
DROP INDEX mailroom.bounce_events_campaign_idx;
ALTER TABLE mailroom.bounce_events DROP COLUMN campaign_id, DROP COLUMN sender_account_id;
