-- Who a bounce or a complaint counts against: the sender account that sent the email and its
-- campaign, copied from the email when the report is applied (retention deletes sent email long
-- before its bounce record may go). Rates per sender and per campaign read these.
ALTER TABLE mailroom.bounce_events ADD COLUMN sender_account_id bigint, ADD COLUMN campaign_id text;
CREATE INDEX bounce_events_campaign_idx ON mailroom.bounce_events (campaign_id, kind)
    WHERE campaign_id IS NOT NULL;

-- A sender's own bounce domain for its VERP return paths (NULL: MAILROOM_BOUNCE_DOMAIN, and without
-- that the sender's own address), and the relay whose event webhooks report on its email: Mailroom
-- tags each message the way that relay hands back (Postmark metadata, SendGrid unique_args).
ALTER TABLE mailroom.sender_accounts
    ADD COLUMN bounce_domain text CHECK (
        bounce_domain ~ '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$'
        AND length(bounce_domain) <= 253),
    ADD COLUMN relay_provider text CHECK (relay_provider IN ('postmark', 'sendgrid'));

-- One digest of new complaints per period for the administrators, sent through the queue itself.
-- The unique period makes two workers' digests one; each complaint names the digest that told of it,
-- so a complaint committed late (after a later one was digested) is still told in the next digest.
CREATE TABLE mailroom.complaint_digests (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    period_start timestamptz NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    complaints integer NOT NULL CHECK (complaints > 0),
    email_id bigint
);
ALTER TABLE mailroom.bounce_events
    ADD COLUMN digest_id bigint REFERENCES mailroom.complaint_digests (id) ON DELETE SET NULL;
CREATE INDEX bounce_events_undigested_idx ON mailroom.bounce_events (id)
    WHERE kind = 'complaint' AND digest_id IS NULL;
CREATE TRIGGER complaint_digests_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.complaint_digests
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
