UPDATE mailroom.send_logs SET outcome = 'transient' WHERE outcome = 'sender_unreachable';
ALTER TABLE mailroom.send_logs DROP CONSTRAINT send_logs_outcome_check;
ALTER TABLE mailroom.send_logs ADD CONSTRAINT send_logs_outcome_check
    CHECK (outcome IN ('sent', 'transient', 'permanent', 'bounced', 'auth_failed', 'local_error', 'suppressed'));
DROP TABLE mailroom.workers;
DROP FUNCTION mailroom.close_circuit(bigint);
DROP FUNCTION mailroom.take_probe(bigint, float8);
DROP FUNCTION mailroom.open_circuit(bigint, text, float8, float8);
ALTER TABLE mailroom.sender_accounts
    DROP COLUMN circuit_state, DROP COLUMN circuit_reason, DROP COLUMN circuit_since,
    DROP COLUMN circuit_retry_at, DROP COLUMN circuit_failures, DROP COLUMN connect_timeout_seconds,
    DROP COLUMN command_timeout_seconds, DROP COLUMN data_timeout_seconds;
