-- Claims, finishes, quota and rescue lock a sender's row FOR NO KEY UPDATE: they still serialise with one
-- another, and no longer make the foreign key checks of every sent-journal insert for that sender wait
-- behind a claim's transaction (a convoy: one slot claiming stalled every slot's journal).

CREATE OR REPLACE FUNCTION mailroom.reserve_quota(sender bigint, wanted integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    acct mailroom.sender_accounts%ROWTYPE;
    last_day mailroom.sender_usage%ROWTYPE;
    cap integer;
    used integer;
    granted integer;
BEGIN
    SELECT * INTO acct FROM mailroom.sender_accounts WHERE id = sender FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF acct.status = 'paused_limit_reached' AND acct.limit_reached_on < today THEN
        acct.status := CASE WHEN acct.warmup_stage > 0 THEN 'warming_up' ELSE 'active' END;
        acct.status_reason := NULL;
        UPDATE mailroom.sender_accounts SET status = acct.status, status_reason = NULL WHERE id = sender;
    END IF;
    IF acct.status NOT IN ('active', 'warming_up') THEN
        RETURN 0;
    END IF;
    IF acct.warmup_stage > 0 AND (acct.warmup_checked_on IS NULL OR acct.warmup_checked_on < today) THEN
        -- Today's row may exist already (bounces counted before the first reservation): not a past day.
        SELECT * INTO last_day FROM mailroom.sender_usage
        WHERE sender_account_id = sender AND day < today
        ORDER BY day DESC LIMIT 1;
        -- The cap that day is today's (only this step changes it, and not since): a daily limit
        -- below the warm-up limit is the cap too, or such an account could never advance.
        IF last_day.day IS NOT NULL AND last_day.sent >= least(acct.daily_limit, acct.warmup_limit) THEN
            IF last_day.bounces * 50 <= last_day.sent THEN
                IF acct.warmup_stage = 5 THEN
                    acct.warmup_stage := 0;
                    acct.status := 'active';
                ELSE
                    acct.warmup_stage := acct.warmup_stage + 1;
                    -- Saturating: an overflow error here would stop every reservation of the account.
                    acct.warmup_limit := least(acct.warmup_limit::bigint * 2, 2147483647);
                END IF;
                acct.status_reason := NULL;
            ELSE
                acct.status_reason := format('warm-up held at stage %s: %s%% bounces on %s',
                    acct.warmup_stage, round(100.0 * last_day.bounces / greatest(last_day.sent, 1), 1),
                    to_char(last_day.day, 'YYYY-MM-DD'));
            END IF;
        END IF;
        UPDATE mailroom.sender_accounts
        SET warmup_stage = acct.warmup_stage, warmup_limit = acct.warmup_limit, status = acct.status,
            status_reason = acct.status_reason, warmup_checked_on = today
        WHERE id = sender;
    END IF;
    cap := CASE WHEN acct.warmup_stage > 0 THEN least(acct.daily_limit, acct.warmup_limit) ELSE acct.daily_limit END;
    INSERT INTO mailroom.sender_usage (sender_account_id, day) VALUES (sender, today)
        ON CONFLICT (sender_account_id, day) DO NOTHING;
    SELECT sent INTO used FROM mailroom.sender_usage WHERE sender_account_id = sender AND day = today;
    granted := greatest(0, least(wanted, cap - used));
    IF granted > 0 THEN
        UPDATE mailroom.sender_usage SET sent = sent + granted WHERE sender_account_id = sender AND day = today;
    END IF;
    IF used + granted >= cap THEN
        UPDATE mailroom.sender_accounts
        SET status = 'paused_limit_reached', limit_reached_on = today,
            status_reason = format('daily limit of %s reached', cap)
        WHERE id = sender;
    END IF;
    RETURN granted;
END $$;

CREATE OR REPLACE FUNCTION mailroom.release_quota(sender bigint, unused integer, reserved_on date) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF unused <= 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM mailroom.sender_accounts WHERE id = sender FOR NO KEY UPDATE;
    UPDATE mailroom.sender_usage SET sent = greatest(0, sent - unused)
    WHERE sender_account_id = sender AND day = reserved_on;
    UPDATE mailroom.sender_accounts
    SET status = CASE WHEN warmup_stage > 0 THEN 'warming_up' ELSE 'active' END, status_reason = NULL
    WHERE id = sender AND status = 'paused_limit_reached' AND limit_reached_on = reserved_on;
END $$;

CREATE OR REPLACE FUNCTION mailroom.rescue_expired_claims() RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    c mailroom.claims%ROWTYPE;
    sent_count integer;
    unused integer;
BEGIN
    FOR c IN SELECT * FROM mailroom.claims WHERE expires_at < now() ORDER BY lease_token
             FOR UPDATE SKIP LOCKED LOOP
        -- The lock order of every claim transaction: claim row, sender row, emails.
        PERFORM 1 FROM mailroom.sender_accounts WHERE id = c.sender_account_id FOR NO KEY UPDATE;
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

COMMENT ON TABLE mailroom.claims IS 'One batch claimed under one lease token for one sender: its lease and the quota reserved for it. Every transaction that touches a claim locks in one order: the claim row, then its sender row (sender_accounts, FOR NO KEY UPDATE), then its emails in id order, so workers claiming, finishing and rescuing at once never deadlock. FOR NO KEY UPDATE, not FOR UPDATE: it serialises claims, finishes and quota of one sender as well, and the share lock a foreign key check takes (a sent-journal row, a send log, a usage row naming the sender) does not wait for it, so one slot''s claim does not stall every other slot''s journal. Ended by the worker or by lease rescue, which return the unused quota with the unsent emails.';
