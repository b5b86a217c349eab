-- Tracking and compliance (issue 7): the one-click unsubscribe token of non-transactional email.
-- It is separate from tracking_token on purpose: the open pixel's URL is fetched by image proxies,
-- security scanners and prefetchers, and knowing it must never be enough to unsubscribe anyone.
ALTER TABLE mailroom.email_queue ADD COLUMN unsubscribe_token uuid;
CREATE UNIQUE INDEX email_queue_unsubscribe_token_idx ON mailroom.email_queue (unsubscribe_token)
    WHERE unsubscribe_token IS NOT NULL;

-- `mailroom campaigns stats` counts a campaign's unsubscribes without scanning the whole list.
CREATE INDEX unsubscribe_list_campaign_idx ON mailroom.unsubscribe_list (campaign_id)
    WHERE campaign_id IS NOT NULL;
