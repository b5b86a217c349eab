-- Quota is handed back to the UTC day it was reserved on. A batch reserved at 23:59:59 and released
-- after midnight used to refund the new day's counter (letting that day exceed its limit) and never
-- the old one's. Workers now pass the day their reservation was made on.
CREATE FUNCTION mailroom.release_quota(sender bigint, unused integer, reserved_on date) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF unused <= 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    UPDATE mailroom.sender_usage SET sent = greatest(0, sent - unused)
    WHERE sender_account_id = sender AND day = reserved_on;
    UPDATE mailroom.sender_accounts
    SET status = CASE WHEN warmup_stage > 0 THEN 'warming_up' ELSE 'active' END, status_reason = NULL
    WHERE id = sender AND status = 'paused_limit_reached' AND limit_reached_on = reserved_on;
END $$;

-- The two-argument form (revision 0001's workers) keeps working during a rolling upgrade: it means today.
CREATE OR REPLACE FUNCTION mailroom.release_quota(sender bigint, unused integer) RETURNS void
LANGUAGE sql AS $$
    SELECT mailroom.release_quota(sender, unused, (now() AT TIME ZONE 'UTC')::date)
$$;
