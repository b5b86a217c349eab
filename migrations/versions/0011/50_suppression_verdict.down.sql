-- Undo 50_suppression_verdict: the list view and mailroom.suppression_reason write the rule out again.
CREATE OR REPLACE VIEW mailroom.suppressions AS
SELECT b.email AS address, b.bounce_type AS kind,
       CASE WHEN b.bounce_type <> 'soft' OR b.bounce_count >= 3 THEN 'all email'
            ELSE 'held a day after each bounce' END AS stops,
       b.reason, coalesce(b.enhanced_code, b.smtp_code::text) AS status, b.bounce_count AS times,
       b.first_bounced_at AS since, b.last_bounced_at AS last_at, b.sender_account_id, b.campaign_id
FROM mailroom.bounce_list b
UNION ALL
SELECT u.email, 'unsubscribe', 'non-transactional email', u.reason, NULL, 1, u.unsubscribed_at,
       u.unsubscribed_at, NULL, u.campaign_id
FROM mailroom.unsubscribe_list u;

CREATE OR REPLACE FUNCTION mailroom.suppression_reason(address text, transactional boolean) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(
        (SELECT CASE WHEN b.bounce_type = 'manual' THEN 'suppressed by an operator (manual)'
                     WHEN b.bounce_type IN ('hard', 'complaint') THEN 'on the bounce list (' || b.bounce_type || ')'
                     WHEN b.bounce_count >= 3 THEN 'on the bounce list (soft, ' || b.bounce_count || ' times)'
                END
         FROM mailroom.bounce_list b WHERE b.email = lower(address)),
        (SELECT 'unsubscribed' FROM mailroom.unsubscribe_list u
         WHERE u.email = lower(address) AND NOT transactional))
$$;
COMMENT ON FUNCTION mailroom.suppression_reason(text, boolean) IS
    'Why email to this address is not sent (hard bounce, complaint, an operator''s suppression, soft three times, or unsubscribed for non-transactional email), NULL when it may be sent.';

DROP FUNCTION mailroom.suppression_verdict(text, integer, boolean, boolean);
