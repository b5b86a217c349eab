-- Back to the old signature: the roles that may call the new one are granted the old one.
CREATE TEMP TABLE mailroom_app_roles ON COMMIT DROP AS
SELECT DISTINCT a.grantee::regrole::name AS role_name
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid = 'mailroom.enqueue'::regproc AND a.privilege_type = 'EXECUTE'
  AND a.grantee <> p.proowner AND a.grantee <> 0;
DROP FUNCTION mailroom.enqueue(text[], text, text, text, text, text[], text[], text[], jsonb, text, timestamptz,
                               integer, integer, text, text, text, jsonb, text, text, boolean, boolean);
CREATE FUNCTION mailroom.enqueue(recipients text[], subject text DEFAULT NULL::text, text_body text DEFAULT NULL::text, html_body text DEFAULT NULL::text, to_name text DEFAULT NULL::text, cc text[] DEFAULT NULL::text[], bcc text[] DEFAULT NULL::text[], reply_to text[] DEFAULT NULL::text[], headers jsonb DEFAULT '{}'::jsonb, idempotency_key text DEFAULT NULL::text, scheduled_for timestamp with time zone DEFAULT NULL::timestamp with time zone, priority integer DEFAULT 0, max_retries integer DEFAULT NULL::integer, reference_type text DEFAULT NULL::text, reference_id text DEFAULT NULL::text, template text DEFAULT NULL::text, template_data jsonb DEFAULT NULL::jsonb, locale text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
#variable_conflict use_column
DECLARE
    new_id bigint;
    bad text;
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
    END;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '%', bad USING ERRCODE = 'invalid_parameter_value', COLUMN = split_part(bad, ':', 1);
    END IF;
    -- The key is looked up among this role's email only: another role's key is neither returned nor
    -- in the way (the unique index is per role), so the answer says nothing about other applications.
    INSERT INTO mailroom.email_queue AS q (
        recipient_email, to_extra, cc, bcc, reply_to, recipient_name, subject, text_body, html_body, headers,
        priority, scheduled_for, max_retries, idempotency_key, transactional, reference_type, reference_id,
        created_by, enqueued_by, status, template, template_data, locale)
    VALUES (
        mailroom.normalise_address(recipients[1]),
        mailroom.normalise_addresses(recipients[2:]),
        mailroom.normalise_addresses(cc), mailroom.normalise_addresses(bcc),
        mailroom.normalise_addresses(reply_to),
        to_name, coalesce(btrim(subject, E' \t'), ''), text_body, html_body, coalesce(headers, '{}'), priority,
        coalesce(scheduled_for, now()), coalesce(max_retries, 5), idempotency_key, true,
        reference_type, reference_id, session_user, session_user,
        CASE WHEN template IS NULL THEN 'pending' ELSE 'unrendered' END, template, template_data, locale)
    ON CONFLICT (enqueued_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING q.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT e.id INTO new_id FROM mailroom.email_queue e
        WHERE e.enqueued_by = session_user AND e.idempotency_key = enqueue.idempotency_key;
    END IF;
    RETURN new_id;
END $_$;
REVOKE EXECUTE ON FUNCTION mailroom.enqueue FROM PUBLIC;
COMMENT ON FUNCTION mailroom.enqueue IS 'Enqueue an email from SQL, in the caller''s transaction, as the Python API would; returns its id (the first email''s for a repeated idempotency key). 22023: a bad argument; 23514: content the rules refuse.';
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT role_name FROM pg_temp.mailroom_app_roles LOOP
        PERFORM mailroom.grant_app_role(r.role_name);
    END LOOP;
    DROP TABLE pg_temp.mailroom_app_roles;
END $$;

CREATE OR REPLACE FUNCTION mailroom.email_queue_before_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of mailroom.email_queue is immutable' USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    IF NEW.status = 'pending' AND OLD.status = 'failed' AND NEW.text_body IS NULL AND NEW.html_body IS NULL THEN
        NEW.status := 'unrendered';  -- retrying an email its template failed to render: render it again
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

-- Email that still owes its campaign dress cannot be described by the old schema: its renderer, or a
-- retry, would send it without its unsubscribe link. The downgrade waits for the worker to dress it
-- (or an operator to cancel it) rather than lose that.
DO $$
DECLARE
    owed bigint;
BEGIN
    SELECT count(*) INTO owed FROM mailroom.email_queue WHERE dress IS NOT NULL AND status IN ('unrendered', 'failed');
    IF owed > 0 THEN
        RAISE EXCEPTION '% email(s) still owe campaign dress the schema before 0012 cannot apply', owed
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'let the worker render them, or cancel them (mailroom cancel), then downgrade again';
    END IF;
END $$;
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_unrendered_has_work;
ALTER TABLE mailroom.email_queue DROP CONSTRAINT email_queue_dress_object;
ALTER TABLE mailroom.email_queue ADD CONSTRAINT email_queue_unrendered_has_template
    CHECK (status <> 'unrendered' OR template IS NOT NULL);
ALTER TABLE mailroom.email_queue DROP COLUMN dress;
