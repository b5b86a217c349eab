-- Campaign mail as inbox providers expect it: a postal address per sender account or per campaign
-- (CAN-SPAM asks for one in every commercial email), a List-Id per campaign (RFC 2919) and open
-- tracking switchable per campaign. The global postal address is a setting (MAILROOM_POSTAL_ADDRESS).

CREATE TABLE mailroom.campaigns (
    campaign_id     text PRIMARY KEY
                    CONSTRAINT campaigns_campaign_id_length CHECK (length(campaign_id) BETWEEN 1 AND 100),
    list_id         text
                    CONSTRAINT campaigns_list_id_dot_atom CHECK (
                        length(list_id) <= 255
                        AND list_id ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)+$'),
    postal_address  text
                    CONSTRAINT campaigns_postal_address_plain_text CHECK (
                        length(btrim(postal_address)) BETWEEN 5 AND 300
                        AND postal_address !~ '[\u0001-\u001f\u007f-\u009f]'),
    track_opens     boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE mailroom.campaigns IS
    'How the email of one campaign (email_queue.campaign_id) is dressed: its List-Id, its postal address and whether it carries an open pixel. A campaign without a row uses the defaults.';
COMMENT ON COLUMN mailroom.campaigns.list_id IS
    'RFC 2919 list identifier written as List-Id: <list_id>; NULL: derived from the campaign id and the From domain.';
COMMENT ON COLUMN mailroom.campaigns.postal_address IS
    'Physical postal address shown in the footer of this campaign''s email, before the sender account''s and MAILROOM_POSTAL_ADDRESS.';
COMMENT ON COLUMN mailroom.campaigns.track_opens IS
    'Whether campaign email enqueued from now on carries the open-tracking pixel (click tracking is the email''s own choice).';

CREATE TRIGGER campaigns_touch BEFORE UPDATE ON mailroom.campaigns
    FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();
COMMENT ON TRIGGER campaigns_touch ON mailroom.campaigns IS 'updated_at follows every change; created_at is never rewritten.';

ALTER TABLE mailroom.sender_accounts ADD COLUMN postal_address text
    CONSTRAINT sender_accounts_postal_address_plain_text CHECK (
        length(btrim(postal_address)) BETWEEN 5 AND 300
        AND postal_address !~ '[\u0001-\u001f\u007f-\u009f]');
COMMENT ON COLUMN mailroom.sender_accounts.postal_address IS
    'Physical postal address shown in the footer of campaign email this account sends, unless the campaign has its own.';

-- Enqueue asks this (any role may: it tells only two facts about a campaign, never an address).
CREATE FUNCTION mailroom.campaign_mail_policy(campaign text, OUT track_opens boolean, OUT has_postal_address boolean)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, mailroom AS $$
    SELECT coalesce((SELECT c.track_opens FROM mailroom.campaigns c WHERE c.campaign_id = campaign), true),
           EXISTS (SELECT 1 FROM mailroom.campaigns c
                   WHERE c.campaign_id = campaign AND c.postal_address IS NOT NULL)
           OR coalesce((SELECT bool_and(s.postal_address IS NOT NULL) FROM mailroom.sender_accounts s), false)
$$;
COMMENT ON FUNCTION mailroom.campaign_mail_policy(text) IS
    'For enqueue: whether the campaign''s email carries an open pixel, and whether a postal address is known for it (its own, or every sender account has one; the global setting is checked by the caller).';
