-- The Python API's door does the same work for less of the server's time (revision 0013 wrote it):
-- each email's scheduled_for is filled with now() in the insert itself, so the queue's row trigger,
-- which fills a NULL one, no longer runs for every email; and the answers read the call's emails in
-- one index scan instead of a lateral lookup per email, resolving idempotency keys only when a row was
-- not written. `python -m bench.enqueue 20000 1 transactional api` measures it.
CREATE OR REPLACE FUNCTION mailroom.enqueue_rows(
    recipient_email text[],
    recipient_name text[],
    subject text[],
    text_body text[],
    html_body text[],
    headers jsonb[],
    template text[],
    locale text[],
    template_data jsonb[],
    priority integer[],
    scheduled_for timestamptz[],
    max_retries integer[],
    idempotency_key text[],
    campaign_id text[],
    transactional boolean[],
    reference_type text[],
    reference_id text[],
    created_by text[],
    tracking_token uuid[],
    unsubscribe_token uuid[],
    track_opens boolean[],
    track_clicks boolean[],
    to_extra text[],
    cc text[],
    bcc text[],
    reply_to text[],
    dress jsonb[],
    link_email integer[] DEFAULT '{}',
    link_position integer[] DEFAULT '{}',
    link_token uuid[] DEFAULT '{}',
    link_url text[] DEFAULT '{}',
    expires_at timestamptz[] DEFAULT NULL,
    attachment_email integer[] DEFAULT '{}',
    attachment_position integer[] DEFAULT '{}',
    attachment_filename text[] DEFAULT '{}',
    attachment_type text[] DEFAULT '{}',
    attachment_cid text[] DEFAULT '{}',
    attachment_data integer[] DEFAULT '{}',
    contents bytea[] DEFAULT '{}',
    stream text[] DEFAULT NULL,
    from_email text[] DEFAULT NULL,
    from_name text[] DEFAULT NULL
) RETURNS TABLE (n integer, id bigint, written boolean, suppression text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
-- The arguments are named as the columns: in the statement a bare name is the column (the arguments
-- are only read by unnest, where no column is in scope).
#variable_conflict use_column
DECLARE
    -- to_extra, cc, bcc and reply_to come as one text[] literal per email: an array of arrays would
    -- have to be rectangular.
    trusted boolean := has_table_privilege(session_user, 'mailroom.email_queue', 'INSERT');
    ns integer[];
    ids bigint[];
    keys text[];
    wrote boolean[];
    f_email bigint[];
    f_position integer[];
    f_filename text[];
    f_type text[];
    f_cid text[];
    f_data integer[];
BEGIN
    -- unnest pads shorter arrays with NULLs: a column one value short would silently lose a key or a
    -- transactional flag. Every column holds one value per email, in one dimension (a NULL array: none).
    IF (SELECT count(DISTINCT c) FROM unnest(ARRAY[
            cardinality(recipient_email), cardinality(recipient_name), cardinality(subject), cardinality(text_body),
            cardinality(html_body), cardinality(headers), cardinality(template), cardinality(locale),
            cardinality(template_data), cardinality(priority), cardinality(scheduled_for), cardinality(max_retries),
            cardinality(idempotency_key), cardinality(campaign_id), cardinality(transactional),
            cardinality(reference_type), cardinality(reference_id), cardinality(created_by),
            cardinality(tracking_token), cardinality(unsubscribe_token), cardinality(track_opens),
            cardinality(track_clicks), cardinality(to_extra), cardinality(cc), cardinality(bcc),
            cardinality(reply_to), cardinality(dress), cardinality(expires_at), cardinality(stream),
            cardinality(from_email), cardinality(from_name)]) AS c) > 1
       OR (SELECT max(d) FROM unnest(ARRAY[
            array_ndims(recipient_email), array_ndims(recipient_name), array_ndims(subject), array_ndims(text_body),
            array_ndims(html_body), array_ndims(headers), array_ndims(template), array_ndims(locale),
            array_ndims(template_data), array_ndims(priority), array_ndims(scheduled_for), array_ndims(max_retries),
            array_ndims(idempotency_key), array_ndims(campaign_id), array_ndims(transactional),
            array_ndims(reference_type), array_ndims(reference_id), array_ndims(created_by),
            array_ndims(tracking_token), array_ndims(unsubscribe_token), array_ndims(track_opens),
            array_ndims(track_clicks), array_ndims(to_extra), array_ndims(cc), array_ndims(bcc),
            array_ndims(reply_to), array_ndims(dress), array_ndims(expires_at), array_ndims(stream),
            array_ndims(from_email), array_ndims(from_name)]) AS d) > 1 THEN
        RAISE EXCEPTION 'arrays: every column must hold one value per email, in one dimension'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(link_email) <> cardinality(link_position) OR cardinality(link_email) <> cardinality(link_token)
       OR cardinality(link_email) <> cardinality(link_url) THEN
        RAISE EXCEPTION 'links: link_email, link_position, link_token and link_url must be as long as each other'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (SELECT count(DISTINCT c) FROM unnest(ARRAY[
            cardinality(attachment_email), cardinality(attachment_position), cardinality(attachment_filename),
            cardinality(attachment_type), cardinality(attachment_cid), cardinality(attachment_data)]) AS c) > 1
       OR EXISTS (SELECT FROM unnest(attachment_email) AS a(n) WHERE a.n IS NULL OR a.n NOT BETWEEN 1 AND cardinality(recipient_email)) THEN
        RAISE EXCEPTION 'attachments: the attachment arrays must be as long as each other, each naming an email of this call'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM unnest(expires_at, scheduled_for) AS t(e, s) WHERE t.e <= coalesce(t.s, now())) THEN
        RAISE EXCEPTION 'expires_at: must be later than the email is due (scheduled_for, or now)'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'expires_at';
    END IF;
    -- A From of its own only within the domains a sender account of the email's stream may send for.
    IF from_email IS NOT NULL AND cardinality(mailroom.from_refusals(from_email, ARRAY(
            SELECT coalesce(x.s, CASE WHEN coalesce(x.t, x.c IS NULL) THEN 'transactional' ELSE 'broadcast' END)
            FROM unnest(stream, transactional, campaign_id) WITH ORDINALITY AS x(s, t, c, i) ORDER BY x.i))) > 0 THEN
        RAISE EXCEPTION 'from_email: no sender account of the email''s stream may send for its domain'
            USING ERRCODE = 'invalid_parameter_value', COLUMN = 'from_email',
                  HINT = 'mailroom senders edit NAME --from-domain DOMAIN';
    END IF;
    IF NOT trusted AND (cardinality(link_email) > 0
            OR EXISTS (SELECT FROM unnest(tracking_token, unsubscribe_token, track_opens, track_clicks) AS t(a, b, c, d)
                       WHERE t.a IS NOT NULL OR t.b IS NOT NULL OR t.c OR t.d)) THEN
        RAISE EXCEPTION 'tracking: tokens and tracked links are made by Mailroom; ask for them with dress (the worker applies it)'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'the Python API does this for a role made by mailroom db grant app';
    END IF;
    WITH given AS MATERIALIZED (
        SELECT g.*, nextval('mailroom.email_queue_id_seq'::regclass) AS new_id
        FROM unnest(recipient_email, recipient_name, subject, text_body, html_body, headers, template, locale,
                    template_data, priority, scheduled_for, max_retries, idempotency_key, campaign_id,
                    transactional, reference_type, reference_id, created_by, tracking_token, unsubscribe_token,
                    track_opens, track_clicks, to_extra, cc, bcc, reply_to, dress, expires_at, stream, from_email,
                    from_name)
             WITH ORDINALITY AS g(recipient_email, recipient_name, subject, text_body, html_body, headers,
                                  template, locale, template_data, priority, scheduled_for, max_retries,
                                  idempotency_key, campaign_id, transactional, reference_type, reference_id,
                                  created_by, tracking_token, unsubscribe_token, track_opens, track_clicks,
                                  to_extra, cc, bcc, reply_to, dress, expires_at, stream, from_email,
                                  from_name, n)
    ), files AS (
        SELECT a.n, count(*) AS how_many FROM unnest(attachment_email) AS a(n) GROUP BY a.n
    ), owed AS (
        -- The dress the worker is to apply: as asked; and, from a role not trusted with its own, whenever
        -- the email is not transactional (it owes an unsubscribe link), asked or not.
        SELECT g.*, CASE WHEN g.dress IS NOT NULL THEN g.dress
                         WHEN NOT trusted AND NOT coalesce(g.transactional, g.campaign_id IS NULL)
                             THEN jsonb_build_object('track', NULL)
                    END AS owed_dress,
               coalesce(f.how_many, 0) AS how_many
        FROM given g LEFT JOIN files f ON f.n = g.n
    ), written AS (
        INSERT INTO mailroom.email_queue AS q (
            id, recipient_email, recipient_name, subject, text_body, html_body, headers, template, locale,
            template_data, priority, scheduled_for, max_retries, idempotency_key, campaign_id, transactional,
            reference_type, reference_id, created_by, tracking_token, unsubscribe_token, track_opens,
            track_clicks, to_extra, cc, bcc, reply_to, dress, status, expires_at, attachments, stream, from_email,
            from_name)
        SELECT g.new_id, g.recipient_email, g.recipient_name, g.subject, g.text_body, g.html_body,
               coalesce(g.headers, '{}'), g.template, g.locale, g.template_data, coalesce(g.priority, 0),
               coalesce(g.scheduled_for, now()), coalesce(g.max_retries, 5), g.idempotency_key, g.campaign_id,
               coalesce(g.transactional, g.campaign_id IS NULL), g.reference_type, g.reference_id,
               CASE WHEN trusted THEN g.created_by ELSE session_user END, g.tracking_token,
               g.unsubscribe_token, coalesce(g.track_opens, false), coalesce(g.track_clicks, false),
               g.to_extra::text[], g.cc::text[], g.bcc::text[], g.reply_to::text[], g.owed_dress,
               CASE WHEN g.owed_dress IS NULL THEN 'pending' ELSE 'unrendered' END, g.expires_at, g.how_many,
               coalesce(g.stream, CASE WHEN coalesce(g.transactional, g.campaign_id IS NULL) THEN 'transactional'
                                       ELSE 'broadcast' END),
               g.from_email, g.from_name
        -- Keys in one order for every caller: two calls with the same keys in another order would
        -- otherwise wait on each other's (a deadlock). The first of a key in the call still wins.
        FROM owed g ORDER BY g.idempotency_key NULLS LAST, g.n
        ON CONFLICT (enqueued_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING q.id
    ), links AS (
        INSERT INTO mailroom.tracked_links (token, email_id, position, url)
        SELECT l.token, w.id, l.position, l.url
        FROM unnest(link_email, link_position, link_token, link_url) AS l(n, position, token, url)
        JOIN given g ON g.n = l.n
        JOIN written w ON w.id = g.new_id
    )
    SELECT array_agg(g.n::integer ORDER BY g.n), array_agg(w.id ORDER BY g.n),
           array_agg(g.idempotency_key ORDER BY g.n), array_agg(w.id IS NOT NULL ORDER BY g.n)
    INTO ns, ids, keys, wrote
    FROM given g LEFT JOIN written w ON w.id = g.new_id;
    -- The files of the emails this call wrote (one not written, its key's email being this role's
    -- already, keeps the files it was written with).
    IF cardinality(attachment_email) > 0 THEN
        SELECT array_agg(u.id ORDER BY a.i), array_agg(a.p ORDER BY a.i), array_agg(a.f ORDER BY a.i),
               array_agg(a.t ORDER BY a.i), array_agg(a.c ORDER BY a.i), array_agg(a.d ORDER BY a.i)
        INTO f_email, f_position, f_filename, f_type, f_cid, f_data
        FROM unnest(attachment_email, attachment_position, attachment_filename, attachment_type, attachment_cid,
                    attachment_data) WITH ORDINALITY AS a(n, p, f, t, c, d, i)
        JOIN unnest(ns, ids, wrote) AS u(n, id, w) ON u.n = a.n AND u.w;
        PERFORM mailroom.store_attachments(f_email, f_position, f_filename, f_type, f_cid, f_data, contents);
    END IF;
    -- A row not written (its key was this role's already) finds the email of its key: written earlier
    -- in this call, or before it, or (under READ COMMITTED) by another transaction that committed while
    -- ON CONFLICT waited on it. Asked only when such a row exists.
    IF false = ANY(wrote) THEN
        SELECT array_agg(coalesce(u.id, k.id) ORDER BY u.n) INTO ids
        FROM unnest(ns, ids, keys) AS u(n, id, key)
        LEFT JOIN mailroom.email_queue k
            ON u.id IS NULL AND k.enqueued_by = session_user AND k.idempotency_key = u.key;
    END IF;
    -- The answers: the queue's statement trigger has stored suppressed what will not be sent; its verdict
    -- is read back for the call's ids in one index scan (a lateral lookup a row cost more than the insert's
    -- own work), and told as the caller may be told it.
    RETURN QUERY
    SELECT u.n, u.id, u.wrote, mailroom.suppression_told(s.suppression_reason)
    FROM unnest(ns, ids, wrote) AS u(n, id, wrote)
    LEFT JOIN (SELECT q.id, q.suppression_reason FROM mailroom.email_queue q
               WHERE q.id = ANY (ids) AND q.status = 'suppressed') s ON s.id = u.id
    ORDER BY u.n;
END $$;
REVOKE EXECUTE ON FUNCTION mailroom.enqueue_rows FROM PUBLIC;
COMMENT ON FUNCTION mailroom.enqueue_rows IS
    'The Python API''s door: write checked and rendered emails (one array per column, the tracked links and the files beside them) as the schema''s owner, so an application role needs no privilege on the queue. Forces enqueued_by (session_user), the status and the ids; created_by only from a role that may write the queue. Returns each given email''s position, id, whether it was written (false: its idempotency key was this role''s already) and its suppression as the caller may be told it. Granted to application roles by mailroom.grant_app_role.';
