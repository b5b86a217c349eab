DROP TABLE mailroom.bounce_quarantine_clients;
DROP INDEX mailroom.bounce_quarantine_received_idx;
COMMENT ON TABLE mailroom.bounce_quarantine IS NULL;
COMMENT ON COLUMN mailroom.bounce_quarantine.raw IS NULL;
ALTER TABLE mailroom.bounce_quarantine DROP COLUMN client;
