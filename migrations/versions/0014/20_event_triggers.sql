-- What a role is told of a suppression, for any role (an event is written while another role is
-- connected): the one rule mailroom.suppression_told applies to the connected role.
CREATE FUNCTION mailroom.suppression_told_to(role_name name, reason text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN reason IS NULL THEN NULL
                WHEN NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = role_name) THEN
                    'suppressed: the address is on the suppression list (an operator can say why)'
                WHEN pg_catalog.has_table_privilege(role_name, 'mailroom.bounce_list'::regclass, 'SELECT') THEN reason
                ELSE 'suppressed: the address is on the suppression list (an operator can say why)'
           END
$$;
COMMENT ON FUNCTION mailroom.suppression_told_to(name, text) IS
    'What a role is told of a suppression: the reason when it may read the suppression list (SELECT on mailroom.bounce_list), else only that the address is on it.';

CREATE OR REPLACE FUNCTION mailroom.suppression_told(reason text) RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT mailroom.suppression_told_to(session_user, reason)
$$;

-- An email's outcome: sent, bounced (after it was sent), failed, expired, suppressed or cancelled.
CREATE FUNCTION mailroom.email_queue_webhook_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT mailroom.webhooks_listening() THEN
        RETURN NULL;
    END IF;
    INSERT INTO mailroom.webhook_events (type, email_id, owner, idempotency_key, recipient, data)
    SELECT 'email.' || CASE WHEN n.status = 'failed' AND n.failure_kind = 'expired' THEN 'expired' ELSE n.status END,
           n.id, n.enqueued_by, n.idempotency_key, n.recipient_email,
           jsonb_strip_nulls(jsonb_build_object(
               'status', n.status, 'campaign_id', n.campaign_id, 'attempts', n.retry_count,
               'sent_at', n.sent_at,
               'reason', CASE n.status
                   WHEN 'suppressed' THEN mailroom.suppression_told_to(n.enqueued_by, n.suppression_reason)
                   WHEN 'failed' THEN left(n.last_error, 500)
                   WHEN 'bounced' THEN left(n.last_error, 500)
               END))
    FROM new_rows n
    JOIN old_rows o ON o.id = n.id
    WHERE n.status IS DISTINCT FROM o.status
      AND n.status IN ('sent', 'bounced', 'failed', 'suppressed', 'cancelled')
    ORDER BY n.id;
    RETURN NULL;
END $$;
CREATE TRIGGER email_queue_webhook_events AFTER UPDATE ON mailroom.email_queue
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_webhook_events();
COMMENT ON FUNCTION mailroom.email_queue_webhook_events() IS
    'Statement trigger: an event for each email whose status became sent, bounced, failed (expired when it outlived its lifetime), suppressed or cancelled, while an endpoint listens.';
COMMENT ON TRIGGER email_queue_webhook_events ON mailroom.email_queue IS
    'Writes mailroom.webhook_events for the emails whose outcome this statement decided.';

-- A complaint (an ARF report or a provider's webhook) about an email still in the queue.
CREATE FUNCTION mailroom.bounce_events_webhook_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT mailroom.webhooks_listening() THEN
        RETURN NULL;
    END IF;
    -- Wait for a transaction deciding the email's outcome (the worker applying what it sent): the
    -- event's id then follows it, and an endpoint gets the email's events in the order they happened.
    PERFORM FROM mailroom.email_queue WHERE id IN (SELECT email_id FROM new_rows) ORDER BY id FOR SHARE;
    INSERT INTO mailroom.webhook_events (type, email_id, owner, idempotency_key, recipient, data)
    SELECT 'email.complained', b.email_id, q.enqueued_by, q.idempotency_key, b.recipient,
           jsonb_strip_nulls(jsonb_build_object('source', b.source, 'feedback_type', b.status,
                                                'campaign_id', b.campaign_id))
    FROM new_rows b
    LEFT JOIN mailroom.email_queue q ON q.id = b.email_id
    WHERE b.kind = 'complaint' AND b.email_id IS NOT NULL
    ORDER BY b.id;
    RETURN NULL;
END $$;
CREATE TRIGGER bounce_events_webhook_events AFTER INSERT ON mailroom.bounce_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.bounce_events_webhook_events();
COMMENT ON FUNCTION mailroom.bounce_events_webhook_events() IS
    'Statement trigger: an email.complained event for each complaint about a known email, while an endpoint listens.';
COMMENT ON TRIGGER bounce_events_webhook_events ON mailroom.bounce_events IS
    'Writes mailroom.webhook_events for complaints.';

-- Opens and clicks, as the tracker records them (a fetch, not a reader: image proxies fetch too).
CREATE FUNCTION mailroom.tracking_webhook_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT mailroom.webhooks_listening() THEN
        RETURN NULL;
    END IF;
    -- Wait for a transaction deciding the email's outcome (the worker applying what it sent): the
    -- event's id then follows it, and an endpoint gets the email's events in the order they happened.
    PERFORM FROM mailroom.email_queue WHERE id IN (SELECT email_id FROM new_rows) ORDER BY id FOR SHARE;
    IF TG_TABLE_NAME = 'open_events' THEN
        INSERT INTO mailroom.webhook_events (type, email_id, owner, idempotency_key, recipient, data)
        SELECT 'email.opened', t.email_id, q.enqueued_by, q.idempotency_key, q.recipient_email,
               jsonb_strip_nulls(jsonb_build_object('campaign_id', t.campaign_id))
        FROM new_rows t LEFT JOIN mailroom.email_queue q ON q.id = t.email_id
        ORDER BY t.id;
    ELSE
        INSERT INTO mailroom.webhook_events (type, email_id, owner, idempotency_key, recipient, data)
        SELECT 'email.clicked', t.email_id, q.enqueued_by, q.idempotency_key, q.recipient_email,
               jsonb_strip_nulls(jsonb_build_object('campaign_id', t.campaign_id, 'url', (to_jsonb(t) ->> 'url')))
        FROM new_rows t LEFT JOIN mailroom.email_queue q ON q.id = t.email_id
        ORDER BY t.id;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER open_events_webhook_events AFTER INSERT ON mailroom.open_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.tracking_webhook_events();
CREATE TRIGGER click_events_webhook_events AFTER INSERT ON mailroom.click_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.tracking_webhook_events();
COMMENT ON FUNCTION mailroom.tracking_webhook_events() IS
    'Statement trigger of open_events and click_events: an email.opened or email.clicked event (with the URL) for each, while an endpoint listens.';
COMMENT ON TRIGGER open_events_webhook_events ON mailroom.open_events IS 'Writes mailroom.webhook_events for opens.';
COMMENT ON TRIGGER click_events_webhook_events ON mailroom.click_events IS 'Writes mailroom.webhook_events for clicks.';

-- An unsubscribe that names the email it came from (the one-click POST, the page, a mailto reply).
CREATE FUNCTION mailroom.suppression_events_webhook_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT mailroom.webhooks_listening() THEN
        RETURN NULL;
    END IF;
    -- Wait for a transaction deciding the email's outcome (the worker applying what it sent): the
    -- event's id then follows it, and an endpoint gets the email's events in the order they happened.
    PERFORM FROM mailroom.email_queue WHERE id IN (SELECT email_id FROM new_rows) ORDER BY id FOR SHARE;
    INSERT INTO mailroom.webhook_events (type, email_id, owner, idempotency_key, recipient, data)
    SELECT 'email.unsubscribed', s.email_id, q.enqueued_by, q.idempotency_key, s.address,
           jsonb_strip_nulls(jsonb_build_object('source', s.source, 'campaign_id', s.campaign_id))
    FROM new_rows s LEFT JOIN mailroom.email_queue q ON q.id = s.email_id
    WHERE s.kind = 'unsubscribe' AND s.change = 'listed' AND s.email_id IS NOT NULL
    ORDER BY s.id;
    RETURN NULL;
END $$;
CREATE TRIGGER suppression_events_webhook_events AFTER INSERT ON mailroom.suppression_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.suppression_events_webhook_events();
COMMENT ON FUNCTION mailroom.suppression_events_webhook_events() IS
    'Statement trigger: an email.unsubscribed event for each unsubscribe that names its email, while an endpoint listens.';
COMMENT ON TRIGGER suppression_events_webhook_events ON mailroom.suppression_events IS
    'Writes mailroom.webhook_events for unsubscribes.';

-- A signed document acknowledgement: nobody's email, so only operators' endpoints receive it.
CREATE FUNCTION mailroom.signatures_webhook_events() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF NOT mailroom.webhooks_listening() THEN
        RETURN NULL;
    END IF;
    INSERT INTO mailroom.webhook_events (type, data)
    SELECT 'document.signed', jsonb_build_object('doc_id', s.doc_id, 'seq', s.seq, 'signed_at', s.signed_at)
    FROM new_rows s
    ORDER BY s.id;
    RETURN NULL;
END $$;
CREATE TRIGGER signatures_webhook_events AFTER INSERT ON mailroom.signatures
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signatures_webhook_events();
COMMENT ON FUNCTION mailroom.signatures_webhook_events() IS
    'Statement trigger: a document.signed event for each signature, while an endpoint listens (operators'' endpoints only).';
COMMENT ON TRIGGER signatures_webhook_events ON mailroom.signatures IS 'Writes mailroom.webhook_events for signatures.';
