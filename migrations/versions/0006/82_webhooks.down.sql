-- Below this part webhooks are no source: their events go with it.
DELETE FROM mailroom.bounce_events WHERE source IN ('webhook', 'postmark', 'sendgrid', 'ses');
ALTER TABLE mailroom.bounce_events DROP CONSTRAINT bounce_events_source_check;
ALTER TABLE mailroom.bounce_events ADD CONSTRAINT bounce_events_source_check
    CHECK (source IN ('dsn', 'arf', 'plain'));
