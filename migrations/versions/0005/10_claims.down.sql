DROP FUNCTION mailroom.rescue_expired_claims();
DROP FUNCTION mailroom.rescue_unclaimed(bigint);
DROP FUNCTION mailroom.apply_sent_journal(uuid);
DROP TABLE mailroom.claims;
CREATE OR REPLACE FUNCTION mailroom.email_queue_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of mailroom.email_queue is immutable' USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT (
            (OLD.status = 'pending'    AND NEW.status IN ('assigned', 'cancelled', 'suppressed'))
         OR (OLD.status = 'assigned'   AND NEW.status IN ('pending', 'sent', 'failed', 'suppressed'))
         OR (OLD.status = 'failed'     AND NEW.status IN ('pending', 'cancelled'))
         OR (OLD.status = 'suppressed' AND NEW.status IN ('pending', 'cancelled'))
        ) THEN
            RAISE EXCEPTION 'email % cannot move from % to %', OLD.id, OLD.status, NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        CASE NEW.status
            WHEN 'assigned' THEN NEW.assigned_at := now();
            WHEN 'sent' THEN NEW.sent_at := coalesce(NEW.sent_at, now()); NEW.finished_at := now();
            WHEN 'pending' THEN NEW.finished_at := NULL; NEW.suppression_reason := NULL;
            ELSE NEW.finished_at := now();
        END CASE;
        IF NEW.status <> 'assigned' THEN
            NEW.lease_owner := NULL;
            NEW.lease_token := NULL;
            NEW.lease_expires_at := NULL;
        END IF;
    END IF;
    RETURN NEW;
END $$;
