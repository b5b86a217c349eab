DROP INDEX mailroom.email_queue_idempotency_key_key;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_idempotency_key_key UNIQUE (idempotency_key);
