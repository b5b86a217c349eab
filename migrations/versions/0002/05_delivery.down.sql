DROP FUNCTION IF EXISTS mailroom.release_quota(bigint, integer, date) CASCADE;
-- Restore revision 0001's two-argument release_quota (the upgrade made it a wrapper).
CREATE OR REPLACE FUNCTION mailroom.release_quota(sender bigint, unused integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
BEGIN
    IF unused <= 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    UPDATE mailroom.sender_usage SET sent = greatest(0, sent - unused)
    WHERE sender_account_id = sender AND day = today;
    UPDATE mailroom.sender_accounts
    SET status = CASE WHEN warmup_stage > 0 THEN 'warming_up' ELSE 'active' END, status_reason = NULL
    WHERE id = sender AND status = 'paused_limit_reached' AND limit_reached_on = today;
END $$;
