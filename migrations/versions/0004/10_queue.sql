-- The idempotency key stays unique, but only keyed email is indexed: a NULL key needs no entry, and
-- an email without one (most email) no longer writes one on enqueue, on claim and on being sent.
-- ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL finds this index.
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_idempotency_key_key;
CREATE UNIQUE INDEX email_queue_idempotency_key_key ON mailroom.email_queue (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
