-- Bounces and complaints reported by HTTP webhook: the generic one and the providers' own
-- (Postmark, SendGrid, Amazon SES) are sources of bounce events beside DSNs and ARF reports.
ALTER TABLE mailroom.bounce_events DROP CONSTRAINT bounce_events_source_check;
ALTER TABLE mailroom.bounce_events ADD CONSTRAINT bounce_events_source_check
    CHECK (source IN ('dsn', 'arf', 'plain', 'webhook', 'postmark', 'sendgrid', 'ses'));
