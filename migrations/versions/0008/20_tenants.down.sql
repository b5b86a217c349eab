-- Undo 20_tenants.sql in reverse: revision 0007's grants, secret columns, header rules and global
-- idempotency keys. Going back to one key space fails (the unique index cannot be built) while two
-- roles hold the same key; the error names it.
CREATE OR REPLACE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;
DROP FUNCTION mailroom.app_audit(text, text, text, bigint, jsonb);

CREATE OR REPLACE FUNCTION mailroom.grant_read_only_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    FOR t IN
        SELECT c.relname, string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) AS columns
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'mailroom'
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relkind IN ('r', 'p', 'v')
          AND NOT EXISTS (SELECT 1 FROM mailroom.secret_columns() s
                          WHERE s.table_name = c.relname AND s.column_name = a.attname)
        GROUP BY c.relname
    LOOP
        EXECUTE format('GRANT SELECT (%s) ON mailroom.%I TO %I', t.columns, t.relname, role_name);
    END LOOP;
END $$;
DROP FUNCTION mailroom.is_secret_column(name, name);
ALTER TABLE mailroom.bounce_quarantine DROP COLUMN raw_kept_bytes;
CREATE OR REPLACE FUNCTION mailroom.secret_columns() RETURNS TABLE (table_name name, column_name name)
LANGUAGE sql IMMUTABLE AS $$
    VALUES ('sender_accounts'::name, 'smtp_password_encrypted'::name),
           ('sender_accounts', 'dkim_private_key_encrypted'),
           ('sender_accounts', 'oauth_client_secret_encrypted'),
           ('sender_accounts', 'oauth_refresh_token_encrypted'),
           ('tokens', 'secret'), ('tokens', 'secret_hash'), ('tokens', 'code')
$$;
-- Read-only roles read again what they read at revision 0007 (the grant function above is 0007's).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT grantee FROM information_schema.column_privileges
        WHERE table_schema = 'mailroom' AND table_name = 'sender_accounts' AND column_name = 'name'
          AND privilege_type = 'SELECT' AND grantee <> current_user
          AND grantee IN (SELECT rolname FROM pg_roles)
    LOOP
        PERFORM mailroom.grant_read_only_role(r.grantee::name);
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION mailroom.headers_problem(headers jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN headers IS NULL OR headers = '{}'::jsonb THEN NULL
        WHEN jsonb_typeof(headers) <> 'object' THEN 'headers: must be a JSON object of name to text'
        ELSE (
            SELECT 'headers.' || left(k, 80) || ': ' || CASE
                WHEN k !~ {{rules.header_name}} THEN 'not a valid header name'
                WHEN lower(k) = ANY ({{rules.reserved_headers}})
                     AND lower(k) <> ALL ({{rules.stored_by_mailroom}}) THEN
                    'this header is set by Mailroom and cannot be overridden'
                WHEN jsonb_typeof(v) <> 'string' THEN 'a header value must be text'
                ELSE mailroom.header_text_problem(v #>> '{}')
            END
            FROM jsonb_each(headers) AS h(k, v)
            WHERE k !~ {{rules.header_name}}
               OR (lower(k) = ANY ({{rules.reserved_headers}}) AND lower(k) <> ALL ({{rules.stored_by_mailroom}}))
               OR jsonb_typeof(v) <> 'string'
               OR mailroom.header_text_problem(v #>> '{}') IS NOT NULL
            ORDER BY k LIMIT 1)
    END
$$;
-- As revision 0006 installs it (from today's file, as a new installation at 0007 would have it).
CREATE OR REPLACE FUNCTION mailroom.content_rules() RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT {{rules}} $$;

CREATE OR REPLACE VIEW mailroom.my_emails WITH (security_barrier) AS
SELECT id, status, recipient_email, subject, idempotency_key, reference_type, reference_id, priority,
       scheduled_for, created_at, sent_at, finished_at, retry_count, max_retries, next_retry_at, last_error,
       suppression_reason
FROM mailroom.email_queue
WHERE created_by = session_user;

CREATE OR REPLACE FUNCTION mailroom.enqueue(
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
    locale text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
    INSERT INTO mailroom.email_queue AS q (
        recipient_email, to_extra, cc, bcc, reply_to, recipient_name, subject, text_body, html_body, headers,
        priority, scheduled_for, max_retries, idempotency_key, transactional, reference_type, reference_id,
        created_by, status, template, template_data, locale)
    VALUES (
        mailroom.normalise_address(recipients[1]),
        mailroom.normalise_addresses(recipients[2:]),
        mailroom.normalise_addresses(cc), mailroom.normalise_addresses(bcc),
        mailroom.normalise_addresses(reply_to),
        to_name, coalesce(btrim(subject, E' \t'), ''), text_body, html_body, coalesce(headers, '{}'), priority,
        coalesce(scheduled_for, now()), coalesce(max_retries, 5), idempotency_key, true,
        reference_type, reference_id, session_user,
        CASE WHEN template IS NULL THEN 'pending' ELSE 'unrendered' END, template, template_data, locale)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING q.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT e.id INTO new_id FROM mailroom.email_queue e WHERE e.idempotency_key = enqueue.idempotency_key;
    END IF;
    RETURN new_id;
END $$;

DO $$
DECLARE
    shared text;
BEGIN
    SELECT idempotency_key INTO shared FROM mailroom.email_queue
    WHERE idempotency_key IS NOT NULL GROUP BY idempotency_key HAVING count(*) > 1 LIMIT 1;
    IF shared IS NOT NULL THEN
        RAISE EXCEPTION 'cannot downgrade: idempotency key % is used by more than one email (several roles)', shared
            USING ERRCODE = 'unique_violation', HINT = 'cancel or rename the later email''s key first';
    END IF;
END $$;
CREATE UNIQUE INDEX email_queue_idempotency_key_key ON mailroom.email_queue (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX mailroom.email_queue_enqueued_by_idempotency_key_key;
ALTER TABLE mailroom.email_queue DROP COLUMN enqueued_by;
