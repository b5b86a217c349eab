DROP TABLE mailroom.workers;
DROP FUNCTION mailroom.close_circuit(bigint);
DROP FUNCTION mailroom.take_probe(bigint, float8);
DROP FUNCTION mailroom.open_circuit(bigint, text, float8, float8);
ALTER TABLE mailroom.sender_accounts
    DROP COLUMN circuit_state, DROP COLUMN circuit_reason, DROP COLUMN circuit_since,
    DROP COLUMN circuit_retry_at, DROP COLUMN circuit_failures, DROP COLUMN connect_timeout_seconds,
    DROP COLUMN command_timeout_seconds, DROP COLUMN data_timeout_seconds;
