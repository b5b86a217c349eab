-- The bounce quarantine took up to 256 KiB of every unique message anybody sent to a bounce
-- address, for ever: about 21 GiB a day from one client at the receiver's default rate. It is now
-- bounded three ways, each enforced where a message is quarantined (worker.producers.bounces.effects):
-- a total size (MAILROOM_QUARANTINE_MAX_BYTES), a number of messages per client per UTC day
-- (MAILROOM_QUARANTINE_CLIENT_DAILY_MAX), and an age after which maintenance deletes it
-- (MAILROOM_QUARANTINE_RETENTION_DAYS). Past a limit a message is dropped and counted, not kept.
ALTER TABLE mailroom.bounce_quarantine ADD COLUMN client text;
COMMENT ON COLUMN mailroom.bounce_quarantine.client IS
    'Who handed the message in: the SMTP peer address, pipe, mailbox:<name> or webhook:<provider>; NULL when not known';
COMMENT ON COLUMN mailroom.bounce_quarantine.raw IS
    'The first bytes of the message (64 KiB; raw_size says how long it was)';
COMMENT ON TABLE mailroom.bounce_quarantine IS
    'Reports the bounce intake could not read or trust, kept once each (by digest) for an operator, bounded in size, per client and in age';
-- Maintenance deletes by age.
CREATE INDEX bounce_quarantine_received_idx ON mailroom.bounce_quarantine (received_at);

-- One row per client and UTC day: how many of its messages were kept and how many dropped (over
-- the client's daily limit or with the quarantine full). The limit is read here rather than counted
-- over the quarantine, so a client cannot make each check cost more by sending more.
CREATE TABLE mailroom.bounce_quarantine_clients (
    client text NOT NULL,
    day date NOT NULL,
    kept integer NOT NULL DEFAULT 0 CONSTRAINT bounce_quarantine_clients_kept_not_negative CHECK (kept >= 0),
    dropped integer NOT NULL DEFAULT 0
        CONSTRAINT bounce_quarantine_clients_dropped_not_negative CHECK (dropped >= 0),
    PRIMARY KEY (client, day)
);
COMMENT ON TABLE mailroom.bounce_quarantine_clients IS
    'Quarantined messages kept and dropped per client and UTC day: the per-client limit and what health reports';
COMMENT ON COLUMN mailroom.bounce_quarantine_clients.client IS
    'As bounce_quarantine.client; unknown when the intake was not told';
COMMENT ON COLUMN mailroom.bounce_quarantine_clients.dropped IS
    'Messages not kept: the client was over its daily limit or the quarantine was full';

-- What the quarantine holds, kept exact by statement triggers (whoever inserts or deletes: intake,
-- retention, privacy erasure, an operator), so the bound is checked for each message, and health
-- reads it, in one row instead of a sum over every quarantined message.
CREATE TABLE mailroom.bounce_quarantine_size (
    one boolean PRIMARY KEY DEFAULT true CONSTRAINT bounce_quarantine_size_one_row CHECK (one),
    messages bigint NOT NULL CONSTRAINT bounce_quarantine_size_messages_not_negative CHECK (messages >= 0),
    bytes bigint NOT NULL CONSTRAINT bounce_quarantine_size_bytes_not_negative CHECK (bytes >= 0)
);
COMMENT ON TABLE mailroom.bounce_quarantine_size IS
    'One row: how many messages the bounce quarantine holds and their size (kept bytes and text fields), kept by triggers';
INSERT INTO mailroom.bounce_quarantine_size (messages, bytes)
SELECT count(*), coalesce(sum(octet_length(raw) + octet_length(reason) + coalesce(octet_length(envelope_recipient), 0)
                              + coalesce(octet_length(client), 0)), 0)
FROM mailroom.bounce_quarantine;

CREATE FUNCTION mailroom.bounce_quarantine_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE mailroom.bounce_quarantine_size
        SET messages = messages + c.n, bytes = bytes + c.b
        FROM (SELECT count(*) AS n, coalesce(sum(octet_length(raw) + octet_length(reason)
                                  + coalesce(octet_length(envelope_recipient), 0) + coalesce(octet_length(client), 0)), 0) AS b
              FROM new_rows) c;
    ELSE
        UPDATE mailroom.bounce_quarantine_size
        SET messages = messages - c.n, bytes = bytes - c.b
        FROM (SELECT count(*) AS n, coalesce(sum(octet_length(raw) + octet_length(reason)
                                  + coalesce(octet_length(envelope_recipient), 0) + coalesce(octet_length(client), 0)), 0) AS b
              FROM old_rows) c;
    END IF;
    RETURN NULL;
END;
$$;
COMMENT ON FUNCTION mailroom.bounce_quarantine_count() IS
    'Keeps mailroom.bounce_quarantine_size equal to what bounce_quarantine holds, for inserts and deletes';
CREATE TRIGGER bounce_quarantine_count_inserts AFTER INSERT ON mailroom.bounce_quarantine
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.bounce_quarantine_count();
CREATE TRIGGER bounce_quarantine_count_deletes AFTER DELETE ON mailroom.bounce_quarantine
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.bounce_quarantine_count();
