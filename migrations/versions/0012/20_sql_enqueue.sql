-- The SQL function takes every field the Python API takes: campaign_id, transactional and track too.
-- Email that needs campaign dress (an unsubscribe link and headers, open and click tracking) is stored
-- `unrendered` with what was asked in `dress`, and the worker's renderer applies it with the same code
-- as the Python API (worker.core.email_rows.prepare), as it renders a template: link rewriting and the
-- campaign's policy are Python's, written once.
ALTER TABLE mailroom.email_queue ADD COLUMN dress jsonb;
COMMENT ON COLUMN mailroom.email_queue.dress IS
    'For email enqueued from SQL that needs campaign dress: what the worker applies when it renders it ({"track": true, false or null}; null: as MAILROOM_TRACK_CAMPAIGNS says). NULL once applied, and for email enqueued from Python, which is dressed at enqueue.';
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_dress_object
    CHECK (dress IS NULL OR (jsonb_typeof(dress) = 'object' AND status IN ('unrendered', 'failed', 'cancelled')));
-- Unrendered: a template to render or dress to apply, or both.
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_unrendered_has_template;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_unrendered_has_work
    CHECK (status <> 'unrendered' OR template IS NOT NULL OR dress IS NOT NULL);

-- Retrying an email the renderer failed renders it again: one without a body (a template's), and one
-- whose dress was never applied (it would otherwise leave without its unsubscribe link).
CREATE OR REPLACE FUNCTION mailroom.email_queue_before_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of mailroom.email_queue is immutable' USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    IF NEW.status = 'pending' AND OLD.status = 'failed'
       AND ((NEW.text_body IS NULL AND NEW.html_body IS NULL) OR NEW.dress IS NOT NULL) THEN
        NEW.status := 'unrendered';  -- retrying an email the renderer failed: render (and dress) it again
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT (
            (OLD.status = 'unrendered' AND NEW.status IN ('pending', 'failed', 'cancelled'))
         OR (OLD.status = 'failed'     AND NEW.status = 'unrendered')
         OR (OLD.status = 'pending'    AND NEW.status IN ('assigned', 'cancelled', 'suppressed', 'failed'))
         OR (OLD.status = 'assigned'   AND NEW.status IN ('pending', 'sent', 'failed', 'suppressed'))
         OR (OLD.status = 'failed'     AND NEW.status IN ('pending', 'cancelled'))
         OR (OLD.status = 'suppressed' AND NEW.status IN ('pending', 'cancelled'))
         OR (OLD.status = 'sent'       AND NEW.status = 'bounced')
        ) THEN
            RAISE EXCEPTION 'email % cannot move from % to %', OLD.id, OLD.status, NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        CASE NEW.status
            WHEN 'assigned' THEN NEW.assigned_at := now();
            WHEN 'sent' THEN NEW.sent_at := coalesce(NEW.sent_at, now()); NEW.finished_at := now();
            WHEN 'pending', 'unrendered' THEN NEW.finished_at := NULL; NEW.suppression_reason := NULL;
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

-- The SQL function, with every field of the Python API. Its old signature goes (a new argument list is
-- a new function); the roles that could call it are granted the new one in 90_regrant.
DROP FUNCTION mailroom.enqueue(text[], text, text, text, text, text[], text[], text[], jsonb, text, timestamptz,
                               integer, integer, text, text, text, jsonb, text);
CREATE FUNCTION mailroom.enqueue(
    recipients text[],
    subject text DEFAULT NULL,
    text_body text DEFAULT NULL,
    html_body text DEFAULT NULL,
    to_name text DEFAULT NULL,
    cc text[] DEFAULT NULL,
    bcc text[] DEFAULT NULL,
    reply_to text[] DEFAULT NULL,
    headers jsonb DEFAULT '{}',
    idempotency_key text DEFAULT NULL,
    scheduled_for timestamptz DEFAULT NULL,
    priority integer DEFAULT 0,
    max_retries integer DEFAULT NULL,
    reference_type text DEFAULT NULL,
    reference_id text DEFAULT NULL,
    template text DEFAULT NULL,
    template_data jsonb DEFAULT NULL,
    locale text DEFAULT NULL,
    campaign_id text DEFAULT NULL,
    transactional boolean DEFAULT NULL,
    track boolean DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    bad text;
    is_transactional boolean := coalesce(enqueue.transactional, enqueue.campaign_id IS NULL);
    -- As worker.core.email_rows.dressed: tracking asked for, or an unsubscribe link owed.
    dressed boolean := coalesce(enqueue.track, false) OR NOT coalesce(enqueue.transactional, enqueue.campaign_id IS NULL);
BEGIN
    bad := CASE
        WHEN recipients IS NULL OR cardinality(recipients) = 0 THEN 'recipients: at least one To address is required'
        WHEN array_ndims(recipients) <> 1 THEN 'recipients: a list of addresses, one dimension'
        WHEN template IS NOT NULL AND template !~ '^[a-z][a-z0-9_]{0,63}$' THEN 'template: not a template name'
        WHEN template IS NOT NULL AND template_data IS NOT NULL AND jsonb_typeof(template_data) <> 'object'
            THEN 'template_data: must be a JSON object'
        WHEN template IS NULL AND template_data IS NOT NULL THEN 'template_data: data is only used with a template'
        WHEN locale IS NOT NULL AND locale !~ '^[a-z]{2}(-[A-Z]{2})?$' THEN 'locale: like en or pt-BR'
        WHEN template IS NULL AND subject IS NULL THEN 'subject: a subject is required (or a template)'
        WHEN template IS NULL AND coalesce(btrim(text_body), '') = '' AND coalesce(btrim(html_body), '') = ''
            THEN 'text_body: a body is required: text_body, html_body or both (or a template)'
        WHEN headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN 'headers: must be a JSON object of name to text'
        WHEN priority IS NULL OR priority NOT BETWEEN -1000 AND 1000 THEN 'priority: must be between -1000 and 1000'
        WHEN max_retries NOT BETWEEN 0 AND 100 THEN 'max_retries: must be between 0 and 100'
        WHEN length(idempotency_key) NOT BETWEEN 1 AND 255 THEN 'idempotency_key: must be 1 to 255 characters'
        WHEN length(enqueue.campaign_id) NOT BETWEEN 1 AND 100 THEN 'campaign_id: must be 1 to 100 characters'
    END;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '%', bad USING ERRCODE = 'invalid_parameter_value', COLUMN = split_part(bad, ':', 1);
    END IF;
    -- The key is looked up among this role's email only: another role's key is neither returned nor
    -- in the way (the unique index is per role), so the answer says nothing about other applications.
    INSERT INTO mailroom.email_queue AS q (
        recipient_email, to_extra, cc, bcc, reply_to, recipient_name, subject, text_body, html_body, headers,
        priority, scheduled_for, max_retries, idempotency_key, campaign_id, transactional, reference_type,
        reference_id, created_by, enqueued_by, status, template, template_data, locale, dress)
    VALUES (
        mailroom.normalise_address(recipients[1]),
        mailroom.normalise_addresses(recipients[2:]),
        mailroom.normalise_addresses(cc), mailroom.normalise_addresses(bcc),
        mailroom.normalise_addresses(reply_to),
        to_name, coalesce(btrim(subject, E' \t'), ''), text_body, html_body, coalesce(headers, '{}'), priority,
        coalesce(scheduled_for, now()), coalesce(max_retries, 5), idempotency_key, enqueue.campaign_id,
        is_transactional, reference_type, reference_id, session_user, session_user,
        CASE WHEN template IS NULL AND NOT dressed THEN 'pending' ELSE 'unrendered' END, template, template_data,
        locale, CASE WHEN dressed THEN jsonb_build_object('track', enqueue.track) END)
    ON CONFLICT (enqueued_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING q.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT e.id INTO new_id FROM mailroom.email_queue e
        WHERE e.enqueued_by = session_user AND e.idempotency_key = enqueue.idempotency_key;
    END IF;
    RETURN new_id;
END $$;
REVOKE EXECUTE ON FUNCTION mailroom.enqueue FROM PUBLIC;
COMMENT ON FUNCTION mailroom.enqueue IS
    'Enqueue an email from SQL, in the caller''s transaction, with every field the Python API takes; returns its id (the first email''s for a repeated idempotency key). Email with a template, or with campaign dress (not transactional, or tracked), is stored unrendered and the worker renders and dresses it as the Python API would. 22023: a bad argument; 23514: content the rules refuse.';
