-- One rule set for every writer: whatever writes a queue row (mailroom.enqueue, a plain INSERT, an
-- UPDATE, COPY, the Python API), the database refuses what the Python API refuses. The rules come
-- from worker/core/content_rules.json, written in here as literals when this revision runs.

-- These column checks saw only part of the rules and answered without naming the field; the triggers
-- below check all of it (and the worker's status updates no longer evaluate them on every row).
ALTER TABLE mailroom.email_queue
    DROP CONSTRAINT email_queue_subject_check,
    DROP CONSTRAINT email_queue_recipient_name_check,
    DROP CONSTRAINT email_queue_recipient_email_check;

-- The specification this database enforces (applications in any language may read it).
CREATE FUNCTION mailroom.content_rules() RETURNS jsonb LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT {{rules}} $$;

-- Why a header value is refused, or NULL: control characters and line breaks, RFC 2047 encoded
-- words (which a reader would decode into something else, a line break included), over-long text.
-- Every function here is immutable to the end so the planner inlines it into the trigger's checks.
CREATE FUNCTION mailroom.header_text_problem(value text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN value ~ {{rules.forbidden_in_headers}} THEN
            'control character U+' || lpad(upper(to_hex(ascii(
                substring(value FROM '(' || {{rules.forbidden_in_headers}} || ')')))), 4, '0')
            || ' is not allowed in a header'
        WHEN strpos(value, '=?') > 0 AND value ~ {{rules.encoded_word}} THEN
            'looks like an RFC 2047 encoded word; give the plain text instead'
        WHEN length(value) > {{rules.max_header_value_chars}} THEN
            'longer than ' || {{rules.max_header_value_chars}} || ' characters'
    END
$$;

-- Why an address is refused, or NULL: a plain ASCII mailbox (Mailroom stores the normalised form).
CREATE FUNCTION mailroom.address_problem(value text) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN value IS NULL OR btrim(value) = '' THEN 'an email address is required'
        WHEN length(value) > {{rules.max_address_chars}}
          OR strpos(value, '@') > {{rules.max_local_chars}} + 1
          OR value !~ {{rules.address}}
          -- a domain label of 64 characters needs an address longer than 67: the costlier pattern only then
          OR (length(value) > 67 AND substring(value FROM strpos(value, '@') + 1) ~ {{rules.address_long_label}})
        THEN 'invalid email address (a plain ASCII mailbox, local@domain.tld)'
    END
$$;

-- Why a list of addresses is refused, or NULL; the problem names the element (cc[2]).
CREATE FUNCTION mailroom.address_list_problem(field text, addresses text[]) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN addresses IS NULL THEN NULL
        WHEN cardinality(addresses) = 0 THEN field || ': an empty list; give NULL for none'
        WHEN array_ndims(addresses) <> 1 THEN field || ': a list of addresses, one dimension'
        ELSE (SELECT field || '[' || i || ']: ' || mailroom.address_problem(a)
              FROM unnest(addresses) WITH ORDINALITY AS x(a, i)
              WHERE mailroom.address_problem(a) IS NOT NULL
              ORDER BY i LIMIT 1)
    END
$$;

-- Why the custom headers are refused, or NULL: RFC 5322 field names, none Mailroom writes itself
-- (List-Unsubscribe and its -Post are stored by Mailroom's own tracking at enqueue), text values.
CREATE FUNCTION mailroom.headers_problem(headers jsonb) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE
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

-- The many-recipient part of the rules: every address valid, at most max_recipients in the envelope.
CREATE FUNCTION mailroom.recipients_problem(e mailroom.email_queue) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(
        mailroom.address_list_problem('to_extra', e.to_extra),
        mailroom.address_list_problem('cc', e.cc),
        mailroom.address_list_problem('bcc', e.bcc),
        mailroom.address_list_problem('reply_to', e.reply_to),
        CASE WHEN 1 + coalesce(cardinality(e.to_extra), 0) + coalesce(cardinality(e.cc), 0)
                    + coalesce(cardinality(e.bcc), 0) > {{rules.max_recipients}}
             THEN 'recipients: more than ' || {{rules.max_recipients}} || ' recipients' END,
        CASE WHEN cardinality(e.reply_to) > {{rules.max_recipients}}
             THEN 'reply_to: more than ' || {{rules.max_recipients}} || ' addresses' END)
$$;

-- The trigger: content is checked when it is written, by whatever writes it. Status changes (the
-- worker's claims and results) name no content column, so they do not pay for it.
CREATE FUNCTION mailroom.email_content_problem(e mailroom.email_queue) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    problem text;
BEGIN
    problem := mailroom.address_problem(e.recipient_email);
    IF problem IS NOT NULL THEN
        RETURN 'recipient_email: ' || problem;
    END IF;
    IF e.recipient_name IS NOT NULL THEN
        problem := coalesce(mailroom.header_text_problem(e.recipient_name),
            CASE WHEN length(e.recipient_name) > {{rules.max_name_chars}}
                 THEN 'longer than ' || {{rules.max_name_chars}} || ' characters' END);
        IF problem IS NOT NULL THEN
            RETURN 'recipient_name: ' || problem;
        END IF;
    END IF;
    -- An email enqueued by SQL with a template has its subject rendered later (status unrendered).
    problem := coalesce(mailroom.header_text_problem(e.subject),
        CASE WHEN btrim(e.subject, E' \t') = '' AND e.status <> 'unrendered' THEN 'a subject is required'
             WHEN length(e.subject) > {{rules.max_subject_chars}}
             THEN 'longer than ' || {{rules.max_subject_chars}} || ' characters' END);
    IF problem IS NOT NULL THEN
        RETURN 'subject: ' || problem;
    END IF;
    IF coalesce(octet_length(e.text_body), 0) + coalesce(octet_length(e.html_body), 0) > {{rules.max_body_bytes}} THEN
        RETURN 'text_body: the body exceeds the ' || {{rules.max_body_bytes}} || '-byte limit';
    END IF;
    problem := mailroom.headers_problem(e.headers);
    IF problem IS NOT NULL THEN
        RETURN problem;
    END IF;
    IF e.to_extra IS NOT NULL OR e.cc IS NOT NULL OR e.bcc IS NOT NULL OR e.reply_to IS NOT NULL THEN
        RETURN mailroom.recipients_problem(e);
    END IF;
    
    RETURN NULL;
END $$;

-- Raise the first problem found, naming the field (SQLSTATE 23514, the column in the diagnostics).
CREATE FUNCTION mailroom.refuse_content(problem text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', problem
        USING ERRCODE = 'check_violation', COLUMN = split_part(split_part(split_part(problem, ':', 1), '[', 1), '.', 1),
              TABLE = 'email_queue', SCHEMA = 'mailroom',
              HINT = 'mailroom.content_rules() shows the rules every writer of the queue obeys';
END $$;

-- Inserts (one row, INSERT ... SELECT, COPY) are checked once per statement, as a set: a row whose
-- common fields all pass the plain checks below and that has no custom headers and no more recipients
-- costs a few regular-expression tests; only the others take the full check. Measured with
-- `python -m bench.enqueue 200000 2`, a row trigger cost bulk enqueue about 40% of its rate; this does not.
CREATE FUNCTION mailroom.email_queue_content_rules_insert() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    problem text;
BEGIN
    SELECT mailroom.email_content_problem(n) INTO problem
    FROM new_rows n
    WHERE (length(n.recipient_email) > {{rules.max_address_chars}}
           OR strpos(n.recipient_email, '@') > {{rules.max_local_chars}} + 1
           OR n.recipient_email !~ {{rules.address}}
           OR (length(n.recipient_email) > 67
               AND substring(n.recipient_email FROM strpos(n.recipient_email, '@') + 1) ~ {{rules.address_long_label}})
           OR n.subject ~ {{rules.forbidden_in_headers}} OR strpos(n.subject, '=?') > 0
           OR length(n.subject) > {{rules.max_subject_chars}} OR btrim(n.subject, E' \t') = ''
           OR n.recipient_name ~ {{rules.forbidden_in_headers}} OR strpos(n.recipient_name, '=?') > 0
           OR length(n.recipient_name) > {{rules.max_name_chars}}
           OR coalesce(octet_length(n.text_body), 0) + coalesce(octet_length(n.html_body), 0) > {{rules.max_body_bytes}}
           OR n.headers <> '{}'::jsonb
           OR n.to_extra IS NOT NULL OR n.cc IS NOT NULL OR n.bcc IS NOT NULL OR n.reply_to IS NOT NULL)
      AND mailroom.email_content_problem(n) IS NOT NULL
    LIMIT 1;
    IF problem IS NOT NULL THEN
        PERFORM mailroom.refuse_content(problem);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER email_queue_content_rules_insert
    AFTER INSERT ON mailroom.email_queue REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_content_rules_insert();

-- Updates of content are rare (status changes, the worker's claims and results, name no content
-- column and do not pay for this): checked row by row.
CREATE FUNCTION mailroom.email_queue_content_rules_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    problem text := mailroom.email_content_problem(NEW);
BEGIN
    IF problem IS NOT NULL THEN
        PERFORM mailroom.refuse_content(problem);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER email_queue_content_rules_update
    BEFORE UPDATE OF recipient_email, recipient_name, subject, text_body, html_body, headers,
                     to_extra, cc, bcc, reply_to
    ON mailroom.email_queue FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_content_rules_update();
