-- The SQL enqueue API: any language enqueues inside its own transaction by calling
--   SELECT mailroom.enqueue(recipients => ARRAY['ada@example.com'], subject => 'Hi', text_body => '...');
-- It stores the email exactly as the Python API would (addresses normalised, subject trimmed, the
-- same content rules through the queue's trigger) and returns its id; the same idempotency_key again
-- returns the first email's id and stores nothing. With `template` (and `template_data`, `locale`) the
-- email is stored `unrendered` and the worker renders it with the Python API's catalog and sandbox
-- before it can be sent; a subject, text_body or html_body given beside it wins over the template's. Errors: SQLSTATE 22023 (invalid_parameter_value)
-- for a missing or out-of-range argument, 23514 (check_violation) for content the rules refuse; the
-- message starts with the field at fault ("cc[2]: invalid email address ...").
CREATE FUNCTION mailroom.normalise_address(address text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    -- The local part as given, the domain in lower case: what the Python API stores.
    SELECT CASE WHEN position('@' IN btrim(address)) > 0
        THEN regexp_replace(btrim(address), '@[^@]*$', '') || '@' || lower(regexp_replace(btrim(address), '^.*@', ''))
        ELSE btrim(address) END
$$;

CREATE FUNCTION mailroom.normalise_addresses(addresses text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN cardinality(addresses) > 0
        THEN ARRAY(SELECT mailroom.normalise_address(a) FROM unnest(addresses) WITH ORDINALITY AS x(a, i) ORDER BY i)
    END
$$;

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
REVOKE EXECUTE ON FUNCTION mailroom.enqueue FROM PUBLIC;

-- What an application may read of the email it enqueued (as its database role): status and outcome.
CREATE VIEW mailroom.my_emails WITH (security_barrier) AS
SELECT id, status, recipient_email, subject, idempotency_key, reference_type, reference_id, priority,
       scheduled_for, created_at, sent_at, finished_at, retry_count, max_retries, next_retry_at, last_error,
       suppression_reason
FROM mailroom.email_queue
WHERE created_by = session_user;
