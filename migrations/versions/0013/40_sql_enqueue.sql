-- The SQL function takes an email's own lifetime (expires_at), its stream, its own From and its files (attachments: a JSON array
-- of {"filename", "content" (base64), "content_type", "content_id" (inline)}). Its argument list
-- grows, so it is a new function; 90_grants grants it to the roles that could call the old one.
DROP FUNCTION mailroom.enqueue(text[], text, text, text, text, text[], text[], text[], jsonb, text, timestamptz, integer, integer, text, text, text, jsonb, text, text, boolean, boolean);
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
    track boolean DEFAULT NULL,
    expires_at timestamptz DEFAULT NULL,
    attachments jsonb DEFAULT NULL,
    stream text DEFAULT NULL,
    from_email text DEFAULT NULL,
    from_name text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    new_id bigint;
    bad text;
    files jsonb := coalesce(enqueue.attachments, '[]');
    contents bytea[];
    own_stream text := coalesce(enqueue.stream, CASE WHEN coalesce(enqueue.transactional, enqueue.campaign_id IS NULL)
                                                     THEN 'transactional' ELSE 'broadcast' END);
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
        WHEN enqueue.expires_at <= coalesce(scheduled_for, now())
            THEN 'expires_at: must be later than the email is due (scheduled_for, or now)'
        WHEN jsonb_typeof(files) <> 'array' THEN 'attachments: must be a JSON array of files'
        WHEN jsonb_array_length(files) > 100 THEN 'attachments: at most 100 files'
        WHEN EXISTS (SELECT FROM jsonb_array_elements(files) AS f(v)
                     WHERE jsonb_typeof(f.v) <> 'object' OR jsonb_typeof(f.v -> 'filename') IS DISTINCT FROM 'string'
                        OR jsonb_typeof(f.v -> 'content') IS DISTINCT FROM 'string'
                        OR (f.v ? 'content_type' AND jsonb_typeof(f.v -> 'content_type') <> 'string')
                        OR (f.v ? 'content_id' AND jsonb_typeof(f.v -> 'content_id') NOT IN ('string', 'null'))
                        OR EXISTS (SELECT FROM jsonb_object_keys(f.v) AS k(k)
                                   WHERE k.k NOT IN ('filename', 'content', 'content_type', 'content_id')))
            THEN 'attachments: each file is {"filename": ..., "content": base64, "content_type": ..., "content_id": ...}'
        WHEN own_stream !~ '^[a-z][a-z0-9_-]{0,31}$' THEN 'stream: a name like transactional or broadcast'
        WHEN enqueue.from_name IS NOT NULL AND enqueue.from_email IS NULL THEN 'from_name: only with a from_email'
        WHEN enqueue.from_email IS NOT NULL
             AND cardinality(mailroom.from_refusals(ARRAY[enqueue.from_email], ARRAY[own_stream])) > 0
            THEN 'from_email: no sender account of the email''s stream may send for its domain'
    END;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '%', bad USING ERRCODE = 'invalid_parameter_value', COLUMN = split_part(bad, ':', 1);
    END IF;
    BEGIN
        contents := ARRAY(SELECT decode(f.v ->> 'content', 'base64')
                          FROM jsonb_array_elements(files) WITH ORDINALITY AS f(v, i) ORDER BY f.i);
    EXCEPTION WHEN invalid_parameter_value OR data_exception THEN
        RAISE EXCEPTION 'attachments: a file''s content is not base64' USING ERRCODE = 'invalid_parameter_value',
            COLUMN = 'attachments';
    END;
    -- The key is looked up among this role's email only: another role's key is neither returned nor
    -- in the way (the unique index is per role), so the answer says nothing about other applications.
    INSERT INTO mailroom.email_queue AS q (
        recipient_email, to_extra, cc, bcc, reply_to, recipient_name, subject, text_body, html_body, headers,
        priority, scheduled_for, max_retries, idempotency_key, campaign_id, transactional, reference_type,
        reference_id, created_by, enqueued_by, status, template, template_data, locale, dress, expires_at,
        attachments, stream, from_email, from_name)
    VALUES (
        mailroom.normalise_address(recipients[1]),
        mailroom.normalise_addresses(recipients[2:]),
        mailroom.normalise_addresses(cc), mailroom.normalise_addresses(bcc),
        mailroom.normalise_addresses(reply_to),
        to_name, coalesce(btrim(subject, E' \t'), ''), text_body, html_body, coalesce(headers, '{}'), priority,
        coalesce(scheduled_for, now()), coalesce(max_retries, 5), idempotency_key, enqueue.campaign_id,
        is_transactional, reference_type, reference_id, session_user, session_user,
        CASE WHEN template IS NULL AND NOT dressed THEN 'pending' ELSE 'unrendered' END, template, template_data,
        locale, CASE WHEN dressed THEN jsonb_build_object('track', enqueue.track) END, enqueue.expires_at,
        jsonb_array_length(files), own_stream,
        CASE WHEN enqueue.from_email IS NOT NULL THEN mailroom.normalise_address(enqueue.from_email) END,
        enqueue.from_name)
    ON CONFLICT (enqueued_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING q.id INTO new_id;
    IF new_id IS NULL THEN
        SELECT e.id INTO new_id FROM mailroom.email_queue e
        WHERE e.enqueued_by = session_user AND e.idempotency_key = enqueue.idempotency_key;
    ELSIF cardinality(contents) > 0 THEN
        PERFORM mailroom.store_attachments(
            array_fill(new_id, ARRAY[cardinality(contents)]),
            ARRAY(SELECT i::integer FROM generate_series(1, cardinality(contents)) AS i),
            ARRAY(SELECT f.v ->> 'filename' FROM jsonb_array_elements(files) WITH ORDINALITY AS f(v, i) ORDER BY f.i),
            ARRAY(SELECT lower(coalesce(f.v ->> 'content_type', 'application/octet-stream'))
                  FROM jsonb_array_elements(files) WITH ORDINALITY AS f(v, i) ORDER BY f.i),
            ARRAY(SELECT f.v ->> 'content_id' FROM jsonb_array_elements(files) WITH ORDINALITY AS f(v, i) ORDER BY f.i),
            ARRAY(SELECT i::integer FROM generate_series(1, cardinality(contents)) AS i),
            contents);
    END IF;
    RETURN new_id;
END $$;
REVOKE EXECUTE ON FUNCTION mailroom.enqueue FROM PUBLIC;
COMMENT ON FUNCTION mailroom.enqueue IS
    'Enqueue an email from SQL, in the caller''s transaction, with every field the Python API takes (expires_at, stream, from_email and from_name, and attachments as a JSON array of {filename, content (base64), content_type, content_id}); returns its id (the first email''s for a repeated idempotency key). Email with a template, or with campaign dress (not transactional, or tracked), is stored unrendered and the worker renders and dresses it as the Python API would. 22023: a bad argument; 23514: content the rules refuse.';
