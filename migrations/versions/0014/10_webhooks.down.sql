DROP FUNCTION mailroom.webhooks_listening();
DROP TABLE mailroom.webhook_deliveries;
DROP TABLE mailroom.webhook_events;
DROP FUNCTION mailroom.webhook_events_fan_out();
DROP TABLE mailroom.webhook_endpoints;
