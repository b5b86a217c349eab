DROP FUNCTION mailroom.campaign_mail_policy(text);
ALTER TABLE mailroom.sender_accounts DROP COLUMN postal_address;
DROP TABLE mailroom.campaigns;
