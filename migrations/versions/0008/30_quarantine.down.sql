DROP TRIGGER bounce_quarantine_count_deletes ON mailroom.bounce_quarantine;
DROP TRIGGER bounce_quarantine_count_inserts ON mailroom.bounce_quarantine;
DROP FUNCTION mailroom.bounce_quarantine_count();
DROP TABLE mailroom.bounce_quarantine_size;
DROP TABLE mailroom.bounce_quarantine_clients;
DROP INDEX mailroom.bounce_quarantine_received_idx;
COMMENT ON TABLE mailroom.bounce_quarantine IS NULL;
COMMENT ON COLUMN mailroom.bounce_quarantine.raw IS NULL;
ALTER TABLE mailroom.bounce_quarantine DROP COLUMN client;
