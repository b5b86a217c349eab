-- Pacing across every worker: each send of a paced account (send_delay_ms > 0) takes the next free
-- slot here, so N worker processes on any number of hosts together keep one send per delay.
-- A table of its own, without triggers: a slot taken per send must not wake the console or bloat
-- the account row.
CREATE TABLE mailroom.sender_pacing (
    sender_account_id   bigint PRIMARY KEY
                        REFERENCES mailroom.sender_accounts (id) ON DELETE CASCADE,
    next_send_at        timestamptz NOT NULL
);
