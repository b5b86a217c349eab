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
