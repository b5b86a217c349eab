-- A claim is one batch under one lease token for one sender: its lease and the quota reserved for it
-- live here, beside its emails. The claim row is locked before its emails (finish and rescue alike),
-- so the two never deadlock, and the quota it did not use goes back in the transaction that returns
-- its emails, whoever ends it.
CREATE TABLE mailroom.claims (
    lease_token         uuid PRIMARY KEY,
    sender_account_id   bigint NOT NULL REFERENCES mailroom.sender_accounts (id) ON DELETE CASCADE,
    owner               text NOT NULL,
    day                 date NOT NULL,
    reserved            integer NOT NULL CHECK (reserved >= 0),
    used                integer NOT NULL DEFAULT 0 CHECK (used >= 0),  -- permanent refusals (sends are journalled)
    created_at          timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL
);
CREATE INDEX claims_expires_idx ON mailroom.claims (expires_at);

-- Return every expired claim: lock the claim, then its emails, then look (each statement below sees
-- what was committed before its locks were granted, so a send journalled by the late owner a moment
-- earlier is applied, never sent again); apply its journal, return the rest to the queue and give
-- back the quota neither a send nor a permanent refusal used. Emails under an expired lease without
-- a claim row (claimed by a worker of an earlier revision) are returned as before. Returns the ids
-- of the emails returned to the queue.
CREATE FUNCTION mailroom.rescue_expired_claims() RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    c mailroom.claims%ROWTYPE;
    sent_count integer;
    unused integer;
BEGIN
    FOR c IN SELECT * FROM mailroom.claims WHERE expires_at < now() ORDER BY lease_token
             FOR UPDATE SKIP LOCKED LOOP
        -- The lock order of every claim transaction: claim row, sender row, emails.
        PERFORM 1 FROM mailroom.sender_accounts WHERE id = c.sender_account_id FOR UPDATE;
        PERFORM 1 FROM mailroom.email_queue WHERE lease_token = c.lease_token AND status = 'assigned'
        ORDER BY id FOR UPDATE;
        sent_count := mailroom.apply_sent_journal(c.lease_token);
        RETURN QUERY
            WITH returned AS (
                UPDATE mailroom.email_queue q
                SET status = 'pending',
                    last_error = 'lease expired: worker ' || q.lease_owner || ' stopped answering'
                WHERE q.lease_token = c.lease_token AND q.status = 'assigned'
                RETURNING q.id
            )
            SELECT id FROM returned;
        unused := c.reserved - c.used - sent_count;
        IF unused > 0 THEN
            PERFORM mailroom.release_quota(c.sender_account_id, unused, c.day);
        END IF;
        DELETE FROM mailroom.claims WHERE lease_token = c.lease_token;
    END LOOP;
    -- Leases without a claim row.
    RETURN QUERY
        WITH expired AS (
            SELECT q.id FROM mailroom.email_queue q
            WHERE q.status = 'assigned' AND q.lease_expires_at < now()
              AND NOT EXISTS (SELECT 1 FROM mailroom.claims c2 WHERE c2.lease_token = q.lease_token)
            ORDER BY q.id FOR UPDATE SKIP LOCKED
        )
        SELECT e.id FROM expired e WHERE mailroom.rescue_unclaimed(e.id);
END $$;

-- Apply a claim's journalled sends to the queue and the attempt log; how many there were.
CREATE FUNCTION mailroom.apply_sent_journal(token uuid) RETURNS integer
LANGUAGE sql AS $$
    WITH j AS (
        DELETE FROM mailroom.sent_journal WHERE lease_token = token RETURNING *
    ), done AS (
        UPDATE mailroom.email_queue q
        SET status = 'sent', sent_at = j.sent_at, message_id = coalesce(j.message_id, q.message_id),
            sender_account_id = j.sender_account_id
        FROM j
        WHERE q.id = j.email_id AND q.lease_token = j.lease_token AND q.status = 'assigned'
        RETURNING q.id, q.recipient_email, q.campaign_id, q.retry_count, j.sent_at, j.sender_account_id,
                  j.smtp_code, j.enhanced_code, j.response, j.duration_ms, j.worker
    ), logged AS (
        INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, campaign_id,
                                        attempt, outcome, smtp_code, enhanced_code, response, duration_ms, worker)
        SELECT sent_at, id, sender_account_id, recipient_email, campaign_id, retry_count + 1, 'sent', smtp_code,
               enhanced_code, response, duration_ms, worker
        FROM done
        RETURNING 1
    )
    SELECT count(*)::integer FROM logged
$$;

-- One email under an expired lease and no claim row (locked by the caller): its journalled send
-- applied, else back to the queue. True when it went back to the queue.
CREATE FUNCTION mailroom.rescue_unclaimed(email bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    token uuid;
BEGIN
    SELECT lease_token INTO token FROM mailroom.email_queue WHERE id = email AND status = 'assigned';
    IF token IS NULL THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM mailroom.sent_journal WHERE email_id = email AND lease_token = token) THEN
        PERFORM mailroom.apply_sent_journal(token);
        RETURN false;
    END IF;
    UPDATE mailroom.email_queue
    SET status = 'pending', last_error = 'lease expired: worker ' || lease_owner || ' stopped answering'
    WHERE id = email;
    RETURN true;
END $$;

-- Email that outlived the queue lifetime may fail straight from pending (reason "expired").
CREATE OR REPLACE FUNCTION mailroom.email_queue_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of mailroom.email_queue is immutable' USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT (
            (OLD.status = 'pending'    AND NEW.status IN ('assigned', 'cancelled', 'suppressed', 'failed'))
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
