-- An email's own lifetime: past expires_at it is never sent. The claim fails it (failure_kind
-- 'expired', last_error says which lifetime ended) as it fails email past the queue lifetime, and the
-- worker's sweep fails pending email past either without waiting for it to come due.
ALTER TABLE mailroom.email_queue ADD COLUMN expires_at timestamptz;
COMMENT ON COLUMN mailroom.email_queue.expires_at IS
    'When the email stops being worth sending (a one-time code''s expiry, say): past it, it is failed as expired instead of sent. NULL: only the queue lifetime (MAILROOM_QUEUE_LIFETIME_SECONDS) applies.';
-- The sweep's lookup: only email that has a lifetime of its own, which most has not.
CREATE INDEX email_queue_expires_idx ON mailroom.email_queue (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('pending', 'unrendered');

-- An application cancels its own email (by id or by idempotency key), as long as it is not being sent:
-- pending or unrendered email becomes cancelled; email in any other state is answered with its state,
-- untouched. Another role's email is not found: its ids and keys say nothing to this role.
CREATE FUNCTION mailroom.cancel_my_email(email_id bigint DEFAULT NULL, idempotency_key text DEFAULT NULL)
RETURNS TABLE (id bigint, status text, cancelled boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    done bigint[];
BEGIN
    IF (cancel_my_email.email_id IS NULL) = (cancel_my_email.idempotency_key IS NULL) THEN
        RAISE EXCEPTION 'cancel: name the email by its id or by its idempotency key, one of the two'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- An email being claimed is locked: this waits for the claim, then finds it assigned and leaves it.
    WITH changed AS (
        UPDATE mailroom.email_queue q
        SET status = 'cancelled', last_error = 'cancelled by the application that enqueued it'
        WHERE q.enqueued_by = session_user AND q.status IN ('pending', 'unrendered')
          AND (q.id = cancel_my_email.email_id OR q.idempotency_key = cancel_my_email.idempotency_key)
        RETURNING q.id
    )
    SELECT array_agg(c.id) INTO done FROM changed c;
    RETURN QUERY
    SELECT q.id, q.status, q.id = ANY(coalesce(done, '{}')) FROM mailroom.email_queue q
    WHERE q.enqueued_by = session_user
      AND (q.id = cancel_my_email.email_id OR q.idempotency_key = cancel_my_email.idempotency_key);
END $$;
REVOKE EXECUTE ON FUNCTION mailroom.cancel_my_email FROM PUBLIC;
COMMENT ON FUNCTION mailroom.cancel_my_email(bigint, text) IS
    'Cancel an email the calling role enqueued, named by its id or its idempotency key, while it is pending or unrendered. Returns the email''s id, status and whether this call cancelled it (no row: no such email of this role). Granted to application roles by mailroom.grant_app_role.';
