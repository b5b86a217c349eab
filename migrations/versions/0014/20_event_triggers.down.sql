DROP TRIGGER signatures_webhook_events ON mailroom.signatures;
DROP FUNCTION mailroom.signatures_webhook_events();
DROP TRIGGER suppression_events_webhook_events ON mailroom.suppression_events;
DROP FUNCTION mailroom.suppression_events_webhook_events();
DROP TRIGGER click_events_webhook_events ON mailroom.click_events;
DROP TRIGGER open_events_webhook_events ON mailroom.open_events;
DROP FUNCTION mailroom.tracking_webhook_events();
DROP TRIGGER bounce_events_webhook_events ON mailroom.bounce_events;
DROP FUNCTION mailroom.bounce_events_webhook_events();
DROP TRIGGER email_queue_webhook_events ON mailroom.email_queue;
DROP FUNCTION mailroom.email_queue_webhook_events();
CREATE OR REPLACE FUNCTION mailroom.suppression_told(reason text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN reason IS NULL THEN NULL
                WHEN has_table_privilege(session_user, 'mailroom.bounce_list'::regclass, 'SELECT') THEN reason
                ELSE 'suppressed: the address is on the suppression list (an operator can say why)'
           END
$$;
DROP FUNCTION mailroom.suppression_told_to(name, text);
