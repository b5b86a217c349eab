-- One recipient's attempts (privacy export and erase, an operator's look at an address's history) and one
-- campaign's, each a probe per month partition instead of a scan of up to two years of them. Made on the
-- partitioned parent, so every partition, present and future, has them. Building them on the existing
-- partitions holds off new send logs until this revision commits (docs/upgrades.md).
CREATE INDEX send_logs_recipient_idx ON mailroom.send_logs (lower(recipient_email), attempted_at);
CREATE INDEX send_logs_campaign_idx ON mailroom.send_logs (campaign_id, attempted_at) WHERE campaign_id IS NOT NULL;
