-- Warm-up advances itself: once per UTC day, at an account's first reservation, its most recent
-- earlier day decides. A day that filled the cap with at most 2% bounces moves it one stage on and
-- doubles its cap (after stage 5 warm-up is over); too many bounces hold it, with the reason; a day
-- under the cap holds it silently. The day it was considered is recorded under the sender row lock,
-- so any number of workers reserving at once advance an account exactly once a day.
ALTER TABLE mailroom.sender_accounts ADD COLUMN warmup_checked_on date;

-- Revision 0001's reservation, with the warm-up step between the status check and the cap.
CREATE OR REPLACE FUNCTION mailroom.reserve_quota(sender bigint, wanted integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    acct mailroom.sender_accounts%ROWTYPE;
    last_day mailroom.sender_usage%ROWTYPE;
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
