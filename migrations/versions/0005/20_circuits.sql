-- A sender's circuit: closed while its relay answers; open (with the reason, since when and when to
-- look again) after a sender-level fault -- connection refused, TLS, greeting or command timeout,
-- MAIL FROM refused again and again -- so its email waits uncharged while other senders deliver;
-- half-open while one worker probes it with a single email. Backoff doubles per failure up to a cap.
ALTER TABLE mailroom.sender_accounts
    ADD COLUMN circuit_state text NOT NULL DEFAULT 'closed'
        CHECK (circuit_state IN ('closed', 'open', 'half_open')),
    ADD COLUMN circuit_reason text CHECK (length(circuit_reason) <= 500),
    ADD COLUMN circuit_since timestamptz,
    ADD COLUMN circuit_retry_at timestamptz,
    ADD COLUMN circuit_failures integer NOT NULL DEFAULT 0 CHECK (circuit_failures >= 0),
    -- SMTP timeouts of this account (NULL: the worker's MAILROOM_SMTP_*_TIMEOUT_SECONDS)
    ADD COLUMN connect_timeout_seconds real CHECK (connect_timeout_seconds > 0),
    ADD COLUMN command_timeout_seconds real CHECK (command_timeout_seconds > 0),
    ADD COLUMN data_timeout_seconds real CHECK (data_timeout_seconds > 0),
    ADD CHECK ((circuit_state = 'closed') = (circuit_since IS NULL)),
    ADD CHECK (circuit_state = 'closed' OR circuit_retry_at IS NOT NULL);

-- Open (or keep open) the circuit after a sender-level fault; true when it was closed until now.
CREATE FUNCTION mailroom.open_circuit(sender bigint, reason text, base_seconds float8, cap_seconds float8)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    was text;
BEGIN
    SELECT circuit_state INTO was FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE mailroom.sender_accounts
    SET circuit_state = 'open',
        circuit_reason = left(reason, 500),
        circuit_since = coalesce(circuit_since, now()),
        circuit_failures = circuit_failures + 1,
        circuit_retry_at = now() + make_interval(
            secs => least(cap_seconds, base_seconds * power(2, least(circuit_failures, 30))))
    WHERE id = sender;
    RETURN was = 'closed';
END $$;

-- Take the one probe of an open circuit whose backoff has passed: half-open for `hold_seconds`, during
-- which no other worker probes. True for the worker that got it.
CREATE FUNCTION mailroom.take_probe(sender bigint, hold_seconds float8) RETURNS boolean
LANGUAGE sql AS $$
    WITH taken AS (
        UPDATE mailroom.sender_accounts
        SET circuit_state = 'half_open', circuit_retry_at = now() + make_interval(secs => hold_seconds)
        WHERE id = sender AND circuit_state <> 'closed' AND circuit_retry_at <= now()
        RETURNING id
    )
    SELECT EXISTS (SELECT 1 FROM taken)
$$;

-- The relay answered: close the circuit; true when it was open until now.
CREATE FUNCTION mailroom.close_circuit(sender bigint) RETURNS boolean
LANGUAGE sql AS $$
    WITH closed AS (
        UPDATE mailroom.sender_accounts
        SET circuit_state = 'closed', circuit_reason = NULL, circuit_since = NULL, circuit_retry_at = NULL,
            circuit_failures = 0
        WHERE id = sender AND circuit_state <> 'closed'
        RETURNING id
    )
    SELECT EXISTS (SELECT 1 FROM closed)
$$;

-- Workers say they are alive; health asks whether any is while email is due.
CREATE TABLE mailroom.workers (
    name        text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    started_at  timestamptz NOT NULL DEFAULT now(),
    seen_at     timestamptz NOT NULL DEFAULT now()
);

-- An attempt the relay failed (its circuit opened) is logged as such; the email was not charged.
ALTER TABLE mailroom.send_logs DROP CONSTRAINT send_logs_outcome_check;
ALTER TABLE mailroom.send_logs ADD CONSTRAINT send_logs_outcome_check
    CHECK (outcome IN ('sent', 'transient', 'permanent', 'bounced', 'auth_failed', 'local_error', 'suppressed',
                       'sender_unreachable'));
