-- Tenants are apart: application roles that share this database cannot reach each other's email,
-- keys or secrets, and a read-only role sees no secret in any column.

-- 1. Idempotency keys belong to the role that enqueued. One global key space let role shop2 calling
-- enqueue(idempotency_key => 'order-42') receive shop's email id back (its own email never stored),
-- and the answer told which keys other applications had used.
--
-- Which role: session_user, the role that logged in. Inside mailroom.enqueue (SECURITY DEFINER)
-- current_user is the function's owner, the same for every application, so it cannot tell them
-- apart; session_user cannot be changed without logging in as another role (SET ROLE changes only
-- current_user, SET SESSION AUTHORIZATION needs a superuser). Behind PgBouncer each client user
-- gets server connections logged in as that user, so session_user still names the application,
-- unless the pool forces one user for everyone (`user=` in [databases]): then the applications are
-- one tenant to the database. The column default gives the Python API (a plain INSERT or COPY under
-- whatever role the DSN names) the same scope as the SQL function.
ALTER TABLE mailroom.email_queue ADD COLUMN enqueued_by name NOT NULL DEFAULT session_user;
COMMENT ON COLUMN mailroom.email_queue.enqueued_by IS
    'The database role that enqueued this email (session_user): the scope of its idempotency key and of mailroom.my_emails.';

-- Email enqueued through mailroom.enqueue before this revision names its role in created_by: the
-- key stays that role's, so a retry after the upgrade still finds its first email. Everything else
-- (the Python API's labels, such as "cli") took the migrating role from the column default.
UPDATE mailroom.email_queue SET enqueued_by = created_by::name
WHERE created_by IS NOT NULL AND created_by::name <> enqueued_by
  AND created_by IN (SELECT rolname FROM pg_catalog.pg_roles);

CREATE UNIQUE INDEX email_queue_enqueued_by_idempotency_key_key
    ON mailroom.email_queue (enqueued_by, idempotency_key) WHERE idempotency_key IS NOT NULL;
DROP INDEX mailroom.email_queue_idempotency_key_key;

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
END $$;

-- An application reads the email its role enqueued, through whichever API it used.
CREATE OR REPLACE VIEW mailroom.my_emails WITH (security_barrier) AS
SELECT id, status, recipient_email, subject, idempotency_key, reference_type, reference_id, priority,
       scheduled_for, created_at, sent_at, finished_at, retry_count, max_retries, next_retry_at, last_error,
       suppression_reason
FROM mailroom.email_queue
WHERE enqueued_by = session_user;

-- 2. Relay-control, trace and authentication headers are reserved like Mailroom's own: an application
-- could set X-SMTPAPI (SendGrid's bypass_list_management sends past the relay's suppressions),
-- X-PM-Metadata-* (Postmark echoes it in the webhooks that name the email a bounce is about),
-- Authentication-Results, Received, Resent-*, ARC-* and DKIM-Signature, and they reached the wire.
-- The lists come from worker/core/content_rules.json, as in revision 0006; the wording of each
-- refusal is Python's (worker.core.rules).
CREATE OR REPLACE FUNCTION mailroom.content_rules() RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT {{rules}} $$;

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
                WHEN lower(k) = ANY ({{rules.relay_and_trace_headers}})
                     OR EXISTS (SELECT FROM unnest({{rules.relay_and_trace_header_prefixes}}) AS p(prefix)
                                WHERE starts_with(lower(k), p.prefix)) THEN
                    'a relay-control, trace or authentication header; relays and receiving servers trust it,'
                    ' so an application may not set it'
                WHEN jsonb_typeof(v) <> 'string' THEN 'a header value must be text'
                ELSE mailroom.header_text_problem(v #>> '{}')
            END
            FROM jsonb_each(headers) AS h(k, v)
            WHERE k !~ {{rules.header_name}}
               OR (lower(k) = ANY ({{rules.reserved_headers}}) AND lower(k) <> ALL ({{rules.stored_by_mailroom}}))
               OR lower(k) = ANY ({{rules.relay_and_trace_headers}})
               OR EXISTS (SELECT FROM unnest({{rules.relay_and_trace_header_prefixes}}) AS p(prefix)
                          WHERE starts_with(lower(k), p.prefix))
               OR jsonb_typeof(v) <> 'string'
               OR mailroom.header_text_problem(v #>> '{}') IS NOT NULL
            ORDER BY k LIMIT 1)
    END
$$;

-- 3. The read-only role read live secrets: activation codes and token links in the bodies and the
-- template data, the unsubscribe link in the stored List-Unsubscribe header, the tracking and
-- unsubscribe tokens, tracked link URLs (a link may carry a token), raw quarantined reports (they
-- quote the original message) and the inbox's application events (the template data to be).
CREATE OR REPLACE FUNCTION mailroom.secret_columns() RETURNS TABLE (table_name name, column_name name)
LANGUAGE sql IMMUTABLE AS $$
    VALUES ('sender_accounts'::name, 'smtp_password_encrypted'::name),
           ('sender_accounts', 'dkim_private_key_encrypted'),
           ('sender_accounts', 'oauth_client_secret_encrypted'),
           ('sender_accounts', 'oauth_refresh_token_encrypted'),
           ('tokens', 'secret'), ('tokens', 'secret_hash'), ('tokens', 'code'),
           ('email_queue', 'text_body'), ('email_queue', 'html_body'), ('email_queue', 'template_data'),
           ('email_queue', 'headers'), ('email_queue', 'tracking_token'), ('email_queue', 'unsubscribe_token'),
           -- a Message-ID authenticates reports about its recipient (worker.core.recipient_tokens)
           ('email_queue', 'message_id'), ('sent_journal', 'message_id'),
           ('archived_emails', 'unsubscribe_token'),
           ('tracked_links', 'token'), ('tracked_links', 'url'),
           ('click_events', 'link_token'), ('click_events', 'url'),
           ('bounce_quarantine', 'raw'),
           ('inbox', 'payload')
$$;

-- What operators' read models need of a secret column, without it: the kept size of a quarantined
-- report (health and `bounces quarantine` report how full the quarantine is).
ALTER TABLE mailroom.bounce_quarantine ADD COLUMN raw_kept_bytes integer GENERATED ALWAYS AS (octet_length(raw)) STORED;
COMMENT ON COLUMN mailroom.bounce_quarantine.raw_kept_bytes IS
    'octet_length(raw): what a read-only role may know of raw, which it may not read';

-- A column is secret when it is listed above, or when its name says it holds a token or a secret:
-- a table or column added later (a per-recipient token, say) is hidden from readers by default
-- instead of shown until someone remembers to list it. A partition is judged by its parent's name.
CREATE FUNCTION mailroom.is_secret_column(table_name name, column_name name) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT EXISTS (SELECT FROM mailroom.secret_columns() s
                   WHERE s.table_name = is_secret_column.table_name AND s.column_name = is_secret_column.column_name)
        OR column_name = 'token' OR column_name LIKE '%\_token' OR column_name LIKE '%secret%'
        OR column_name LIKE '%\_encrypted'
$$;
COMMENT ON FUNCTION mailroom.is_secret_column(name, name) IS
    'Whether a read-only role is refused this column: listed in mailroom.secret_columns(), or named like a token or secret.';

-- Granting is idempotent and also takes away: a role granted before this revision read the columns
-- that are secret now, and GRANT never removes a privilege, so each table's SELECT is revoked (which
-- revokes every column's too) before the readable columns are granted again.
CREATE OR REPLACE FUNCTION mailroom.grant_read_only_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    FOR t IN
        SELECT c.relname,
               string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
                   FILTER (WHERE NOT mailroom.is_secret_column(root.relname, a.attname)) AS columns
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'mailroom'
        JOIN pg_class root ON root.oid = coalesce(pg_partition_root(c.oid), c.oid)
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relkind IN ('r', 'p', 'v')
        GROUP BY c.relname
    LOOP
        EXECUTE format('REVOKE SELECT ON mailroom.%I FROM %I', t.relname, role_name);
        IF t.columns IS NOT NULL THEN
            EXECUTE format('GRANT SELECT (%s) ON mailroom.%I TO %I', t.columns, t.relname, role_name);
        END IF;
    END LOOP;
END $$;

-- 4. The README told applications to record their own audit rows with mailroom.audit(...), which an
-- application's role may not call (it inserts into the audit log as the caller). This one may: it
-- writes through mailroom.audit as the schema's owner, the database role recorded is still the
-- application's (session_user), and only actions named app.* are accepted, so an application
-- cannot write rows that look like an operator's (sender.*, role.grant, ...).
-- Every audit row takes the chain head's row lock until its transaction commits (worker.ops.audit_chain):
-- an application's call waits at most lock_timeout for another's, never for ever, and its row is
-- bounded in size, so one application cannot stall or swell the trail that every other writes to.
CREATE FUNCTION mailroom.app_audit(
    action text, actor text, target text DEFAULT NULL, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '5s' AS $$
BEGIN
    IF action IS NULL OR NOT starts_with(action, 'app.') THEN
        RAISE EXCEPTION 'action: an application''s audit action starts with app. (app.refund, say)'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'action';
    END IF;
    IF length(action) > 100 OR length(actor) > 200 OR length(target) > 500
       OR octet_length(detail::text) > 16384 THEN
        RAISE EXCEPTION 'an application''s audit row is at most 100 characters of action, 200 of actor, 500 of target and 16 KiB of detail'
            USING ERRCODE = 'string_data_right_truncation';
    END IF;
    RETURN mailroom.audit(action, actor, target, affected, detail);
END $$;
REVOKE EXECUTE ON FUNCTION mailroom.app_audit FROM PUBLIC;
COMMENT ON FUNCTION mailroom.app_audit(text, text, text, bigint, jsonb) IS
    'Record an application''s own audit row (action app.*); granted to application roles by mailroom.grant_app_role.';

CREATE OR REPLACE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.app_audit TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;
