-- Restore revision 0001's reserve_quota (no warm-up step), then drop the day it was last considered.
CREATE OR REPLACE FUNCTION mailroom.reserve_quota(sender bigint, wanted integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    acct mailroom.sender_accounts%ROWTYPE;
    cap integer;
    used integer;
    granted integer;
BEGIN
    SELECT * INTO acct FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF acct.status = 'paused_limit_reached' AND acct.limit_reached_on < today THEN
        acct.status := CASE WHEN acct.warmup_stage > 0 THEN 'warming_up' ELSE 'active' END;
        UPDATE mailroom.sender_accounts SET status = acct.status, status_reason = NULL WHERE id = sender;
    END IF;
    IF acct.status NOT IN ('active', 'warming_up') THEN
        RETURN 0;
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

ALTER TABLE mailroom.sender_accounts DROP COLUMN warmup_checked_on;
