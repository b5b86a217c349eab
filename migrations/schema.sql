-- The whole mailroom schema as the migrations leave it (generated; do not edit), by area: each table
-- with its comments, constraints, indexes and triggers. Read it; the migrations are what build it.
-- Regenerate after adding a revision: python -m worker.core.schema > migrations/schema.sql


CREATE SCHEMA mailroom;

-- == schema and shared functions ==

-- alembic_version

CREATE TABLE mailroom.alembic_version (
    version_num character varying(32) NOT NULL
);

COMMENT ON TABLE mailroom.alembic_version IS 'The schema revision the migrations left (Alembic''s record); `mailroom db status` reads it.';

ALTER TABLE ONLY mailroom.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);

-- functions

CREATE FUNCTION mailroom.all_match(names text[], pattern text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT NOT EXISTS (SELECT FROM unnest(names) AS n(v) WHERE n.v IS NULL OR n.v !~ pattern)
$$;

COMMENT ON FUNCTION mailroom.all_match(names text[], pattern text) IS 'Whether every element of the array is non-NULL and matches the pattern (for CHECK constraints, which take no subquery).';

CREATE FUNCTION mailroom.clock() RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(current_setting('mailroom.now', true), '')::timestamptz, now())
$$;

COMMENT ON FUNCTION mailroom.clock() IS 'The time the lifecycle and birthday logic runs at: the setting mailroom.now when a caller set it (tests move time this way), else now().';

CREATE FUNCTION mailroom.forbid_created_at_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of %.% is immutable', TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.forbid_created_at_change() IS 'Row trigger: refuses any change of created_at (check_violation).';

CREATE FUNCTION mailroom.notify_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('mailroom_changes', json_build_object('table', TG_TABLE_NAME, 'op', TG_OP)::text);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.notify_change() IS 'Statement trigger: NOTIFY mailroom_changes with {table, op}; listeners (console, worker) re-read what they need.';

CREATE FUNCTION mailroom.schema_revision() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT v.version_num FROM mailroom.alembic_version v
$$;

COMMENT ON FUNCTION mailroom.schema_revision() IS 'The revision the schema is at (mailroom.alembic_version), for a command run as an application role, which may not read that table. Granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.schema_revision() FROM PUBLIC;

CREATE FUNCTION mailroom.touch_row() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of %.% is immutable', TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.touch_row() IS 'Row trigger: updated_at follows every change; created_at can never be rewritten.';

-- == queue and delivery ==

-- email_queue

CREATE TABLE mailroom.email_queue (
    id bigint NOT NULL,
    recipient_email text NOT NULL,
    recipient_name text,
    subject text NOT NULL,
    text_body text,
    html_body text,
    headers jsonb DEFAULT '{}'::jsonb NOT NULL,
    template text,
    locale text,
    template_data jsonb,
    priority integer DEFAULT 0 NOT NULL,
    scheduled_for timestamp with time zone DEFAULT now() NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    lease_owner text,
    lease_token uuid,
    lease_expires_at timestamp with time zone,
    sender_account_id bigint,
    retry_count integer DEFAULT 0 NOT NULL,
    max_retries integer DEFAULT 5 NOT NULL,
    next_retry_at timestamp with time zone,
    last_error text,
    error_details jsonb,
    suppression_reason text,
    idempotency_key text,
    campaign_id text,
    transactional boolean DEFAULT true NOT NULL,
    track_opens boolean DEFAULT false NOT NULL,
    track_clicks boolean DEFAULT false NOT NULL,
    tracking_token uuid,
    reference_type text,
    reference_id text,
    message_id text,
    created_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    assigned_at timestamp with time zone,
    sent_at timestamp with time zone,
    finished_at timestamp with time zone,
    unsubscribe_token uuid,
    to_extra text[],
    cc text[],
    bcc text[],
    reply_to text[],
    enqueued_by name DEFAULT SESSION_USER NOT NULL,
    failure_kind text,
    traceparent text DEFAULT NULLIF(current_setting('mailroom.traceparent'::text, true), ''::text),
    tracestate text DEFAULT NULLIF(current_setting('mailroom.tracestate'::text, true), ''::text),
    correlation_id text DEFAULT NULLIF(current_setting('mailroom.correlation_id'::text, true), ''::text),
    dress jsonb,
    expires_at timestamp with time zone,
    attachments smallint DEFAULT 0 NOT NULL,
    stream text DEFAULT 'transactional'::text NOT NULL,
    from_email text,
    from_name text,
    CONSTRAINT email_queue_assigned_has_lease CHECK (((status = 'assigned'::text) = ((lease_token IS NOT NULL) AND (lease_owner IS NOT NULL) AND (lease_expires_at IS NOT NULL)))),
    CONSTRAINT email_queue_attachments CHECK (((attachments >= 0) AND (attachments <= 100))),
    CONSTRAINT email_queue_campaign_id_length CHECK (((length(campaign_id) >= 1) AND (length(campaign_id) <= 100))),
    CONSTRAINT email_queue_correlation_id_format CHECK ((((length(correlation_id) >= 1) AND (length(correlation_id) <= 255)) AND (correlation_id !~ '[[:cntrl:]]'::text))),
    CONSTRAINT email_queue_dress_object CHECK (((dress IS NULL) OR ((jsonb_typeof(dress) = 'object'::text) AND (status = ANY (ARRAY['unrendered'::text, 'failed'::text, 'cancelled'::text]))))),
    CONSTRAINT email_queue_failed_has_error CHECK (((status <> 'failed'::text) OR (last_error IS NOT NULL))),
    CONSTRAINT email_queue_failure_kind_known CHECK ((failure_kind = ANY (ARRAY['expired'::text, 'attempt'::text]))),
    CONSTRAINT email_queue_failure_kind_only_when_failed CHECK (((failure_kind IS NULL) OR (status = 'failed'::text))),
    CONSTRAINT email_queue_finished_has_finished_at CHECK (((status <> ALL (ARRAY['sent'::text, 'failed'::text, 'cancelled'::text, 'suppressed'::text])) OR (finished_at IS NOT NULL))),
    CONSTRAINT email_queue_from_email CHECK (((from_email IS NULL) OR (mailroom.address_problem(from_email) IS NULL))),
    CONSTRAINT email_queue_from_name CHECK (((from_name IS NULL) OR ((from_email IS NOT NULL) AND (length(from_name) <= 255) AND (mailroom.header_text_problem(from_name) IS NULL)))),
    CONSTRAINT email_queue_has_body_or_template CHECK (((text_body IS NOT NULL) OR (html_body IS NOT NULL) OR ((template IS NOT NULL) AND (status = ANY (ARRAY['unrendered'::text, 'failed'::text, 'cancelled'::text]))))),
    CONSTRAINT email_queue_headers_object CHECK ((jsonb_typeof(headers) = 'object'::text)),
    CONSTRAINT email_queue_idempotency_key_length CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255))),
    CONSTRAINT email_queue_max_retries_range CHECK (((max_retries >= 0) AND (max_retries <= 100))),
    CONSTRAINT email_queue_priority_range CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
    CONSTRAINT email_queue_retries_within_max CHECK ((retry_count <= max_retries)),
    CONSTRAINT email_queue_retry_count_not_negative CHECK ((retry_count >= 0)),
    CONSTRAINT email_queue_sent_at_matches_status CHECK (((status = ANY (ARRAY['sent'::text, 'bounced'::text])) = (sent_at IS NOT NULL))),
    CONSTRAINT email_queue_status_known CHECK ((status = ANY (ARRAY['unrendered'::text, 'pending'::text, 'assigned'::text, 'sent'::text, 'failed'::text, 'cancelled'::text, 'suppressed'::text, 'bounced'::text]))),
    CONSTRAINT email_queue_stream CHECK ((stream ~ '^[a-z][a-z0-9_-]{0,31}$'::text)),
    CONSTRAINT email_queue_suppressed_has_reason CHECK (((status <> 'suppressed'::text) OR (suppression_reason IS NOT NULL))),
    CONSTRAINT email_queue_traceparent_format CHECK (((traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text) AND (substr(traceparent, 4, 32) <> repeat('0'::text, 32)) AND (substr(traceparent, 37, 16) <> repeat('0'::text, 16)))),
    CONSTRAINT email_queue_tracestate_format CHECK (((tracestate IS NULL) OR ((traceparent IS NOT NULL) AND (length(tracestate) <= 512) AND (tracestate ~ '^[ -~]+$'::text)))),
    CONSTRAINT email_queue_unrendered_has_work CHECK (((status <> 'unrendered'::text) OR (template IS NOT NULL) OR (dress IS NOT NULL)))
);

COMMENT ON TABLE mailroom.email_queue IS 'Every outgoing email, from enqueue to its final state; the worker is its only consumer. Content is stored rendered: what is sent is what is stored.';

COMMENT ON COLUMN mailroom.email_queue.recipient_email IS 'The first To address, normalised; indexes, logs and suppression key on it (more recipients: to_extra, cc, bcc).';
COMMENT ON COLUMN mailroom.email_queue.headers IS 'Custom headers, a JSON object of name -> text; names Mailroom writes itself are refused by the content rules.';
COMMENT ON COLUMN mailroom.email_queue.template IS 'Provenance: the template the content was rendered from (an unrendered email is rendered from it by the worker).';
COMMENT ON COLUMN mailroom.email_queue.locale IS 'Provenance: the template locale used.';
COMMENT ON COLUMN mailroom.email_queue.template_data IS 'Provenance: the data the template was rendered with (secret to read-only roles: it may hold codes and links).';
COMMENT ON COLUMN mailroom.email_queue.priority IS 'Higher is claimed first (-1000..1000), then earlier scheduled_for.';
COMMENT ON COLUMN mailroom.email_queue.scheduled_for IS 'When the email may be claimed; a retry moves it to next_retry_at.';
COMMENT ON COLUMN mailroom.email_queue.status IS 'unrendered: stored with a template, waiting for the renderer; pending: waiting to be claimed; assigned: claimed under a lease; sent: a relay answered 2xx to the end of DATA; bounced: a DSN reported a permanent failure after sent; failed: permanent refusal, retries exhausted, expired or a bad row (last_error says which); cancelled: by an operator; suppressed: the recipient is on the bounce or unsubscribe list.';
COMMENT ON COLUMN mailroom.email_queue.lease_owner IS 'The worker holding the lease while assigned.';
COMMENT ON COLUMN mailroom.email_queue.lease_token IS 'The claim (mailroom.claims) the email belongs to while assigned.';
COMMENT ON COLUMN mailroom.email_queue.lease_expires_at IS 'When an assigned email''s lease runs out; lease rescue then returns it to the queue.';
COMMENT ON COLUMN mailroom.email_queue.sender_account_id IS 'The sender account that last claimed (or sent) the email.';
COMMENT ON COLUMN mailroom.email_queue.retry_count IS 'Attempts charged to the email (transient failures); sender faults are never charged.';
COMMENT ON COLUMN mailroom.email_queue.max_retries IS 'Charged attempts allowed before the email fails.';
COMMENT ON COLUMN mailroom.email_queue.next_retry_at IS 'When the last transient failure said to try again (backoff with jitter).';
COMMENT ON COLUMN mailroom.email_queue.last_error IS 'The last failure, with the reply code (550 5.1.1 User unknown); required when failed.';
COMMENT ON COLUMN mailroom.email_queue.error_details IS 'The last failure as JSON: outcome class, SMTP code, enhanced code.';
COMMENT ON COLUMN mailroom.email_queue.suppression_reason IS 'Why the email was suppressed (bounce list or unsubscribe); required when suppressed.';
COMMENT ON COLUMN mailroom.email_queue.idempotency_key IS 'The caller''s key: the same key from the same role (enqueued_by) returns the first email instead of a second one.';
COMMENT ON COLUMN mailroom.email_queue.transactional IS 'False for bulk or marketing email: it gets a one-click unsubscribe link and header.';
COMMENT ON COLUMN mailroom.email_queue.track_opens IS 'Whether the email carries an open-tracking pixel.';
COMMENT ON COLUMN mailroom.email_queue.track_clicks IS 'Whether the email''s links go through the tracker (mailroom.tracked_links).';
COMMENT ON COLUMN mailroom.email_queue.tracking_token IS 'Names the email in open-pixel URLs; never enough to unsubscribe (image proxies fetch it).';
COMMENT ON COLUMN mailroom.email_queue.reference_type IS 'What produced the email (reminder_log, token, event, inbox, ...), with reference_id.';
COMMENT ON COLUMN mailroom.email_queue.reference_id IS 'The id of the producing row, in the table reference_type names.';
COMMENT ON COLUMN mailroom.email_queue.message_id IS 'The stable Message-ID header, the same on every attempt.';
COMMENT ON COLUMN mailroom.email_queue.created_by IS 'Label of the caller that enqueued (cli, console, an application''s name); informational.';
COMMENT ON COLUMN mailroom.email_queue.assigned_at IS 'When the email was last claimed.';
COMMENT ON COLUMN mailroom.email_queue.sent_at IS 'When the relay accepted the email (2xx to the end of DATA); kept when it bounces later.';
COMMENT ON COLUMN mailroom.email_queue.finished_at IS 'When the email reached a final state (sent, failed, cancelled, suppressed).';
COMMENT ON COLUMN mailroom.email_queue.unsubscribe_token IS 'One-click unsubscribe token of non-transactional email; separate from tracking_token on purpose.';
COMMENT ON COLUMN mailroom.email_queue.to_extra IS 'To addresses after the first (NULL for the common single recipient).';
COMMENT ON COLUMN mailroom.email_queue.bcc IS 'Envelope-only recipients: never written in a header.';
COMMENT ON COLUMN mailroom.email_queue.reply_to IS 'Reply-To addresses.';
COMMENT ON COLUMN mailroom.email_queue.enqueued_by IS 'The database role that enqueued this email (session_user): the scope of its idempotency key and of mailroom.my_emails.';
COMMENT ON COLUMN mailroom.email_queue.failure_kind IS 'Why a failed email failed, written by the engine: expired (in the queue longer than the queue lifetime, MAILROOM_QUEUE_LIFETIME_SECONDS; retention archives it after MAILROOM_ARCHIVE_EXPIRED_AFTER_DAYS), attempt (an attempt failed it: a permanent refusal, a bad mailbox, retries used up, or an error of ours while sending). NULL unless failed, and NULL for email failed outside the engine (a template that did not render).';
COMMENT ON COLUMN mailroom.email_queue.traceparent IS 'W3C traceparent of the code that enqueued the email (its span); the worker''s delivery spans are its children. Default: the transaction''s mailroom.traceparent setting.';
COMMENT ON COLUMN mailroom.email_queue.tracestate IS 'W3C tracestate that came with traceparent (vendors'' trace data, passed on unread). Default: the transaction''s mailroom.tracestate setting.';
COMMENT ON COLUMN mailroom.email_queue.correlation_id IS 'The correlation id of the event the email came from (an order event''s, or its message id); in the worker''s logs and spans. Default: the transaction''s mailroom.correlation_id setting.';
COMMENT ON COLUMN mailroom.email_queue.dress IS 'For email enqueued from SQL that needs campaign dress: what the worker applies when it renders it ({"track": true, false or null}; null: as MAILROOM_TRACK_CAMPAIGNS says). NULL once applied, and for email enqueued from Python, which is dressed at enqueue.';
COMMENT ON COLUMN mailroom.email_queue.expires_at IS 'When the email stops being worth sending (a one-time code''s expiry, say): past it, it is failed as expired instead of sent. NULL: only the queue lifetime (MAILROOM_QUEUE_LIFETIME_SECONDS) applies.';
COMMENT ON COLUMN mailroom.email_queue.attachments IS 'How many files (mailroom.email_attachments) the email carries; 0 for most.';
COMMENT ON COLUMN mailroom.email_queue.stream IS 'The message stream: only a sender account serving it sends the email (transactional by default, broadcast for email that is not transactional).';
COMMENT ON COLUMN mailroom.email_queue.from_email IS 'The email''s own From address (NULL: the sending account''s); only an account that may send for its domain sends it.';
COMMENT ON COLUMN mailroom.email_queue.from_name IS 'The display name of the email''s own From.';

ALTER TABLE mailroom.email_queue ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME mailroom.email_queue_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.email_queue
    ADD CONSTRAINT email_queue_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.email_queue
    ADD CONSTRAINT email_queue_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE SET NULL;

CREATE INDEX email_queue_bounced_idx ON mailroom.email_queue USING btree (sent_at) WHERE (status = 'bounced'::text);

CREATE INDEX email_queue_campaign_idx ON mailroom.email_queue USING btree (campaign_id) WHERE (campaign_id IS NOT NULL);

CREATE INDEX email_queue_cancelled_idx ON mailroom.email_queue USING btree (finished_at) WHERE (status = 'cancelled'::text);

CREATE INDEX email_queue_claim_idx ON mailroom.email_queue USING btree (stream, priority DESC, scheduled_for, id) WHERE (status = 'pending'::text);

CREATE INDEX email_queue_due_idx ON mailroom.email_queue USING btree (scheduled_for) WHERE (status = 'pending'::text);

CREATE UNIQUE INDEX email_queue_enqueued_by_idempotency_key_key ON mailroom.email_queue USING btree (enqueued_by, idempotency_key) WHERE (idempotency_key IS NOT NULL);

CREATE INDEX email_queue_expires_idx ON mailroom.email_queue USING btree (expires_at) WHERE ((expires_at IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'unrendered'::text])));

CREATE INDEX email_queue_failed_idx ON mailroom.email_queue USING btree (finished_at DESC) WHERE (status = 'failed'::text);

CREATE INDEX email_queue_lease_idx ON mailroom.email_queue USING btree (lease_expires_at) WHERE (status = 'assigned'::text);

CREATE INDEX email_queue_recipient_idx ON mailroom.email_queue USING btree (lower(recipient_email));

CREATE INDEX email_queue_reference_idx ON mailroom.email_queue USING btree (reference_type, reference_id) WHERE (reference_type IS NOT NULL);

CREATE INDEX email_queue_retrying_idx ON mailroom.email_queue USING btree (scheduled_for, id) WHERE ((status = 'pending'::text) AND (retry_count > 0));

CREATE INDEX email_queue_sent_idx ON mailroom.email_queue USING btree (sent_at) WHERE (status = 'sent'::text);

CREATE INDEX email_queue_suppressed_idx ON mailroom.email_queue USING btree (finished_at DESC) WHERE (status = 'suppressed'::text);

CREATE UNIQUE INDEX email_queue_tracking_token_idx ON mailroom.email_queue USING btree (tracking_token) WHERE (tracking_token IS NOT NULL);

CREATE INDEX email_queue_unrendered_idx ON mailroom.email_queue USING btree (id) WHERE (status = 'unrendered'::text);

CREATE UNIQUE INDEX email_queue_unsubscribe_token_idx ON mailroom.email_queue USING btree (unsubscribe_token) WHERE (unsubscribe_token IS NOT NULL);

CREATE FUNCTION mailroom.email_queue_archive_no_shared_token() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE mailroom.archived_emails a SET unsubscribe_token = NULL
    FROM old_rows o
    WHERE a.email_id = o.id AND a.unsubscribe_token IS NOT NULL
      AND (o.to_extra IS NOT NULL OR o.cc IS NOT NULL OR o.bcc IS NOT NULL);
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION mailroom.email_queue_archive_no_shared_token() IS 'Statement trigger: an archived many-recipient email keeps no unsubscribe token (it would name only the first recipient).';

CREATE FUNCTION mailroom.email_queue_before_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    -- Bulk COPY sends NULL for "now": the database clock decides, not the client's.
    NEW.scheduled_for := coalesce(NEW.scheduled_for, now());
    IF NEW.status NOT IN ('pending', 'unrendered') THEN
        RAISE EXCEPTION 'a new email starts pending (or unrendered), not %', NEW.status
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.email_queue_before_insert() IS 'Row trigger: fills a NULL scheduled_for with the database''s now() and refuses a new email that is not pending.';

CREATE FUNCTION mailroom.email_queue_before_update() RETURNS trigger
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

COMMENT ON FUNCTION mailroom.email_queue_before_update() IS 'Row trigger: the allowed status transitions and their timestamps; a lease exists only while assigned; created_at immutable.';

CREATE FUNCTION mailroom.email_queue_clear_failure_kind() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.failure_kind := NULL;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.email_queue_clear_failure_kind() IS 'Forget why an email failed once it is no longer failed (see email_queue.failure_kind).';

CREATE FUNCTION mailroom.email_queue_content_rules_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    problem text;
BEGIN
    SELECT mailroom.email_content_problem(n) INTO problem
    FROM new_rows n
    WHERE (length(n.recipient_email) > 254
           OR strpos(n.recipient_email, '@') > 64 + 1
           OR n.recipient_email !~  E'^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?$'
           OR (length(n.recipient_email) > 67
               AND substring(n.recipient_email FROM strpos(n.recipient_email, '@') + 1) ~ '[A-Za-z0-9-]{64}')
           OR n.subject ~  E'[\\x00-\\x1f\\x7f\\x85\\u2028\\u2029]' OR strpos(n.subject, '=?') > 0
           OR length(n.subject) > 998 OR btrim(n.subject, E' \t') = ''
           OR n.recipient_name ~  E'[\\x00-\\x1f\\x7f\\x85\\u2028\\u2029]' OR strpos(n.recipient_name, '=?') > 0
           OR length(n.recipient_name) > 255
           OR coalesce(octet_length(n.text_body), 0) + coalesce(octet_length(n.html_body), 0) > 26214400
           OR n.headers <> '{}'::jsonb
           OR n.to_extra IS NOT NULL OR n.cc IS NOT NULL OR n.bcc IS NOT NULL OR n.reply_to IS NOT NULL)
      AND mailroom.email_content_problem(n) IS NOT NULL
    LIMIT 1;
    IF problem IS NOT NULL THEN
        PERFORM mailroom.refuse_content(problem);
    END IF;
    RETURN NULL;
END $_$;

COMMENT ON FUNCTION mailroom.email_queue_content_rules_insert() IS 'Statement trigger: the content rules for inserted rows, checked as a set (simple rows cost a few regular expressions).';

CREATE FUNCTION mailroom.email_queue_content_rules_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    problem text := mailroom.email_content_problem(NEW);
BEGIN
    IF problem IS NOT NULL THEN
        PERFORM mailroom.refuse_content(problem);
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.email_queue_content_rules_update() IS 'Row trigger: the content rules for an update of a content column (status changes do not pay for it).';

CREATE FUNCTION mailroom.email_queue_keep_archived() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    keep_from timestamptz;
BEGIN
    INSERT INTO mailroom.archived_emails
        (email_id, sent_at, campaign_id, unsubscribe_token, track_opens, track_clicks,
         status, finished_at, last_error, bounced)
    SELECT id, sent_at, campaign_id,
           CASE WHEN status = 'sent' AND NOT transactional THEN unsubscribe_token END,
           track_opens, track_clicks, status, coalesce(finished_at, sent_at),
           regexp_replace(last_error, '[A-Za-z0-9.!#$%&''*+/=?^_`{|}~-]+@', '***@', 'g'),
           status = 'bounced' OR coalesce(error_details ->> 'outcome' = 'bounced', false)
    FROM old_rows
    WHERE status IN ('sent', 'bounced', 'failed', 'cancelled', 'suppressed')
      AND (campaign_id IS NOT NULL
           OR (status = 'sent' AND unsubscribe_token IS NOT NULL AND NOT transactional))
    ON CONFLICT DO NOTHING;
    -- A day of margin: an email's last send log is written in the transaction that ends it. Sent
    -- rows go by sent_at as they always did; the others by finished_at (both BRIN-indexed).
    keep_from := (SELECT min(attempted_at) FROM mailroom.send_logs) - interval '1 day';
    DELETE FROM mailroom.archived_emails WHERE sent_at < keep_from OR finished_at < keep_from;
    RETURN NULL;
END;
$_$;

COMMENT ON FUNCTION mailroom.email_queue_keep_archived() IS 'Statement trigger: deleted final-state email of a campaign, or sent with an unsubscribe token, leaves a row in archived_emails; rows older than every send log are pruned.';

CREATE FUNCTION mailroom.email_queue_notify_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('mailroom_queue', 'insert');
    PERFORM pg_notify('mailroom_changes', json_build_object('table', 'email_queue', 'op', TG_OP)::text);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.email_queue_notify_insert() IS 'Statement trigger: wakes the workers (NOTIFY mailroom_queue) and the console after an insert.';

CREATE FUNCTION mailroom.email_queue_notify_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'pending') THEN
        PERFORM pg_notify('mailroom_queue', 'pending');
    END IF;
    PERFORM pg_notify('mailroom_changes', json_build_object('table', 'email_queue', 'op', TG_OP)::text);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.email_queue_notify_update() IS 'Statement trigger: wakes the workers when an update left email pending, and the console.';

CREATE FUNCTION mailroom.email_queue_suppress_listed() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mailroom.bounce_list) AND NOT EXISTS (SELECT 1 FROM mailroom.unsubscribe_list) THEN
        RETURN NULL;  -- nothing suppressed: nothing to look up
    END IF;
    UPDATE mailroom.email_queue q SET status = 'suppressed', suppression_reason = s.reason
    FROM (SELECT n.id, mailroom.email_suppression(n.status, n.recipient_email, n.to_extra, n.cc, n.bcc,
                                                  n.transactional) AS reason
          FROM new_rows n WHERE n.status = 'pending') s
    WHERE q.id = s.id AND s.reason IS NOT NULL;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.email_queue_suppress_listed() IS 'Statement trigger: a new email whose every recipient is suppressed is stored suppressed at once, with the reason.';

CREATE FUNCTION mailroom.email_queue_webhook_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION mailroom.email_queue_webhook_events() IS 'Statement trigger: an event for each email whose status became sent, bounced, failed (expired when it outlived its lifetime), suppressed or cancelled, while an endpoint listens.';

CREATE FUNCTION mailroom.events_follow_email() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    outcome record;
BEGIN
    SELECT * INTO outcome FROM mailroom.event_outcome(NEW.status, NEW.last_error, NEW.failure_kind, NEW.suppression_reason);
    -- email_id = NEW.id: an email that only names an event (any role may enqueue one) changes nothing.
    UPDATE mailroom.events e
    SET status = outcome.status, failure_reason = outcome.reason, version = e.version + 1,
        executed_at = CASE outcome.status WHEN 'completed' THEN NEW.sent_at
                                          WHEN 'failed' THEN e.executed_at END
    WHERE e.id = NEW.reference_id::uuid AND e.email_id = NEW.id
      AND e.status IN ('queued', 'completed', 'failed')
      AND (e.status, e.failure_reason) IS DISTINCT FROM (outcome.status, outcome.reason);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.events_follow_email() IS 'Row trigger: a birthday email''s outcome becomes its event''s status (completed, or failed with the reason; queued again when an operator retries it).';

CREATE FUNCTION mailroom.reminder_logs_follow_email() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE mailroom.reminder_logs r
    SET status = CASE NEW.status
                     WHEN 'sent' THEN 'sent'
                     WHEN 'failed' THEN CASE WHEN NEW.error_details ->> 'outcome' = 'bounced'
                                             THEN 'bounced' ELSE 'failed' END
                     WHEN 'bounced' THEN 'bounced'
                     WHEN 'suppressed' THEN 'suppressed'
                     WHEN 'cancelled' THEN 'cancelled'
                     ELSE 'queued'  -- pending again: retried by an operator
                 END,
        finished_at = CASE WHEN NEW.status IN ('sent', 'failed', 'suppressed', 'cancelled', 'bounced')
                           THEN coalesce(NEW.finished_at, now()) END,
        error_message = CASE NEW.status
                            WHEN 'failed' THEN NEW.last_error
                            WHEN 'bounced' THEN NEW.last_error
                            WHEN 'suppressed' THEN NEW.suppression_reason
                            WHEN 'cancelled' THEN 'the reminder email was cancelled'
                        END
    WHERE r.id = NEW.reference_id::bigint AND r.email_id = NEW.id;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.reminder_logs_follow_email() IS 'Row trigger: a reminder email''s outcome is copied into its reminder_logs row.';

CREATE TRIGGER email_queue_before_insert BEFORE INSERT ON mailroom.email_queue FOR EACH ROW WHEN (((new.scheduled_for IS NULL) OR (new.status <> 'pending'::text))) EXECUTE FUNCTION mailroom.email_queue_before_insert();

COMMENT ON TRIGGER email_queue_before_insert ON mailroom.email_queue IS 'Only for rows without scheduled_for or not pending, so bulk COPY skips PL/pgSQL.';

CREATE TRIGGER email_queue_before_update BEFORE UPDATE ON mailroom.email_queue FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_before_update();

COMMENT ON TRIGGER email_queue_before_update ON mailroom.email_queue IS 'Status transitions and their timestamps.';

CREATE TRIGGER email_queue_clear_failure_kind BEFORE UPDATE OF status ON mailroom.email_queue FOR EACH ROW WHEN (((new.failure_kind IS NOT NULL) AND (new.status <> 'failed'::text))) EXECUTE FUNCTION mailroom.email_queue_clear_failure_kind();

COMMENT ON TRIGGER email_queue_clear_failure_kind ON mailroom.email_queue IS 'An email leaving the failed state (an operator''s retry or cancel) loses its failure_kind.';

CREATE TRIGGER email_queue_content_rules_insert AFTER INSERT ON mailroom.email_queue REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_content_rules_insert();

COMMENT ON TRIGGER email_queue_content_rules_insert ON mailroom.email_queue IS 'Content rules for every inserted row.';

CREATE TRIGGER email_queue_content_rules_update BEFORE UPDATE OF recipient_email, recipient_name, subject, text_body, html_body, headers, to_extra, cc, bcc, reply_to ON mailroom.email_queue FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_content_rules_update();

COMMENT ON TRIGGER email_queue_content_rules_update ON mailroom.email_queue IS 'Content rules when content columns change.';

CREATE TRIGGER email_queue_event_outcome AFTER UPDATE OF status ON mailroom.email_queue FOR EACH ROW WHEN (((new.reference_type = 'event'::text) AND (new.status IS DISTINCT FROM old.status) AND (new.status <> 'assigned'::text) AND (new.reference_id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'::text))) EXECUTE FUNCTION mailroom.events_follow_email();

COMMENT ON TRIGGER email_queue_event_outcome ON mailroom.email_queue IS 'Birthday emails only (reference_type event, a well-formed event id), when the status changed to anything but assigned.';

CREATE TRIGGER email_queue_keep_archived AFTER DELETE ON mailroom.email_queue REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_keep_archived();

COMMENT ON TRIGGER email_queue_keep_archived ON mailroom.email_queue IS 'Deleted email leaves its archived_emails row.';

CREATE TRIGGER email_queue_keep_archived_one_recipient AFTER DELETE ON mailroom.email_queue REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_archive_no_shared_token();

COMMENT ON TRIGGER email_queue_keep_archived_one_recipient ON mailroom.email_queue IS 'Runs after email_queue_keep_archived (name order): drops the token of many-recipient email.';

CREATE TRIGGER email_queue_notify_delete AFTER DELETE ON mailroom.email_queue FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER email_queue_notify_delete ON mailroom.email_queue IS 'Tells the console.';

CREATE TRIGGER email_queue_notify_insert AFTER INSERT ON mailroom.email_queue FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_notify_insert();

COMMENT ON TRIGGER email_queue_notify_insert ON mailroom.email_queue IS 'Wakes the workers and the console.';

CREATE TRIGGER email_queue_notify_update AFTER UPDATE ON mailroom.email_queue REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_notify_update();

COMMENT ON TRIGGER email_queue_notify_update ON mailroom.email_queue IS 'Wakes the workers when email went back to pending; tells the console.';

CREATE TRIGGER email_queue_reminder_outcome AFTER UPDATE OF status ON mailroom.email_queue FOR EACH ROW WHEN (((new.reference_type = 'reminder_log'::text) AND (new.status IS DISTINCT FROM old.status) AND (new.status <> 'assigned'::text) AND (new.reference_id ~ '^[0-9]{1,18}$'::text))) EXECUTE FUNCTION mailroom.reminder_logs_follow_email();

COMMENT ON TRIGGER email_queue_reminder_outcome ON mailroom.email_queue IS 'Reminder emails only, when the status changed to anything but assigned.';

CREATE TRIGGER email_queue_suppress_listed AFTER INSERT ON mailroom.email_queue REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_suppress_listed();

COMMENT ON TRIGGER email_queue_suppress_listed ON mailroom.email_queue IS 'Stores a new email to a suppressed address suppressed at once (the claim checks again later).';

CREATE TRIGGER email_queue_webhook_events AFTER UPDATE ON mailroom.email_queue REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_webhook_events();

COMMENT ON TRIGGER email_queue_webhook_events ON mailroom.email_queue IS 'Writes mailroom.webhook_events for the emails whose outcome this statement decided.';

-- claims

CREATE TABLE mailroom.claims (
    lease_token uuid NOT NULL,
    sender_account_id bigint NOT NULL,
    owner text NOT NULL,
    day date NOT NULL,
    reserved integer NOT NULL,
    used integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT claims_reserved_not_negative CHECK ((reserved >= 0)),
    CONSTRAINT claims_used_not_negative CHECK ((used >= 0))
);

COMMENT ON TABLE mailroom.claims IS 'One batch claimed under one lease token for one sender: its lease and the quota reserved for it. Every transaction that touches a claim locks in one order: the claim row, then its sender row (sender_accounts, FOR UPDATE), then its emails in id order, so workers claiming, finishing and rescuing at once never deadlock (an email''s sender_account_id is a foreign key: writing it share-locks the sender row, and a quota reservation taken after that would wait on the next worker''s share lock, and it on ours). Ended by the worker or by lease rescue, which return the unused quota with the unsent emails.';

COMMENT ON COLUMN mailroom.claims.owner IS 'The worker that made the claim.';
COMMENT ON COLUMN mailroom.claims.day IS 'The UTC day the quota was reserved on; unused quota goes back to that day.';
COMMENT ON COLUMN mailroom.claims.reserved IS 'Sends of the day''s quota reserved for the batch.';
COMMENT ON COLUMN mailroom.claims.used IS 'Quota used by permanent refusals (sends are counted from the sent journal).';
COMMENT ON COLUMN mailroom.claims.expires_at IS 'When the lease runs out and another worker may rescue the claim.';

ALTER TABLE ONLY mailroom.claims
    ADD CONSTRAINT claims_pkey PRIMARY KEY (lease_token);

ALTER TABLE ONLY mailroom.claims
    ADD CONSTRAINT claims_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE CASCADE;

CREATE INDEX claims_expires_idx ON mailroom.claims USING btree (expires_at);

-- sent_journal

CREATE TABLE mailroom.sent_journal (
    email_id bigint NOT NULL,
    lease_token uuid NOT NULL,
    sender_account_id bigint NOT NULL,
    sent_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    smtp_code integer,
    enhanced_code text,
    response text NOT NULL,
    duration_ms integer NOT NULL,
    message_id text,
    worker text NOT NULL
)
WITH (autovacuum_vacuum_threshold='1000', autovacuum_vacuum_scale_factor='0');

COMMENT ON TABLE mailroom.sent_journal IS 'Write-ahead record of every email a relay accepted, committed before the next message on the connection; moved into email_queue and send_logs at the end of the batch, or by lease rescue, so a journalled email is never sent again.';

COMMENT ON COLUMN mailroom.sent_journal.lease_token IS 'The claim the send belongs to.';
COMMENT ON COLUMN mailroom.sent_journal.response IS 'The relay''s reply to the end of DATA.';
COMMENT ON COLUMN mailroom.sent_journal.worker IS 'The worker that sent it.';

CREATE INDEX sent_journal_token_email_idx ON mailroom.sent_journal USING btree (lease_token, email_id);

-- send_logs

CREATE TABLE mailroom.send_logs (
    id bigint NOT NULL,
    attempted_at timestamp with time zone DEFAULT now() NOT NULL,
    email_id bigint NOT NULL,
    sender_account_id bigint,
    recipient_email text NOT NULL,
    campaign_id text,
    attempt integer NOT NULL,
    outcome text NOT NULL,
    smtp_code integer,
    enhanced_code text,
    response text,
    duration_ms integer,
    worker text,
    CONSTRAINT send_logs_attempt_positive CHECK ((attempt >= 1)),
    CONSTRAINT send_logs_duration_ms_not_negative CHECK ((duration_ms >= 0)),
    CONSTRAINT send_logs_enhanced_code_format CHECK ((enhanced_code ~ '^[245]\.\d{1,3}\.\d{1,3}$'::text)),
    CONSTRAINT send_logs_outcome_known CHECK ((outcome = ANY (ARRAY['sent'::text, 'transient'::text, 'permanent'::text, 'bounced'::text, 'auth_failed'::text, 'local_error'::text, 'suppressed'::text, 'sender_unreachable'::text]))),
    CONSTRAINT send_logs_smtp_code_range CHECK (((smtp_code >= 100) AND (smtp_code <= 599)))
)
PARTITION BY RANGE (attempted_at);

COMMENT ON TABLE mailroom.send_logs IS 'Every delivery attempt, partitioned by month of attempted_at (partitions made ahead by maintenance, dropped or archived by retention).';

COMMENT ON COLUMN mailroom.send_logs.attempt IS 'Which attempt of the email this was (1 for the first).';
COMMENT ON COLUMN mailroom.send_logs.outcome IS 'sent: 2xx to the end of DATA; transient: 4xx or no reply, retried; permanent: 5xx, the email fails; bounced: bad mailbox, fails and the address goes on the bounce list; auth_failed: the sender was suspended, email returned uncharged; local_error: our own fault (bad row, 5xx to our commands); suppressed: dropped at claim time; sender_unreachable: the relay failed, the circuit opened, email returned uncharged.';
COMMENT ON COLUMN mailroom.send_logs.response IS 'The relay''s reply text (or our own error).';
COMMENT ON COLUMN mailroom.send_logs.duration_ms IS 'How long the attempt took, in milliseconds.';
COMMENT ON COLUMN mailroom.send_logs.worker IS 'The worker that made the attempt.';

ALTER TABLE mailroom.send_logs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.send_logs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.send_logs
    ADD CONSTRAINT send_logs_pkey PRIMARY KEY (id, attempted_at);

CREATE INDEX send_logs_attempted_idx ON ONLY mailroom.send_logs USING btree (attempted_at);

CREATE INDEX send_logs_campaign_idx ON ONLY mailroom.send_logs USING btree (campaign_id, attempted_at) WHERE (campaign_id IS NOT NULL);

CREATE INDEX send_logs_email_idx ON ONLY mailroom.send_logs USING btree (email_id, attempted_at);

CREATE INDEX send_logs_recipient_idx ON ONLY mailroom.send_logs USING btree (lower(recipient_email), attempted_at);

CREATE INDEX send_logs_sender_idx ON ONLY mailroom.send_logs USING btree (sender_account_id, attempted_at);

-- send_logs_default

CREATE TABLE mailroom.send_logs_default (
    id bigint CONSTRAINT send_logs_id_not_null NOT NULL,
    attempted_at timestamp with time zone DEFAULT now() CONSTRAINT send_logs_attempted_at_not_null NOT NULL,
    email_id bigint CONSTRAINT send_logs_email_id_not_null NOT NULL,
    sender_account_id bigint,
    recipient_email text CONSTRAINT send_logs_recipient_email_not_null NOT NULL,
    campaign_id text,
    attempt integer CONSTRAINT send_logs_attempt_not_null NOT NULL,
    outcome text CONSTRAINT send_logs_outcome_not_null NOT NULL,
    smtp_code integer,
    enhanced_code text,
    response text,
    duration_ms integer,
    worker text,
    CONSTRAINT send_logs_attempt_positive CHECK ((attempt >= 1)),
    CONSTRAINT send_logs_duration_ms_not_negative CHECK ((duration_ms >= 0)),
    CONSTRAINT send_logs_enhanced_code_format CHECK ((enhanced_code ~ '^[245]\.\d{1,3}\.\d{1,3}$'::text)),
    CONSTRAINT send_logs_outcome_known CHECK ((outcome = ANY (ARRAY['sent'::text, 'transient'::text, 'permanent'::text, 'bounced'::text, 'auth_failed'::text, 'local_error'::text, 'suppressed'::text, 'sender_unreachable'::text]))),
    CONSTRAINT send_logs_smtp_code_range CHECK (((smtp_code >= 100) AND (smtp_code <= 599)))
);

COMMENT ON TABLE mailroom.send_logs_default IS 'Attempts outside every month partition (none when maintenance keeps partitions ahead).';

ALTER TABLE ONLY mailroom.send_logs ATTACH PARTITION mailroom.send_logs_default DEFAULT;

ALTER TABLE ONLY mailroom.send_logs_default
    ADD CONSTRAINT send_logs_default_pkey PRIMARY KEY (id, attempted_at);

CREATE INDEX send_logs_default_attempted_at_idx ON mailroom.send_logs_default USING btree (attempted_at);

CREATE INDEX send_logs_default_campaign_id_attempted_at_idx ON mailroom.send_logs_default USING btree (campaign_id, attempted_at) WHERE (campaign_id IS NOT NULL);

CREATE INDEX send_logs_default_email_id_attempted_at_idx ON mailroom.send_logs_default USING btree (email_id, attempted_at);

CREATE INDEX send_logs_default_lower_attempted_at_idx ON mailroom.send_logs_default USING btree (lower(recipient_email), attempted_at);

CREATE INDEX send_logs_default_sender_account_id_attempted_at_idx ON mailroom.send_logs_default USING btree (sender_account_id, attempted_at);

ALTER INDEX mailroom.send_logs_attempted_idx ATTACH PARTITION mailroom.send_logs_default_attempted_at_idx;

ALTER INDEX mailroom.send_logs_campaign_idx ATTACH PARTITION mailroom.send_logs_default_campaign_id_attempted_at_idx;

ALTER INDEX mailroom.send_logs_email_idx ATTACH PARTITION mailroom.send_logs_default_email_id_attempted_at_idx;

ALTER INDEX mailroom.send_logs_recipient_idx ATTACH PARTITION mailroom.send_logs_default_lower_attempted_at_idx;

ALTER INDEX mailroom.send_logs_pkey ATTACH PARTITION mailroom.send_logs_default_pkey;

ALTER INDEX mailroom.send_logs_sender_idx ATTACH PARTITION mailroom.send_logs_default_sender_account_id_attempted_at_idx;

-- recipient_outcomes

CREATE TABLE mailroom.recipient_outcomes (
    id bigint NOT NULL,
    email_id bigint NOT NULL,
    recipient text NOT NULL,
    kind text NOT NULL,
    outcome text NOT NULL,
    smtp_code integer,
    enhanced_code text,
    reason text,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT recipient_outcomes_enhanced_code_format CHECK ((enhanced_code ~ '^[245]\.\d{1,3}\.\d{1,3}$'::text)),
    CONSTRAINT recipient_outcomes_kind_known CHECK ((kind = ANY (ARRAY['to'::text, 'cc'::text, 'bcc'::text]))),
    CONSTRAINT recipient_outcomes_outcome_known CHECK ((outcome = ANY (ARRAY['suppressed'::text, 'refused'::text, 'accepted'::text]))),
    CONSTRAINT recipient_outcomes_reason_length CHECK ((length(reason) <= 2000)),
    CONSTRAINT recipient_outcomes_recipient_length CHECK (((length(recipient) >= 3) AND (length(recipient) <= 254))),
    CONSTRAINT recipient_outcomes_smtp_code_range CHECK (((smtp_code >= 100) AND (smtp_code <= 599)))
);

COMMENT ON TABLE mailroom.recipient_outcomes IS 'What happened to each recipient of a many-recipient email that is not the email''s own outcome: dropped at claim time or refused at RCPT while others were accepted.';

COMMENT ON COLUMN mailroom.recipient_outcomes.kind IS 'Which list the recipient was on: to, cc or bcc.';
COMMENT ON COLUMN mailroom.recipient_outcomes.outcome IS 'suppressed: dropped at claim time (bounce or unsubscribe list); refused: the relay refused it at RCPT; accepted: taken by the relay.';
COMMENT ON COLUMN mailroom.recipient_outcomes.reason IS 'The suppression reason or the relay''s reply.';
COMMENT ON COLUMN mailroom.recipient_outcomes.at IS 'When the outcome was recorded.';

ALTER TABLE mailroom.recipient_outcomes ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.recipient_outcomes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.recipient_outcomes
    ADD CONSTRAINT recipient_outcomes_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.recipient_outcomes
    ADD CONSTRAINT recipient_outcomes_email_exists FOREIGN KEY (email_id) REFERENCES mailroom.email_queue(id) ON DELETE CASCADE;

CREATE INDEX recipient_outcomes_email_idx ON mailroom.recipient_outcomes USING btree (email_id);

-- archived_emails

CREATE TABLE mailroom.archived_emails (
    email_id bigint NOT NULL,
    sent_at timestamp with time zone,
    campaign_id text,
    unsubscribe_token uuid,
    track_opens boolean NOT NULL,
    track_clicks boolean NOT NULL,
    status text DEFAULT 'sent'::text NOT NULL,
    finished_at timestamp with time zone,
    last_error text,
    bounced boolean DEFAULT false NOT NULL,
    CONSTRAINT archived_emails_sent_at_matches_status CHECK (((status = ANY (ARRAY['sent'::text, 'bounced'::text])) = (sent_at IS NOT NULL))),
    CONSTRAINT archived_emails_status_known CHECK ((status = ANY (ARRAY['sent'::text, 'bounced'::text, 'failed'::text, 'cancelled'::text, 'suppressed'::text]))),
    CONSTRAINT archived_emails_unsent_has_finished_at CHECK (((status = ANY (ARRAY['sent'::text, 'bounced'::text])) OR (finished_at IS NOT NULL)))
);

COMMENT ON TABLE mailroom.archived_emails IS 'What outlives an email retention archived and deleted: its campaign, final status and unsubscribe token (old links keep working), never an address.';

COMMENT ON COLUMN mailroom.archived_emails.unsubscribe_token IS 'The email''s one-click unsubscribe token; NULL for many-recipient email (its token named nobody).';
COMMENT ON COLUMN mailroom.archived_emails.track_opens IS 'Whether it carried an open pixel (campaign stats still count it).';
COMMENT ON COLUMN mailroom.archived_emails.track_clicks IS 'Whether it carried tracked links (campaign stats still count it).';
COMMENT ON COLUMN mailroom.archived_emails.status IS 'The final status the email was archived in: sent, bounced, failed, cancelled or suppressed.';
COMMENT ON COLUMN mailroom.archived_emails.finished_at IS 'When the email ended (for sent rows written before 0006: sent_at).';
COMMENT ON COLUMN mailroom.archived_emails.last_error IS 'The last error, any address in it masked to ***@domain.';
COMMENT ON COLUMN mailroom.archived_emails.bounced IS 'Whether the email bounced (campaign stats count bounces from it).';

ALTER TABLE ONLY mailroom.archived_emails
    ADD CONSTRAINT archived_emails_pkey PRIMARY KEY (email_id);

CREATE INDEX archived_emails_campaign_idx ON mailroom.archived_emails USING btree (campaign_id) WHERE (campaign_id IS NOT NULL);

CREATE INDEX archived_emails_finished_at_idx ON mailroom.archived_emails USING brin (finished_at);

CREATE INDEX archived_emails_sent_at_idx ON mailroom.archived_emails USING brin (sent_at);

CREATE UNIQUE INDEX archived_emails_unsubscribe_token_idx ON mailroom.archived_emails USING btree (unsubscribe_token) WHERE (unsubscribe_token IS NOT NULL);

-- email_attachments

CREATE TABLE mailroom.email_attachments (
    email_id bigint NOT NULL,
    "position" smallint NOT NULL,
    sha256 bytea NOT NULL,
    filename text NOT NULL,
    content_type text NOT NULL,
    content_id text,
    CONSTRAINT email_attachments_content_id CHECK (((content_id IS NULL) OR (content_id ~ '^[A-Za-z0-9._+-]{1,64}(@[A-Za-z0-9.-]{1,190})?$'::text))),
    CONSTRAINT email_attachments_content_type CHECK ((content_type ~ '^[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}$'::text)),
    CONSTRAINT email_attachments_filename CHECK ((((length(filename) >= 1) AND (length(filename) <= 255)) AND (filename !~ '[\x01-\x1f\x7f/\\]'::text) AND (filename <> ALL (ARRAY['.'::text, '..'::text])))),
    CONSTRAINT email_attachments_position CHECK ((("position" >= 1) AND ("position" <= 100)))
);

COMMENT ON TABLE mailroom.email_attachments IS 'The files of an email, in order: which content (mailroom.attachment_contents), under which filename and content type, and for an inline image its Content-ID. Deleted with the email.';

ALTER TABLE ONLY mailroom.email_attachments
    ADD CONSTRAINT email_attachments_pkey PRIMARY KEY (email_id, "position");

ALTER TABLE ONLY mailroom.email_attachments
    ADD CONSTRAINT email_attachments_content FOREIGN KEY (sha256) REFERENCES mailroom.attachment_contents(sha256);

ALTER TABLE ONLY mailroom.email_attachments
    ADD CONSTRAINT email_attachments_email FOREIGN KEY (email_id) REFERENCES mailroom.email_queue(id) ON DELETE CASCADE;

CREATE INDEX email_attachments_sha256_idx ON mailroom.email_attachments USING btree (sha256);

CREATE FUNCTION mailroom.email_attachments_after_delete() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    PERFORM mailroom.drop_unused_attachments(ARRAY(SELECT DISTINCT o.sha256 FROM gone o));
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.email_attachments_after_delete() IS 'After files are deleted (with their email, by archiving, retention or privacy erasure): the contents no email carries any more go too.';

CREATE TRIGGER email_attachments_drop_unused AFTER DELETE ON mailroom.email_attachments REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_attachments_after_delete();

COMMENT ON TRIGGER email_attachments_drop_unused ON mailroom.email_attachments IS 'Deletes the contents the deleted files leave unused (mailroom.drop_unused_attachments).';

-- attachment_contents

CREATE TABLE mailroom.attachment_contents (
    sha256 bytea NOT NULL,
    content bytea NOT NULL,
    size integer GENERATED ALWAYS AS (octet_length(content)) STORED,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT attachment_contents_sha256 CHECK ((sha256 = sha256(content))),
    CONSTRAINT attachment_contents_size CHECK (((octet_length(content) >= 1) AND (octet_length(content) <= 26214400)))
);
ALTER TABLE ONLY mailroom.attachment_contents ALTER COLUMN content SET STORAGE EXTERNAL;

COMMENT ON TABLE mailroom.attachment_contents IS 'Attachment bytes, once per SHA-256, shared by the emails that carry them (mailroom.email_attachments); deleted with the last of those. No read-only role reads content.';

ALTER TABLE ONLY mailroom.attachment_contents
    ADD CONSTRAINT attachment_contents_pkey PRIMARY KEY (sha256);

-- templates

CREATE TABLE mailroom.templates (
    name text NOT NULL,
    locale text NOT NULL,
    subject text NOT NULL,
    text_body text,
    html_body text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT templates_has_body CHECK (((text_body IS NOT NULL) OR (html_body IS NOT NULL))),
    CONSTRAINT templates_locale_format CHECK ((locale ~ '^[a-z]{2}(-[A-Z]{2})?$'::text)),
    CONSTRAINT templates_name_format CHECK ((name ~ '^[a-z][a-z0-9_]{0,63}$'::text))
);

COMMENT ON TABLE mailroom.templates IS 'Email templates by name and locale (subject and bodies, rendered in a sandbox at enqueue).';

ALTER TABLE ONLY mailroom.templates
    ADD CONSTRAINT templates_pkey PRIMARY KEY (name, locale);

CREATE TRIGGER templates_touch BEFORE UPDATE ON mailroom.templates FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

COMMENT ON TRIGGER templates_touch ON mailroom.templates IS 'updated_at follows every change; created_at is immutable.';

-- workers

CREATE TABLE mailroom.workers (
    name text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT workers_name_length CHECK (((length(name) >= 1) AND (length(name) <= 200)))
);

COMMENT ON TABLE mailroom.workers IS 'Workers that said they are alive; health asks whether any is while email is due.';

COMMENT ON COLUMN mailroom.workers.seen_at IS 'The worker''s last heartbeat.';

ALTER TABLE ONLY mailroom.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (name);

-- functions

CREATE FUNCTION mailroom.address_list_problem(field text, addresses text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
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

COMMENT ON FUNCTION mailroom.address_list_problem(field text, addresses text[]) IS 'Why a list of addresses is refused, naming the element (cc[2]), or NULL.';

CREATE FUNCTION mailroom.address_problem(value text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT CASE
        WHEN value IS NULL OR btrim(value) = '' THEN 'an email address is required'
        WHEN length(value) > 254
          OR strpos(value, '@') > 64 + 1
          OR value !~  E'^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?$'
          -- a domain label of 64 characters needs an address longer than 67: the costlier pattern only then
          OR (length(value) > 67 AND substring(value FROM strpos(value, '@') + 1) ~ '[A-Za-z0-9-]{64}')
        THEN 'invalid email address (a plain ASCII mailbox, local@domain.tld)'
    END
$_$;

COMMENT ON FUNCTION mailroom.address_problem(value text) IS 'Why an address is refused (a plain ASCII mailbox is required), or NULL.';

CREATE FUNCTION mailroom.apply_sent_journal(token uuid) RETURNS integer
    LANGUAGE sql
    SET enable_nestloop TO 'off'
    AS $$
    -- No nested loop: the server mostly analyzes the queue with no email assigned and the journal empty,
    -- so it expects one row from each and chose to read the claim's journal rows again for every
    -- assigned email (every claim in flight): 360,000 comparisons and 250 ms for a claim of 300 beside
    -- three others. A hash join reads each side once. The update reads the journal table itself (every
    -- part of one statement sees the same snapshot, so the delete beside it does not hide its rows).
    WITH done AS (
        UPDATE mailroom.email_queue q
        SET status = 'sent', sent_at = j.sent_at, message_id = coalesce(j.message_id, q.message_id),
            sender_account_id = j.sender_account_id
        FROM mailroom.sent_journal j
        WHERE j.lease_token = token AND q.id = j.email_id AND q.lease_token = j.lease_token
          AND q.status = 'assigned'
        RETURNING q.id, q.recipient_email, q.campaign_id, q.retry_count, j.sent_at, j.sender_account_id,
                  j.smtp_code, j.enhanced_code, j.response, j.duration_ms, j.worker
    ), gone AS (
        DELETE FROM mailroom.sent_journal WHERE lease_token = token
    ), logged AS (
        INSERT INTO mailroom.send_logs (attempted_at, email_id, sender_account_id, recipient_email, campaign_id,
                                        attempt, outcome, smtp_code, enhanced_code, response, duration_ms, worker)
        SELECT sent_at, id, sender_account_id, recipient_email, campaign_id, retry_count + 1, 'sent', smtp_code,
               enhanced_code, response, duration_ms, worker
        FROM done
        RETURNING 1
    )
    SELECT count(*)::integer FROM logged
$$;

COMMENT ON FUNCTION mailroom.apply_sent_journal(token uuid) IS 'Apply a claim''s journalled sends to the queue and the send log; returns how many.';

CREATE FUNCTION mailroom.content_rules() RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$ SELECT  E'{"about": "What the database and the Python API both refuse in an email. One file: worker/core/rules.py loads it for Python, and revision 0006 writes it into the database''s checks (mailroom.content_rules() returns it). Patterns are written in the common subset of Python''s re and PostgreSQL''s regular expressions, without capturing groups or bounded repeats where they run per row (PostgreSQL''s engine is many times slower with them); an address is also at most max_local_chars before the @ and has no domain label of 64 characters; a change here needs a revision that installs it again.", "forbidden_in_headers": "[\\\\x00-\\\\x1f\\\\x7f\\\\x85\\\\u2028\\\\u2029]", "encoded_word": "=\\\\?[^?\\\\s]+\\\\?[BbQq]\\\\?[^?\\\\s]*\\\\?=", "header_name": "^[!-9;-~]{1,76}$", "address": "^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(?:\\\\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\\\.)+[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?$", "address_long_label": "[A-Za-z0-9-]{64}", "max_local_chars": 64, "max_address_chars": 254, "reserved_headers": ["from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id", "mime-version", "content-type", "content-transfer-encoding", "content-disposition", "return-path", "received", "sender", "dkim-signature", "list-unsubscribe", "list-unsubscribe-post"], "stored_by_mailroom": ["list-unsubscribe", "list-unsubscribe-post"], "about_reserved_headers": "Reserved headers (revision 0008 installs the relay and trace lists): those Mailroom writes itself (reserved_headers, except stored_by_mailroom, which its tracking stores at enqueue), and those that steer a relay or that receiving servers write to record a message''s path and authentication (relay_and_trace_headers, and every name starting with one of relay_and_trace_header_prefixes): an application setting them could change how a relay handles or reports an email (SendGrid''s bypass_list_management, Postmark''s metadata that names the email in its webhooks) or forge the trace a reader trusts.", "relay_and_trace_headers": ["x-smtpapi", "x-msys-api", "x-pm-message-stream", "x-pm-keepid", "authentication-results", "received-spf", "domainkey-signature", "delivered-to", "x-original-to", "x-forwarded-to", "errors-to"], "relay_and_trace_header_prefixes": ["x-pm-metadata-", "x-mailgun-", "x-ses-", "x-mc-", "x-sg-", "resent-", "arc-", "x-mailroom-"], "max_header_value_chars": 998, "max_name_chars": 255, "max_subject_chars": 998, "max_body_bytes": 26214400, "max_recipients": 100}'::jsonb $_$;

COMMENT ON FUNCTION mailroom.content_rules() IS 'The content rules this database enforces, from worker/core/content_rules.json (applications in any language may read it).';

CREATE FUNCTION mailroom.drop_unused_attachments(candidates bytea[] DEFAULT NULL::bytea[]) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    WITH unused AS (
        SELECT c.sha256 FROM mailroom.attachment_contents c
        WHERE (candidates IS NULL OR c.sha256 = ANY(candidates))
          AND NOT EXISTS (SELECT FROM mailroom.email_attachments a WHERE a.sha256 = c.sha256)
        FOR UPDATE SKIP LOCKED
    ), dropped AS (
        DELETE FROM mailroom.attachment_contents c USING unused u WHERE c.sha256 = u.sha256 RETURNING 1
    )
    SELECT count(*) FROM dropped
$$;

COMMENT ON FUNCTION mailroom.drop_unused_attachments(candidates bytea[]) IS 'Delete attachment contents no email carries (among candidates, or all); skips one an enqueue has locked. Returns how many were deleted.';

REVOKE ALL ON FUNCTION mailroom.drop_unused_attachments(candidates bytea[]) FROM PUBLIC;

CREATE FUNCTION mailroom.email_content_problem(e mailroom.email_queue) RETURNS text
    LANGUAGE plpgsql STABLE
    AS $$
DECLARE
    problem text;
BEGIN
    problem := mailroom.address_problem(e.recipient_email);
    IF problem IS NOT NULL THEN
        RETURN 'recipient_email: ' || problem;
    END IF;
    IF e.recipient_name IS NOT NULL THEN
        problem := coalesce(mailroom.header_text_problem(e.recipient_name),
            CASE WHEN length(e.recipient_name) > 255
                 THEN 'longer than ' || 255 || ' characters' END);
        IF problem IS NOT NULL THEN
            RETURN 'recipient_name: ' || problem;
        END IF;
    END IF;
    -- An email enqueued by SQL with a template has its subject rendered later (status unrendered).
    problem := coalesce(mailroom.header_text_problem(e.subject),
        CASE WHEN btrim(e.subject, E' \t') = '' AND e.status <> 'unrendered' THEN 'a subject is required'
             WHEN length(e.subject) > 998
             THEN 'longer than ' || 998 || ' characters' END);
    IF problem IS NOT NULL THEN
        RETURN 'subject: ' || problem;
    END IF;
    IF coalesce(octet_length(e.text_body), 0) + coalesce(octet_length(e.html_body), 0) > 26214400 THEN
        RETURN 'text_body: the body exceeds the ' || 26214400 || '-byte limit';
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

COMMENT ON FUNCTION mailroom.email_content_problem(e mailroom.email_queue) IS 'The first content-rule problem of a queue row, naming the field, or NULL.';

CREATE FUNCTION mailroom.ensure_month_partitions(parent text, start_month date, months integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    created integer := 0;
    first_day date := date_trunc('month', start_month)::date;
    part_name text;
BEGIN
    FOR i IN 0 .. months - 1 LOOP
        part_name := format('%s_%s', parent, to_char(first_day + make_interval(months => i), 'YYYY_MM'));
        IF to_regclass(format('mailroom.%I', part_name)) IS NULL THEN
            EXECUTE format('CREATE TABLE mailroom.%I PARTITION OF mailroom.%I FOR VALUES FROM (%L) TO (%L)',
                           part_name, parent,
                           first_day + make_interval(months => i),
                           first_day + make_interval(months => i + 1));
            EXECUTE format('COMMENT ON TABLE mailroom.%I IS %L', part_name,
                           format('%s of %s (a month partition made by mailroom.ensure_month_partitions)',
                                  parent, to_char(first_day + make_interval(months => i), 'YYYY-MM')));
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

COMMENT ON FUNCTION mailroom.ensure_month_partitions(parent text, start_month date, months integer) IS 'Create the missing monthly partitions of a partitioned table from a month on, for some months; returns how many it made.';

CREATE FUNCTION mailroom.header_text_problem(value text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN value ~  E'[\\x00-\\x1f\\x7f\\x85\\u2028\\u2029]' THEN
            'control character U+' || lpad(upper(to_hex(ascii(
                substring(value FROM '(' ||  E'[\\x00-\\x1f\\x7f\\x85\\u2028\\u2029]' || ')')))), 4, '0')
            || ' is not allowed in a header'
        WHEN strpos(value, '=?') > 0 AND value ~  E'=\\?[^?\\s]+\\?[BbQq]\\?[^?\\s]*\\?=' THEN
            'looks like an RFC 2047 encoded word; give the plain text instead'
        WHEN length(value) > 998 THEN
            'longer than ' || 998 || ' characters'
    END
$$;

COMMENT ON FUNCTION mailroom.header_text_problem(value text) IS 'Why a header value is refused (control characters, encoded words, length), or NULL.';

CREATE FUNCTION mailroom.headers_problem(headers jsonb) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    SELECT CASE
        WHEN headers IS NULL OR headers = '{}'::jsonb THEN NULL
        WHEN jsonb_typeof(headers) <> 'object' THEN 'headers: must be a JSON object of name to text'
        ELSE (
            SELECT 'headers.' || left(k, 80) || ': ' || CASE
                WHEN k !~ '^[!-9;-~]{1,76}$' THEN 'not a valid header name'
                WHEN lower(k) = ANY (ARRAY['from', 'to', 'cc', 'bcc', 'reply-to', 'subject', 'date', 'message-id', 'mime-version', 'content-type', 'content-transfer-encoding', 'content-disposition', 'return-path', 'received', 'sender', 'dkim-signature', 'list-unsubscribe', 'list-unsubscribe-post']::text[])
                     AND lower(k) <> ALL (ARRAY['list-unsubscribe', 'list-unsubscribe-post']::text[]) THEN
                    'this header is set by Mailroom and cannot be overridden'
                WHEN lower(k) = ANY (ARRAY['x-smtpapi', 'x-msys-api', 'x-pm-message-stream', 'x-pm-keepid', 'authentication-results', 'received-spf', 'domainkey-signature', 'delivered-to', 'x-original-to', 'x-forwarded-to', 'errors-to']::text[])
                     OR EXISTS (SELECT FROM unnest(ARRAY['x-pm-metadata-', 'x-mailgun-', 'x-ses-', 'x-mc-', 'x-sg-', 'resent-', 'arc-', 'x-mailroom-']::text[]) AS p(prefix)
                                WHERE starts_with(lower(k), p.prefix)) THEN
                    'a relay-control, trace or authentication header; relays and receiving servers trust it,'
                    ' so an application may not set it'
                WHEN jsonb_typeof(v) <> 'string' THEN 'a header value must be text'
                ELSE mailroom.header_text_problem(v #>> '{}')
            END
            FROM jsonb_each(headers) AS h(k, v)
            WHERE k !~ '^[!-9;-~]{1,76}$'
               OR (lower(k) = ANY (ARRAY['from', 'to', 'cc', 'bcc', 'reply-to', 'subject', 'date', 'message-id', 'mime-version', 'content-type', 'content-transfer-encoding', 'content-disposition', 'return-path', 'received', 'sender', 'dkim-signature', 'list-unsubscribe', 'list-unsubscribe-post']::text[]) AND lower(k) <> ALL (ARRAY['list-unsubscribe', 'list-unsubscribe-post']::text[]))
               OR lower(k) = ANY (ARRAY['x-smtpapi', 'x-msys-api', 'x-pm-message-stream', 'x-pm-keepid', 'authentication-results', 'received-spf', 'domainkey-signature', 'delivered-to', 'x-original-to', 'x-forwarded-to', 'errors-to']::text[])
               OR EXISTS (SELECT FROM unnest(ARRAY['x-pm-metadata-', 'x-mailgun-', 'x-ses-', 'x-mc-', 'x-sg-', 'resent-', 'arc-', 'x-mailroom-']::text[]) AS p(prefix)
                          WHERE starts_with(lower(k), p.prefix))
               OR jsonb_typeof(v) <> 'string'
               OR mailroom.header_text_problem(v #>> '{}') IS NOT NULL
            ORDER BY k LIMIT 1)
    END
$_$;

COMMENT ON FUNCTION mailroom.headers_problem(headers jsonb) IS 'Why the custom headers are refused (field names, reserved headers, values), or NULL.';

CREATE FUNCTION mailroom.normalise_address(address text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    -- The local part as given, the domain in lower case: what the Python API stores.
    SELECT CASE WHEN position('@' IN btrim(address)) > 0
        THEN regexp_replace(btrim(address), '@[^@]*$', '') || '@' || lower(regexp_replace(btrim(address), '^.*@', ''))
        ELSE btrim(address) END
$_$;

COMMENT ON FUNCTION mailroom.normalise_address(address text) IS 'An address as Mailroom stores it: trimmed, the local part as given, the domain lowercased.';

CREATE FUNCTION mailroom.normalise_addresses(addresses text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN cardinality(addresses) > 0
        THEN ARRAY(SELECT mailroom.normalise_address(a) FROM unnest(addresses) WITH ORDINALITY AS x(a, i) ORDER BY i)
    END
$$;

COMMENT ON FUNCTION mailroom.normalise_addresses(addresses text[]) IS 'mailroom.normalise_address over a list.';

CREATE FUNCTION mailroom.recipients_problem(e mailroom.email_queue) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(
        mailroom.address_list_problem('to_extra', e.to_extra),
        mailroom.address_list_problem('cc', e.cc),
        mailroom.address_list_problem('bcc', e.bcc),
        mailroom.address_list_problem('reply_to', e.reply_to),
        CASE WHEN 1 + coalesce(cardinality(e.to_extra), 0) + coalesce(cardinality(e.cc), 0)
                    + coalesce(cardinality(e.bcc), 0) > 100
             THEN 'recipients: more than ' || 100 || ' recipients' END,
        CASE WHEN cardinality(e.reply_to) > 100
             THEN 'reply_to: more than ' || 100 || ' addresses' END)
$$;

COMMENT ON FUNCTION mailroom.recipients_problem(e mailroom.email_queue) IS 'Why the recipients are refused (an invalid address, too many in the envelope), or NULL.';

CREATE FUNCTION mailroom.refuse_content(problem text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION '%', problem
        USING ERRCODE = 'check_violation', COLUMN = split_part(split_part(split_part(problem, ':', 1), '[', 1), '.', 1),
              TABLE = 'email_queue', SCHEMA = 'mailroom',
              HINT = 'mailroom.content_rules() shows the rules every writer of the queue obeys';
END $$;

COMMENT ON FUNCTION mailroom.refuse_content(problem text) IS 'Raise a content problem as check_violation (23514), with the field as the column in the diagnostics.';

CREATE FUNCTION mailroom.rescue_expired_claims() RETURNS SETOF bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    c mailroom.claims%ROWTYPE;
    sent_count integer;
    unused integer;
BEGIN
    FOR c IN SELECT * FROM mailroom.claims WHERE expires_at < now() ORDER BY lease_token
             FOR UPDATE SKIP LOCKED LOOP
        -- The lock order of every claim transaction: claim row, sender row, emails.
        PERFORM 1 FROM mailroom.sender_accounts WHERE id = c.sender_account_id FOR UPDATE;
        PERFORM 1 FROM mailroom.email_queue WHERE lease_token = c.lease_token AND status = 'assigned'
        ORDER BY id FOR UPDATE;
        sent_count := mailroom.apply_sent_journal(c.lease_token);
        RETURN QUERY
            WITH returned AS (
                UPDATE mailroom.email_queue q
                SET status = 'pending',
                    last_error = 'lease expired: worker ' || q.lease_owner || ' stopped answering'
                WHERE q.lease_token = c.lease_token AND q.status = 'assigned'
                RETURNING q.id
            )
            SELECT id FROM returned;
        unused := c.reserved - c.used - sent_count;
        IF unused > 0 THEN
            PERFORM mailroom.release_quota(c.sender_account_id, unused, c.day);
        END IF;
        DELETE FROM mailroom.claims WHERE lease_token = c.lease_token;
    END LOOP;
    -- Leases without a claim row.
    RETURN QUERY
        WITH expired AS (
            SELECT q.id FROM mailroom.email_queue q
            WHERE q.status = 'assigned' AND q.lease_expires_at < now()
              AND NOT EXISTS (SELECT 1 FROM mailroom.claims c2 WHERE c2.lease_token = q.lease_token)
            ORDER BY q.id FOR UPDATE SKIP LOCKED
        )
        SELECT e.id FROM expired e WHERE mailroom.rescue_unclaimed(e.id);
END $$;

COMMENT ON FUNCTION mailroom.rescue_expired_claims() IS 'Return every expired claim: lock the claim, its sender, then its emails, and only then look: each statement after the locks sees what was committed before they were granted, so a send the late owner journalled a moment earlier is applied (sent, with its attempt logged), never returned to the queue and sent again. The rest goes back to the queue and the quota neither a send nor a permanent refusal used is given back. Emails under an expired lease without a claim row are returned by mailroom.rescue_unclaimed. Returns the ids returned to the queue.';

CREATE FUNCTION mailroom.rescue_unclaimed(email bigint) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    token uuid;
BEGIN
    SELECT lease_token INTO token FROM mailroom.email_queue WHERE id = email AND status = 'assigned';
    IF token IS NULL THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM mailroom.sent_journal WHERE email_id = email AND lease_token = token) THEN
        PERFORM mailroom.apply_sent_journal(token);
        RETURN false;
    END IF;
    UPDATE mailroom.email_queue
    SET status = 'pending', last_error = 'lease expired: worker ' || lease_owner || ' stopped answering'
    WHERE id = email;
    RETURN true;
END $$;

COMMENT ON FUNCTION mailroom.rescue_unclaimed(email bigint) IS 'One email under an expired lease without a claim row: its journalled send applied, else back to the queue (true).';

CREATE FUNCTION mailroom.store_attachments(file_email bigint[], file_position integer[], file_name text[], file_type text[], file_cid text[], file_data integer[], contents bytea[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    hashes bytea[];
    locked integer;
BEGIN
    IF coalesce(cardinality(file_email), 0) = 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM unnest(contents) AS c(b) WHERE c.b IS NULL OR octet_length(c.b) = 0) THEN
        RAISE EXCEPTION 'attachments: a file without content' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM unnest(file_data) AS d(i) WHERE d.i IS NULL OR d.i NOT BETWEEN 1 AND cardinality(contents)) THEN
        RAISE EXCEPTION 'attachments: a file names no content' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT FROM unnest(file_email, file_data) AS f(e, d) GROUP BY f.e
               HAVING sum(octet_length(contents[f.d])) > 26214400) THEN
        RAISE EXCEPTION 'attachments: more than 25 MiB of files in one email'
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    hashes := ARRAY(SELECT sha256(c.b) FROM unnest(contents) WITH ORDINALITY AS c(b, i) ORDER BY c.i);
    LOOP
        INSERT INTO mailroom.attachment_contents (sha256, content)
        SELECT DISTINCT ON (h.h) h.h, h.b FROM unnest(hashes, contents) AS h(h, b)
        ON CONFLICT (sha256) DO NOTHING;
        SELECT count(*) INTO locked FROM (
            SELECT FROM mailroom.attachment_contents c WHERE c.sha256 = ANY(hashes) FOR KEY SHARE) l;
        EXIT WHEN locked = (SELECT count(DISTINCT h) FROM unnest(hashes) AS h);
    END LOOP;
    INSERT INTO mailroom.email_attachments (email_id, position, sha256, filename, content_type, content_id)
    SELECT f.e, f.p, hashes[f.d], f.n, f.t, f.c
    FROM unnest(file_email, file_position, file_name, file_type, file_cid, file_data) AS f(e, p, n, t, c, d);
END $$;

COMMENT ON FUNCTION mailroom.store_attachments(file_email bigint[], file_position integer[], file_name text[], file_type text[], file_cid text[], file_data integer[], contents bytea[]) IS 'Store the files of emails the enqueue functions just wrote: each content once per SHA-256, then each email''s files (file_data: the place of its content in contents). Called by those functions, not granted to anyone.';

REVOKE ALL ON FUNCTION mailroom.store_attachments(file_email bigint[], file_position integer[], file_name text[], file_type text[], file_cid text[], file_data integer[], contents bytea[]) FROM PUBLIC;

-- == senders ==

-- sender_accounts

CREATE TABLE mailroom.sender_accounts (
    id bigint NOT NULL,
    name text NOT NULL,
    from_email text NOT NULL,
    from_name text,
    smtp_host text NOT NULL,
    smtp_port integer NOT NULL,
    smtp_security text DEFAULT 'starttls'::text NOT NULL,
    smtp_username text,
    smtp_password_encrypted bytea,
    daily_limit integer DEFAULT 2000 NOT NULL,
    warmup_stage integer DEFAULT 0 NOT NULL,
    warmup_limit integer,
    send_delay_ms integer DEFAULT 0 NOT NULL,
    max_connections integer DEFAULT 4 NOT NULL,
    status text DEFAULT 'active'::text NOT NULL,
    status_reason text,
    status_changed_at timestamp with time zone DEFAULT now() NOT NULL,
    limit_reached_on date,
    dkim_domain text,
    dkim_selector text,
    dkim_private_key_encrypted bytea,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    last_used_at timestamp with time zone,
    version integer DEFAULT 1 NOT NULL,
    warmup_checked_on date,
    circuit_state text DEFAULT 'closed'::text NOT NULL,
    circuit_reason text,
    circuit_since timestamp with time zone,
    circuit_retry_at timestamp with time zone,
    circuit_failures integer DEFAULT 0 NOT NULL,
    connect_timeout_seconds real,
    command_timeout_seconds real,
    data_timeout_seconds real,
    auth_type text DEFAULT 'password'::text NOT NULL,
    oauth_token_url text,
    oauth_client_id text,
    oauth_client_secret_encrypted bytea,
    oauth_refresh_token_encrypted bytea,
    bounce_domain text,
    relay_provider text,
    allow_plaintext_login boolean DEFAULT false NOT NULL,
    gmail_subject_email text,
    gmail_key_encrypted bytea,
    batch_size integer,
    postal_address text,
    streams text[] DEFAULT '{transactional,broadcast}'::text[] NOT NULL,
    from_domains text[],
    CONSTRAINT sender_accounts_auth_type_known CHECK ((auth_type = ANY (ARRAY['password'::text, 'oauth2'::text, 'gmail'::text]))),
    CONSTRAINT sender_accounts_batch_size_positive CHECK ((batch_size >= 1)),
    CONSTRAINT sender_accounts_bounce_domain_hostname CHECK (((bounce_domain ~ '^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$'::text) AND (length(bounce_domain) <= 253))),
    CONSTRAINT sender_accounts_circuit_failures_not_negative CHECK ((circuit_failures >= 0)),
    CONSTRAINT sender_accounts_circuit_reason_length CHECK ((length(circuit_reason) <= 500)),
    CONSTRAINT sender_accounts_circuit_since_matches_state CHECK (((circuit_state = 'closed'::text) = (circuit_since IS NULL))),
    CONSTRAINT sender_accounts_circuit_state_known CHECK ((circuit_state = ANY (ARRAY['closed'::text, 'open'::text, 'half_open'::text]))),
    CONSTRAINT sender_accounts_command_timeout_seconds_positive CHECK ((command_timeout_seconds > (0)::double precision)),
    CONSTRAINT sender_accounts_connect_timeout_seconds_positive CHECK ((connect_timeout_seconds > (0)::double precision)),
    CONSTRAINT sender_accounts_daily_limit_not_negative CHECK ((daily_limit >= 0)),
    CONSTRAINT sender_accounts_data_timeout_seconds_positive CHECK ((data_timeout_seconds > (0)::double precision)),
    CONSTRAINT sender_accounts_dkim_all_or_none CHECK ((((dkim_domain IS NULL) = (dkim_selector IS NULL)) AND ((dkim_domain IS NULL) = (dkim_private_key_encrypted IS NULL)))),
    CONSTRAINT sender_accounts_from_domains CHECK (((from_domains IS NULL) OR (((cardinality(from_domains) >= 1) AND (cardinality(from_domains) <= 50)) AND (array_ndims(from_domains) = 1) AND mailroom.all_match(from_domains, '^[a-z0-9]([a-z0-9-]{0,62}\.)+[a-z0-9-]{1,63}$'::text)))),
    CONSTRAINT sender_accounts_from_email_length CHECK (((length(from_email) >= 3) AND (length(from_email) <= 254))),
    CONSTRAINT sender_accounts_from_name_no_control_chars CHECK ((from_name !~ '[\x00-\x1f\x7f]'::text)),
    CONSTRAINT sender_accounts_gmail_complete CHECK (((auth_type <> 'gmail'::text) OR ((gmail_subject_email IS NOT NULL) AND (gmail_key_encrypted IS NOT NULL) AND (smtp_password_encrypted IS NULL) AND (smtp_username IS NULL) AND (oauth_token_url IS NULL) AND (oauth_client_id IS NULL) AND (oauth_client_secret_encrypted IS NULL) AND (oauth_refresh_token_encrypted IS NULL)))),
    CONSTRAINT sender_accounts_gmail_settings_only_for_gmail CHECK (((auth_type = 'gmail'::text) OR ((gmail_subject_email IS NULL) AND (gmail_key_encrypted IS NULL)))),
    CONSTRAINT sender_accounts_gmail_subject_email_format CHECK ((((length(gmail_subject_email) >= 3) AND (length(gmail_subject_email) <= 254)) AND (gmail_subject_email ~ '^[^@\s]+@[^@\s]+$'::text))),
    CONSTRAINT sender_accounts_limit_reached_on_matches_status CHECK (((status = 'paused_limit_reached'::text) = (limit_reached_on IS NOT NULL))),
    CONSTRAINT sender_accounts_max_connections_range CHECK (((max_connections >= 1) AND (max_connections <= 100))),
    CONSTRAINT sender_accounts_name_format CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$'::text)),
    CONSTRAINT sender_accounts_oauth2_complete CHECK (((auth_type <> 'oauth2'::text) OR ((oauth_token_url IS NOT NULL) AND (oauth_client_id IS NOT NULL) AND (oauth_client_secret_encrypted IS NOT NULL) AND (oauth_refresh_token_encrypted IS NOT NULL) AND (smtp_username IS NOT NULL) AND (smtp_password_encrypted IS NULL)))),
    CONSTRAINT sender_accounts_oauth_client_id_printable CHECK (((oauth_client_id ~ '^[\x21-\x7e]+$'::text) AND (length(oauth_client_id) <= 500))),
    CONSTRAINT sender_accounts_oauth_token_url_https_or_loopback CHECK ((((oauth_token_url ~ '^https://[^\s/?#@]+(/[^\s#]*)?$'::text) OR (oauth_token_url ~ '^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?(/[^\s#]*)?$'::text)) AND (length(oauth_token_url) <= 2000))),
    CONSTRAINT sender_accounts_open_circuit_has_retry_at CHECK (((circuit_state = 'closed'::text) OR (circuit_retry_at IS NOT NULL))),
    CONSTRAINT sender_accounts_password_has_no_oauth CHECK (((auth_type <> 'password'::text) OR ((oauth_token_url IS NULL) AND (oauth_client_id IS NULL) AND (oauth_client_secret_encrypted IS NULL) AND (oauth_refresh_token_encrypted IS NULL)))),
    CONSTRAINT sender_accounts_postal_address_plain_text CHECK ((((length(btrim(postal_address)) >= 5) AND (length(btrim(postal_address)) <= 300)) AND (postal_address !~ '[\u0001-\u001f\u007f-\u009f]'::text))),
    CONSTRAINT sender_accounts_relay_provider_known CHECK ((relay_provider = ANY (ARRAY['postmark'::text, 'sendgrid'::text]))),
    CONSTRAINT sender_accounts_send_delay_ms_range CHECK (((send_delay_ms >= 0) AND (send_delay_ms <= 3600000))),
    CONSTRAINT sender_accounts_smtp_host_length CHECK (((length(smtp_host) >= 1) AND (length(smtp_host) <= 255))),
    CONSTRAINT sender_accounts_smtp_port_range CHECK (((smtp_port >= 1) AND (smtp_port <= 65535))),
    CONSTRAINT sender_accounts_smtp_security_known CHECK ((smtp_security = ANY (ARRAY['none'::text, 'starttls'::text, 'tls'::text]))),
    CONSTRAINT sender_accounts_status_known CHECK ((status = ANY (ARRAY['active'::text, 'paused'::text, 'suspended'::text, 'warming_up'::text, 'paused_limit_reached'::text]))),
    CONSTRAINT sender_accounts_streams CHECK ((((cardinality(streams) >= 1) AND (cardinality(streams) <= 20)) AND (array_ndims(streams) = 1) AND mailroom.all_match(streams, '^[a-z][a-z0-9_-]{0,31}$'::text))),
    CONSTRAINT sender_accounts_warmup_has_limit CHECK (((warmup_stage = 0) OR (warmup_limit IS NOT NULL))),
    CONSTRAINT sender_accounts_warmup_limit_not_negative CHECK ((warmup_limit >= 0)),
    CONSTRAINT sender_accounts_warmup_stage_range CHECK (((warmup_stage >= 0) AND (warmup_stage <= 5)))
);

COMMENT ON TABLE mailroom.sender_accounts IS 'SMTP relays and mailboxes email is sent through, with their limits, warm-up, pacing, circuit and credentials (encrypted).';

COMMENT ON COLUMN mailroom.sender_accounts.name IS 'The operator''s name for the account (senders commands use it).';
COMMENT ON COLUMN mailroom.sender_accounts.smtp_security IS 'none: plain SMTP; starttls: upgrade after EHLO; tls: TLS from the first byte.';
COMMENT ON COLUMN mailroom.sender_accounts.smtp_password_encrypted IS 'The SMTP password, encrypted with the secret key (never readable by read-only roles).';
COMMENT ON COLUMN mailroom.sender_accounts.daily_limit IS 'Sends allowed per UTC day.';
COMMENT ON COLUMN mailroom.sender_accounts.warmup_stage IS '0: warm-up finished; 1..5: the stage, with warmup_limit the day''s cap.';
COMMENT ON COLUMN mailroom.sender_accounts.warmup_limit IS 'The day''s cap while warming up; doubles with each stage.';
COMMENT ON COLUMN mailroom.sender_accounts.send_delay_ms IS 'Pacing: at least this long between two sends of the account, across all workers (mailroom.sender_pacing).';
COMMENT ON COLUMN mailroom.sender_accounts.max_connections IS 'SMTP connections the account may have open at once in one worker process.';
COMMENT ON COLUMN mailroom.sender_accounts.status IS 'active: sends; warming_up: sends under warmup_limit; paused: stopped by an operator; suspended: stopped after an authentication failure; paused_limit_reached: the day''s limit is used up, usable again the next UTC day.';
COMMENT ON COLUMN mailroom.sender_accounts.status_reason IS 'Why the account is not active (the relay''s reply, the limit, the operator''s reason).';
COMMENT ON COLUMN mailroom.sender_accounts.status_changed_at IS 'When status last changed.';
COMMENT ON COLUMN mailroom.sender_accounts.limit_reached_on IS 'The UTC day paused_limit_reached applies to: the account is usable again on any later day.';
COMMENT ON COLUMN mailroom.sender_accounts.dkim_private_key_encrypted IS 'The DKIM signing key, encrypted; set with dkim_domain and dkim_selector or not at all.';
COMMENT ON COLUMN mailroom.sender_accounts.last_used_at IS 'When the account last sent.';
COMMENT ON COLUMN mailroom.sender_accounts.version IS 'Optimistic-update version, moved on by every update.';
COMMENT ON COLUMN mailroom.sender_accounts.warmup_checked_on IS 'The UTC day warm-up progress was last considered (once a day, at the first reservation).';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_state IS 'closed: the relay answers; open: a sender-level fault, email waits uncharged until circuit_retry_at; half_open: one worker probes with a single email.';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_reason IS 'The fault that opened the circuit.';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_since IS 'When the circuit opened (NULL while closed).';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_retry_at IS 'When a worker may probe the open circuit again.';
COMMENT ON COLUMN mailroom.sender_accounts.circuit_failures IS 'Failed probes in a row; the backoff doubles with each, up to a cap.';
COMMENT ON COLUMN mailroom.sender_accounts.auth_type IS 'How the account sends: password (SMTP AUTH with the stored password, or none), oauth2 (SMTP AUTH XOAUTH2 with tokens from its OAuth2 client), gmail (the Gmail API as gmail_subject_email, with tokens from its service account key).';
COMMENT ON COLUMN mailroom.sender_accounts.oauth_token_url IS 'The OAuth2 token endpoint: HTTPS, or plain HTTP on the loopback interface only.';
COMMENT ON COLUMN mailroom.sender_accounts.oauth_client_secret_encrypted IS 'The OAuth2 client secret, encrypted.';
COMMENT ON COLUMN mailroom.sender_accounts.oauth_refresh_token_encrypted IS 'The OAuth2 refresh token, encrypted.';
COMMENT ON COLUMN mailroom.sender_accounts.bounce_domain IS 'The domain of the account''s VERP return paths (NULL: MAILROOM_BOUNCE_DOMAIN, else the sender''s own address).';
COMMENT ON COLUMN mailroom.sender_accounts.relay_provider IS 'The relay whose event webhooks report on this account''s email (postmark, sendgrid); messages are tagged for it.';
COMMENT ON COLUMN mailroom.sender_accounts.allow_plaintext_login IS 'The operator allowed this account to log in (password or OAuth2 token) over a connection without TLS to a host other than the loopback interface: the secret then crosses the network readable by anyone on the path.';
COMMENT ON COLUMN mailroom.sender_accounts.gmail_subject_email IS 'The Google Workspace user a gmail account''s service account impersonates (the JWT''s sub): the mailbox the Gmail API sends as.';
COMMENT ON COLUMN mailroom.sender_accounts.gmail_key_encrypted IS 'A gmail account''s service account JSON key (its private key signs the token requests), encrypted with the secret key (never readable by read-only roles).';
COMMENT ON COLUMN mailroom.sender_accounts.batch_size IS 'Emails claimed for it at a time: how many it sends before the worker records their results and looks at its bounces and errors again. NULL: the worker''s --batch-size, which is also the ceiling.';
COMMENT ON COLUMN mailroom.sender_accounts.postal_address IS 'Physical postal address shown in the footer of campaign email this account sends, unless the campaign has its own.';
COMMENT ON COLUMN mailroom.sender_accounts.streams IS 'The message streams whose email this account sends (transactional, broadcast, or names of the operator''s own); a claim takes email of these only.';
COMMENT ON COLUMN mailroom.sender_accounts.from_domains IS 'The domains an email sent through this account may have its own From in (lower case); NULL: the domain of the account''s from_email only.';

ALTER TABLE mailroom.sender_accounts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.sender_accounts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.sender_accounts
    ADD CONSTRAINT sender_accounts_name_unique UNIQUE (name);

ALTER TABLE ONLY mailroom.sender_accounts
    ADD CONSTRAINT sender_accounts_pkey PRIMARY KEY (id);

CREATE FUNCTION mailroom.sender_accounts_before_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        NEW.status_changed_at := now();
        IF NEW.status <> 'paused_limit_reached' THEN
            NEW.limit_reached_on := NULL;
        END IF;
    END IF;
    IF NEW.version = OLD.version THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.sender_accounts_before_update() IS 'Row trigger: status_changed_at follows status, limit_reached_on clears off paused_limit_reached, version moves on.';

CREATE TRIGGER sender_accounts_before_update BEFORE UPDATE ON mailroom.sender_accounts FOR EACH ROW EXECUTE FUNCTION mailroom.sender_accounts_before_update();

COMMENT ON TRIGGER sender_accounts_before_update ON mailroom.sender_accounts IS 'Status timestamps and the optimistic version.';

CREATE TRIGGER sender_accounts_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.sender_accounts FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER sender_accounts_notify ON mailroom.sender_accounts IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER sender_accounts_touch BEFORE UPDATE ON mailroom.sender_accounts FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

COMMENT ON TRIGGER sender_accounts_touch ON mailroom.sender_accounts IS 'updated_at follows every change; created_at is immutable.';

-- sender_usage

CREATE TABLE mailroom.sender_usage (
    sender_account_id bigint NOT NULL,
    day date NOT NULL,
    sent integer DEFAULT 0 NOT NULL,
    bounces integer DEFAULT 0 NOT NULL,
    errors integer DEFAULT 0 NOT NULL,
    CONSTRAINT sender_usage_bounces_not_negative CHECK ((bounces >= 0)),
    CONSTRAINT sender_usage_errors_not_negative CHECK ((errors >= 0)),
    CONSTRAINT sender_usage_sent_not_negative CHECK ((sent >= 0))
);

COMMENT ON TABLE mailroom.sender_usage IS 'Per sender and UTC day: sends reserved, bounces and errors. A new day starts at zero without any cron.';

COMMENT ON COLUMN mailroom.sender_usage.sent IS 'Sends reserved from the day''s quota (unused reservations are given back).';

ALTER TABLE ONLY mailroom.sender_usage
    ADD CONSTRAINT sender_usage_pkey PRIMARY KEY (sender_account_id, day);

ALTER TABLE ONLY mailroom.sender_usage
    ADD CONSTRAINT sender_usage_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE CASCADE;

-- sender_pacing

CREATE TABLE mailroom.sender_pacing (
    sender_account_id bigint NOT NULL,
    next_send_at timestamp with time zone NOT NULL
);

COMMENT ON TABLE mailroom.sender_pacing IS 'The next free send slot of each paced account (send_delay_ms > 0), shared by every worker; no triggers, so a slot per send stays cheap.';

COMMENT ON COLUMN mailroom.sender_pacing.next_send_at IS 'The earliest time the account''s next send may start.';

ALTER TABLE ONLY mailroom.sender_pacing
    ADD CONSTRAINT sender_pacing_pkey PRIMARY KEY (sender_account_id);

ALTER TABLE ONLY mailroom.sender_pacing
    ADD CONSTRAINT sender_pacing_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE CASCADE;

-- sender_dns_findings

CREATE TABLE mailroom.sender_dns_findings (
    id bigint NOT NULL,
    sender_account_id bigint NOT NULL,
    checked_at timestamp with time zone DEFAULT now() NOT NULL,
    domain text NOT NULL,
    severity text NOT NULL,
    code text NOT NULL,
    detail text NOT NULL,
    CONSTRAINT sender_dns_findings_code_format CHECK ((code ~ '^[a-z][a-z0-9_]{0,62}$'::text)),
    CONSTRAINT sender_dns_findings_detail_printable CHECK (((length(detail) <= 500) AND (detail !~ '[\x00-\x1f\x7f]'::text))),
    CONSTRAINT sender_dns_findings_domain_length CHECK ((length(domain) <= 253)),
    CONSTRAINT sender_dns_findings_severity_known CHECK ((severity = ANY (ARRAY['ok'::text, 'info'::text, 'warning'::text, 'problem'::text])))
);

COMMENT ON TABLE mailroom.sender_dns_findings IS 'The latest DNS check of each sender account (mailroom senders check, and the worker''s maintenance): one row per finding, including what passed; replaced whole by the next check of that sender.';

COMMENT ON COLUMN mailroom.sender_dns_findings.checked_at IS 'When the check that found it ran (every row of one check has the same time).';
COMMENT ON COLUMN mailroom.sender_dns_findings.domain IS 'The name the finding is about: the From domain, the return-path (bounce) domain, the DKIM selector''s name, or the relay host.';
COMMENT ON COLUMN mailroom.sender_dns_findings.severity IS 'ok (passed), info (worth knowing), warning (mail may land in spam or be refused: mailroom health warns), problem (DKIM does not verify: mailroom health fails).';
COMMENT ON COLUMN mailroom.sender_dns_findings.code IS 'What was found, as a stable word (spf_missing, dkim_mismatch, dmarc_policy_none, mx_missing, relay_no_tls, dns_unreachable, ...); the documentation lists each with what to publish.';
COMMENT ON COLUMN mailroom.sender_dns_findings.detail IS 'The finding said for people, with the record found where it helps.';

ALTER TABLE mailroom.sender_dns_findings ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.sender_dns_findings_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.sender_dns_findings
    ADD CONSTRAINT sender_dns_findings_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.sender_dns_findings
    ADD CONSTRAINT sender_dns_findings_sender_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE CASCADE;

CREATE INDEX sender_dns_findings_sender ON mailroom.sender_dns_findings USING btree (sender_account_id);

-- functions

CREATE FUNCTION mailroom.close_circuit(sender bigint) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH closed AS (
        UPDATE mailroom.sender_accounts
        SET circuit_state = 'closed', circuit_reason = NULL, circuit_since = NULL, circuit_retry_at = NULL,
            circuit_failures = 0
        WHERE id = sender AND circuit_state <> 'closed'
        RETURNING id
    )
    SELECT EXISTS (SELECT 1 FROM closed)
$$;

COMMENT ON FUNCTION mailroom.close_circuit(sender bigint) IS 'The relay answered: close the circuit; true when it was open until now.';

CREATE FUNCTION mailroom.open_circuit(sender bigint, reason text, base_seconds double precision, cap_seconds double precision) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    was text;
BEGIN
    SELECT circuit_state INTO was FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE mailroom.sender_accounts
    SET circuit_state = 'open',
        circuit_reason = left(reason, 500),
        circuit_since = coalesce(circuit_since, now()),
        circuit_failures = circuit_failures + 1,
        circuit_retry_at = now() + make_interval(
            secs => least(cap_seconds, base_seconds * power(2, least(circuit_failures, 30))))
    WHERE id = sender;
    RETURN was = 'closed';
END $$;

COMMENT ON FUNCTION mailroom.open_circuit(sender bigint, reason text, base_seconds double precision, cap_seconds double precision) IS 'Open (or keep open) a sender''s circuit after a sender-level fault, backoff doubling to the cap; true when it was closed until now.';

CREATE FUNCTION mailroom.release_quota(sender bigint, unused integer) RETURNS void
    LANGUAGE sql
    AS $$
    SELECT mailroom.release_quota(sender, unused, (now() AT TIME ZONE 'UTC')::date)
$$;

CREATE FUNCTION mailroom.release_quota(sender bigint, unused integer, reserved_on date) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF unused <= 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    UPDATE mailroom.sender_usage SET sent = greatest(0, sent - unused)
    WHERE sender_account_id = sender AND day = reserved_on;
    UPDATE mailroom.sender_accounts
    SET status = CASE WHEN warmup_stage > 0 THEN 'warming_up' ELSE 'active' END, status_reason = NULL
    WHERE id = sender AND status = 'paused_limit_reached' AND limit_reached_on = reserved_on;
END $$;

COMMENT ON FUNCTION mailroom.release_quota(sender bigint, unused integer) IS 'Give back unused sends of today''s quota (the form of workers before revision 0002).';

COMMENT ON FUNCTION mailroom.release_quota(sender bigint, unused integer, reserved_on date) IS 'Give back unused sends to the UTC day they were reserved on, resuming an account paused at its limit that day.';

CREATE FUNCTION mailroom.reserve_quota(sender bigint, wanted integer) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    acct mailroom.sender_accounts%ROWTYPE;
    last_day mailroom.sender_usage%ROWTYPE;
    cap integer;
    used integer;
    granted integer;
BEGIN
    SELECT * INTO acct FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF acct.status = 'paused_limit_reached' AND acct.limit_reached_on < today THEN
        acct.status := CASE WHEN acct.warmup_stage > 0 THEN 'warming_up' ELSE 'active' END;
        acct.status_reason := NULL;
        UPDATE mailroom.sender_accounts SET status = acct.status, status_reason = NULL WHERE id = sender;
    END IF;
    IF acct.status NOT IN ('active', 'warming_up') THEN
        RETURN 0;
    END IF;
    IF acct.warmup_stage > 0 AND (acct.warmup_checked_on IS NULL OR acct.warmup_checked_on < today) THEN
        -- Today's row may exist already (bounces counted before the first reservation): not a past day.
        SELECT * INTO last_day FROM mailroom.sender_usage
        WHERE sender_account_id = sender AND day < today
        ORDER BY day DESC LIMIT 1;
        -- The cap that day is today's (only this step changes it, and not since): a daily limit
        -- below the warm-up limit is the cap too, or such an account could never advance.
        IF last_day.day IS NOT NULL AND last_day.sent >= least(acct.daily_limit, acct.warmup_limit) THEN
            IF last_day.bounces * 50 <= last_day.sent THEN
                IF acct.warmup_stage = 5 THEN
                    acct.warmup_stage := 0;
                    acct.status := 'active';
                ELSE
                    acct.warmup_stage := acct.warmup_stage + 1;
                    -- Saturating: an overflow error here would stop every reservation of the account.
                    acct.warmup_limit := least(acct.warmup_limit::bigint * 2, 2147483647);
                END IF;
                acct.status_reason := NULL;
            ELSE
                acct.status_reason := format('warm-up held at stage %s: %s%% bounces on %s',
                    acct.warmup_stage, round(100.0 * last_day.bounces / greatest(last_day.sent, 1), 1),
                    to_char(last_day.day, 'YYYY-MM-DD'));
            END IF;
        END IF;
        UPDATE mailroom.sender_accounts
        SET warmup_stage = acct.warmup_stage, warmup_limit = acct.warmup_limit, status = acct.status,
            status_reason = acct.status_reason, warmup_checked_on = today
        WHERE id = sender;
    END IF;
    cap := CASE WHEN acct.warmup_stage > 0 THEN least(acct.daily_limit, acct.warmup_limit) ELSE acct.daily_limit END;
    INSERT INTO mailroom.sender_usage (sender_account_id, day) VALUES (sender, today)
        ON CONFLICT (sender_account_id, day) DO NOTHING;
    SELECT sent INTO used FROM mailroom.sender_usage WHERE sender_account_id = sender AND day = today;
    granted := greatest(0, least(wanted, cap - used));
    IF granted > 0 THEN
        UPDATE mailroom.sender_usage SET sent = sent + granted WHERE sender_account_id = sender AND day = today;
    END IF;
    IF used + granted >= cap THEN
        UPDATE mailroom.sender_accounts
        SET status = 'paused_limit_reached', limit_reached_on = today,
            status_reason = format('daily limit of %s reached', cap)
        WHERE id = sender;
    END IF;
    RETURN granted;
END $$;

COMMENT ON FUNCTION mailroom.reserve_quota(sender bigint, wanted integer) IS 'Reserve up to wanted sends of today''s quota (UTC), advancing warm-up once a day; returns how many were granted. The sender row lock serialises reservations.';

CREATE FUNCTION mailroom.sender_from_domains(from_domains text[], from_email text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT coalesce(from_domains, ARRAY[lower(split_part(from_email, '@', 2))])
$$;

COMMENT ON FUNCTION mailroom.sender_from_domains(from_domains text[], from_email text) IS 'The domains a sender account may send a From in: its from_domains, else its own From''s domain.';

CREATE FUNCTION mailroom.take_probe(sender bigint, hold_seconds double precision) RETURNS boolean
    LANGUAGE sql
    AS $$
    WITH taken AS (
        UPDATE mailroom.sender_accounts
        SET circuit_state = 'half_open', circuit_retry_at = now() + make_interval(secs => hold_seconds)
        WHERE id = sender AND circuit_state <> 'closed' AND circuit_retry_at <= now()
        RETURNING id
    )
    SELECT EXISTS (SELECT 1 FROM taken)
$$;

COMMENT ON FUNCTION mailroom.take_probe(sender bigint, hold_seconds double precision) IS 'Take the one probe of an open circuit whose backoff has passed (half-open for hold_seconds); true for the worker that got it.';

-- == bounces and suppression ==

-- bounce_events

CREATE TABLE mailroom.bounce_events (
    id bigint NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    email_id bigint,
    recipient text NOT NULL,
    kind text NOT NULL,
    status text,
    action text,
    diagnostic text,
    source text NOT NULL,
    source_message_id text,
    raw_size integer NOT NULL,
    dedupe_key text NOT NULL,
    sender_account_id bigint,
    campaign_id text,
    digest_id bigint,
    CONSTRAINT bounce_events_kind_known CHECK ((kind = ANY (ARRAY['hard'::text, 'soft'::text, 'complaint'::text]))),
    CONSTRAINT bounce_events_raw_size_not_negative CHECK ((raw_size >= 0)),
    CONSTRAINT bounce_events_recipient_lowercase CHECK ((recipient = lower(recipient))),
    CONSTRAINT bounce_events_source_known CHECK ((source = ANY (ARRAY['dsn'::text, 'arf'::text, 'plain'::text, 'webhook'::text, 'postmark'::text, 'sendgrid'::text, 'ses'::text])))
);

COMMENT ON TABLE mailroom.bounce_events IS 'One row per recipient report applied from a DSN, an ARF complaint or a provider webhook; no foreign key to the queue, which retention empties first.';

COMMENT ON COLUMN mailroom.bounce_events.email_id IS 'The email reported on (its VERP token or Message-ID named it).';
COMMENT ON COLUMN mailroom.bounce_events.kind IS 'hard: permanent failure, the address is suppressed; soft: temporary failure; complaint: the recipient reported the email as spam.';
COMMENT ON COLUMN mailroom.bounce_events.status IS 'The enhanced status code as reported (5.1.1), or the ARF Feedback-Type.';
COMMENT ON COLUMN mailroom.bounce_events.action IS 'The DSN Action (failed, delayed); NULL for complaints.';
COMMENT ON COLUMN mailroom.bounce_events.diagnostic IS 'The Diagnostic-Code as reported, size-capped.';
COMMENT ON COLUMN mailroom.bounce_events.source IS 'Where the report came from: dsn, arf, plain (an unstructured bounce), webhook (the generic one), postmark, sendgrid or ses.';
COMMENT ON COLUMN mailroom.bounce_events.source_message_id IS 'The report''s own Message-ID.';
COMMENT ON COLUMN mailroom.bounce_events.raw_size IS 'Size of the report in bytes.';
COMMENT ON COLUMN mailroom.bounce_events.dedupe_key IS 'Identifies the report: a redelivered one changes nothing twice.';
COMMENT ON COLUMN mailroom.bounce_events.sender_account_id IS 'The sender that sent the email, copied when applied: bounce rates per sender read it.';
COMMENT ON COLUMN mailroom.bounce_events.campaign_id IS 'The email''s campaign, copied when applied.';
COMMENT ON COLUMN mailroom.bounce_events.digest_id IS 'The complaint digest that told the administrators of this complaint.';

ALTER TABLE mailroom.bounce_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.bounce_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.bounce_events
    ADD CONSTRAINT bounce_events_dedupe_key_unique UNIQUE (dedupe_key);

ALTER TABLE ONLY mailroom.bounce_events
    ADD CONSTRAINT bounce_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.bounce_events
    ADD CONSTRAINT bounce_events_digest_exists FOREIGN KEY (digest_id) REFERENCES mailroom.complaint_digests(id) ON DELETE SET NULL;

CREATE INDEX bounce_events_campaign_idx ON mailroom.bounce_events USING btree (campaign_id, kind) WHERE (campaign_id IS NOT NULL);

CREATE INDEX bounce_events_email_idx ON mailroom.bounce_events USING btree (email_id);

CREATE INDEX bounce_events_received_idx ON mailroom.bounce_events USING brin (received_at);

CREATE INDEX bounce_events_undigested_idx ON mailroom.bounce_events USING btree (id) WHERE ((kind = 'complaint'::text) AND (digest_id IS NULL));

CREATE FUNCTION mailroom.bounce_events_history() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO mailroom.suppression_events (occurred_at, address, kind, change, source, status, reason,
                                                 email_id, bounce_event_id, sender_account_id, campaign_id)
        VALUES (NEW.received_at, NEW.recipient, NEW.kind, 'reported', NEW.source, NEW.status, NEW.diagnostic,
                NEW.email_id, NEW.id, NEW.sender_account_id, NEW.campaign_id);
        -- The listing this report causes next in the transaction is this row: not a second one.
        PERFORM set_config('mailroom.suppression_report', NEW.recipient, true);
    ELSIF NEW.recipient IS DISTINCT FROM OLD.recipient THEN
        -- A privacy erasure renames the address: its history follows.
        UPDATE mailroom.suppression_events SET address = NEW.recipient WHERE bounce_event_id = NEW.id;
    END IF;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.bounce_events_history() IS 'Row trigger: each report becomes a suppression_events row; a renamed recipient (privacy erasure) renames its row.';

CREATE FUNCTION mailroom.bounce_events_webhook_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION mailroom.bounce_events_webhook_events() IS 'Statement trigger: an email.complained event for each complaint about a known email, while an endpoint listens.';

CREATE TRIGGER bounce_events_history AFTER INSERT OR UPDATE OF recipient ON mailroom.bounce_events FOR EACH ROW EXECUTE FUNCTION mailroom.bounce_events_history();

COMMENT ON TRIGGER bounce_events_history ON mailroom.bounce_events IS 'Records each report in mailroom.suppression_events.';

CREATE TRIGGER bounce_events_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER bounce_events_notify ON mailroom.bounce_events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER bounce_events_webhook_events AFTER INSERT ON mailroom.bounce_events REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.bounce_events_webhook_events();

COMMENT ON TRIGGER bounce_events_webhook_events ON mailroom.bounce_events IS 'Writes mailroom.webhook_events for complaints.';

-- bounce_list

CREATE TABLE mailroom.bounce_list (
    email text NOT NULL,
    bounce_type text NOT NULL,
    reason text,
    smtp_code integer,
    enhanced_code text,
    sender_account_id bigint,
    campaign_id text,
    first_bounced_at timestamp with time zone DEFAULT now() NOT NULL,
    last_bounced_at timestamp with time zone DEFAULT now() NOT NULL,
    bounce_count integer DEFAULT 1 NOT NULL,
    CONSTRAINT bounce_list_bounce_count_positive CHECK ((bounce_count >= 1)),
    CONSTRAINT bounce_list_bounce_type_known CHECK ((bounce_type = ANY (ARRAY['hard'::text, 'soft'::text, 'complaint'::text, 'manual'::text]))),
    CONSTRAINT bounce_list_email_lowercase CHECK ((email = lower(email))),
    CONSTRAINT bounce_list_last_after_first CHECK ((last_bounced_at >= first_bounced_at))
);

COMMENT ON TABLE mailroom.bounce_list IS 'Addresses not to mail because they bounced or complained; checked at enqueue and again at claim time.';

COMMENT ON COLUMN mailroom.bounce_list.email IS 'The suppressed address, lowercased.';
COMMENT ON COLUMN mailroom.bounce_list.bounce_type IS 'hard: the mailbox does not exist; soft: repeated temporary failures; complaint: the recipient reported spam; manual: an operator suppressed it (mailroom suppressions add or import).';
COMMENT ON COLUMN mailroom.bounce_list.reason IS 'The reply or report that put the address here.';
COMMENT ON COLUMN mailroom.bounce_list.sender_account_id IS 'The sender whose email bounced.';
COMMENT ON COLUMN mailroom.bounce_list.bounce_count IS 'How many bounces the address had.';

ALTER TABLE ONLY mailroom.bounce_list
    ADD CONSTRAINT bounce_list_pkey PRIMARY KEY (email);

ALTER TABLE ONLY mailroom.bounce_list
    ADD CONSTRAINT bounce_list_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE SET NULL;

CREATE TRIGGER bounce_list_history AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_list FOR EACH ROW EXECUTE FUNCTION mailroom.suppression_lists_history();

COMMENT ON TRIGGER bounce_list_history ON mailroom.bounce_list IS 'Records each listing, renewal and lift in mailroom.suppression_events.';

CREATE TRIGGER bounce_list_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_list FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER bounce_list_notify ON mailroom.bounce_list IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- complaint_digests

CREATE TABLE mailroom.complaint_digests (
    id bigint NOT NULL,
    period_start timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    complaints integer NOT NULL,
    email_id bigint,
    CONSTRAINT complaint_digests_complaints_positive CHECK ((complaints > 0))
);

COMMENT ON TABLE mailroom.complaint_digests IS 'One digest of new complaints per period for the administrators, sent through the queue; the unique period makes two workers'' digests one.';

COMMENT ON COLUMN mailroom.complaint_digests.period_start IS 'The start of the period the digest covers.';
COMMENT ON COLUMN mailroom.complaint_digests.complaints IS 'How many complaints it told of.';
COMMENT ON COLUMN mailroom.complaint_digests.email_id IS 'The digest email in the queue.';

ALTER TABLE mailroom.complaint_digests ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.complaint_digests_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.complaint_digests
    ADD CONSTRAINT complaint_digests_one_per_period UNIQUE (period_start);

ALTER TABLE ONLY mailroom.complaint_digests
    ADD CONSTRAINT complaint_digests_pkey PRIMARY KEY (id);

CREATE TRIGGER complaint_digests_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.complaint_digests FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER complaint_digests_notify ON mailroom.complaint_digests IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- bounce_quarantine

CREATE TABLE mailroom.bounce_quarantine (
    id bigint NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    reason text NOT NULL,
    envelope_recipient text,
    raw bytea NOT NULL,
    raw_size integer NOT NULL,
    digest bytea NOT NULL,
    raw_kept_bytes integer GENERATED ALWAYS AS (octet_length(raw)) STORED,
    client text,
    CONSTRAINT bounce_quarantine_raw_size_not_negative CHECK ((raw_size >= 0))
);

COMMENT ON TABLE mailroom.bounce_quarantine IS 'Reports the bounce intake could not read or trust, kept once each (by digest) for an operator, bounded in size, per client and in age';

COMMENT ON COLUMN mailroom.bounce_quarantine.reason IS 'Why the report was not applied (no valid token, no known email, unreadable).';
COMMENT ON COLUMN mailroom.bounce_quarantine.envelope_recipient IS 'The address the report was sent to.';
COMMENT ON COLUMN mailroom.bounce_quarantine.raw IS 'The first bytes of the message (64 KiB; raw_size says how long it was)';
COMMENT ON COLUMN mailroom.bounce_quarantine.raw_size IS 'Size of the whole message in bytes (raw keeps at most its first 256 KiB).';
COMMENT ON COLUMN mailroom.bounce_quarantine.digest IS 'SHA-256 of the whole message: a redelivery is kept once.';
COMMENT ON COLUMN mailroom.bounce_quarantine.raw_kept_bytes IS 'octet_length(raw): what a read-only role may know of raw, which it may not read';
COMMENT ON COLUMN mailroom.bounce_quarantine.client IS 'Who handed the message in: the SMTP peer address, pipe, mailbox:<name> or webhook:<provider>; NULL when not known';

ALTER TABLE mailroom.bounce_quarantine ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.bounce_quarantine_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.bounce_quarantine
    ADD CONSTRAINT bounce_quarantine_digest_unique UNIQUE (digest);

ALTER TABLE ONLY mailroom.bounce_quarantine
    ADD CONSTRAINT bounce_quarantine_pkey PRIMARY KEY (id);

CREATE INDEX bounce_quarantine_received_idx ON mailroom.bounce_quarantine USING btree (received_at);

CREATE FUNCTION mailroom.bounce_quarantine_count() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE mailroom.bounce_quarantine_size
        SET messages = messages + c.n, bytes = bytes + c.b
        FROM (SELECT count(*) AS n, coalesce(sum(octet_length(raw) + octet_length(reason)
                                  + coalesce(octet_length(envelope_recipient), 0) + coalesce(octet_length(client), 0)), 0) AS b
              FROM new_rows) c;
    ELSE
        UPDATE mailroom.bounce_quarantine_size
        SET messages = messages - c.n, bytes = bytes - c.b
        FROM (SELECT count(*) AS n, coalesce(sum(octet_length(raw) + octet_length(reason)
                                  + coalesce(octet_length(envelope_recipient), 0) + coalesce(octet_length(client), 0)), 0) AS b
              FROM old_rows) c;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION mailroom.bounce_quarantine_count() IS 'Keeps mailroom.bounce_quarantine_size equal to what bounce_quarantine holds, for inserts and deletes';

CREATE TRIGGER bounce_quarantine_count_deletes AFTER DELETE ON mailroom.bounce_quarantine REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.bounce_quarantine_count();

COMMENT ON TRIGGER bounce_quarantine_count_deletes ON mailroom.bounce_quarantine IS 'Takes deleted messages off mailroom.bounce_quarantine_size.';

CREATE TRIGGER bounce_quarantine_count_inserts AFTER INSERT ON mailroom.bounce_quarantine REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.bounce_quarantine_count();

COMMENT ON TRIGGER bounce_quarantine_count_inserts ON mailroom.bounce_quarantine IS 'Adds inserted messages to mailroom.bounce_quarantine_size.';

CREATE TRIGGER bounce_quarantine_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_quarantine FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER bounce_quarantine_notify ON mailroom.bounce_quarantine IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- bounce_quarantine_size

CREATE TABLE mailroom.bounce_quarantine_size (
    one boolean DEFAULT true NOT NULL,
    messages bigint NOT NULL,
    bytes bigint NOT NULL,
    CONSTRAINT bounce_quarantine_size_bytes_not_negative CHECK ((bytes >= 0)),
    CONSTRAINT bounce_quarantine_size_messages_not_negative CHECK ((messages >= 0)),
    CONSTRAINT bounce_quarantine_size_one_row CHECK (one)
);

COMMENT ON TABLE mailroom.bounce_quarantine_size IS 'One row: how many messages the bounce quarantine holds and their size (kept bytes and text fields), kept by triggers';

COMMENT ON COLUMN mailroom.bounce_quarantine_size.one IS 'Always true: the table has one row.';
COMMENT ON COLUMN mailroom.bounce_quarantine_size.messages IS 'Messages in the quarantine.';
COMMENT ON COLUMN mailroom.bounce_quarantine_size.bytes IS 'Bytes of raw messages kept in the quarantine.';

ALTER TABLE ONLY mailroom.bounce_quarantine_size
    ADD CONSTRAINT bounce_quarantine_size_pkey PRIMARY KEY (one);

-- bounce_quarantine_clients

CREATE TABLE mailroom.bounce_quarantine_clients (
    client text NOT NULL,
    day date NOT NULL,
    kept integer DEFAULT 0 NOT NULL,
    dropped integer DEFAULT 0 NOT NULL,
    CONSTRAINT bounce_quarantine_clients_dropped_not_negative CHECK ((dropped >= 0)),
    CONSTRAINT bounce_quarantine_clients_kept_not_negative CHECK ((kept >= 0))
);

COMMENT ON TABLE mailroom.bounce_quarantine_clients IS 'Quarantined messages kept and dropped per client and UTC day: the per-client limit and what health reports';

COMMENT ON COLUMN mailroom.bounce_quarantine_clients.client IS 'As bounce_quarantine.client; unknown when the intake was not told';
COMMENT ON COLUMN mailroom.bounce_quarantine_clients.day IS 'The UTC day counted.';
COMMENT ON COLUMN mailroom.bounce_quarantine_clients.kept IS 'Messages of the client quarantined that day.';
COMMENT ON COLUMN mailroom.bounce_quarantine_clients.dropped IS 'Messages not kept: the client was over its daily limit or the quarantine was full';

ALTER TABLE ONLY mailroom.bounce_quarantine_clients
    ADD CONSTRAINT bounce_quarantine_clients_pkey PRIMARY KEY (client, day);

-- unsubscribe_list

CREATE TABLE mailroom.unsubscribe_list (
    email text NOT NULL,
    reason text,
    source text DEFAULT 'operator'::text NOT NULL,
    campaign_id text,
    email_id bigint,
    user_agent text,
    ip_address inet,
    unsubscribed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT unsubscribe_list_email_lowercase CHECK ((email = lower(email))),
    CONSTRAINT unsubscribe_list_source_known CHECK ((source = ANY (ARRAY['one_click'::text, 'link'::text, 'mailto'::text, 'operator'::text, 'import'::text, 'privacy'::text])))
);

COMMENT ON TABLE mailroom.unsubscribe_list IS 'Addresses that asked for no more non-transactional email (or an operator or privacy request put here).';

COMMENT ON COLUMN mailroom.unsubscribe_list.email IS 'The unsubscribed address, lowercased.';
COMMENT ON COLUMN mailroom.unsubscribe_list.source IS 'one_click: RFC 8058 POST; link: the unsubscribe page; mailto: a mail to the unsubscribe address; operator: by hand; import: a bulk import; privacy: a privacy request.';
COMMENT ON COLUMN mailroom.unsubscribe_list.campaign_id IS 'The campaign whose email the recipient unsubscribed from.';
COMMENT ON COLUMN mailroom.unsubscribe_list.email_id IS 'The email whose link or header was used.';
COMMENT ON COLUMN mailroom.unsubscribe_list.unsubscribed_at IS 'When the address unsubscribed.';

ALTER TABLE ONLY mailroom.unsubscribe_list
    ADD CONSTRAINT unsubscribe_list_pkey PRIMARY KEY (email);

CREATE INDEX unsubscribe_list_campaign_idx ON mailroom.unsubscribe_list USING btree (campaign_id) WHERE (campaign_id IS NOT NULL);

CREATE INDEX unsubscribe_list_unsubscribed_at_idx ON mailroom.unsubscribe_list USING btree (unsubscribed_at);

CREATE TRIGGER unsubscribe_list_history AFTER INSERT OR DELETE OR UPDATE ON mailroom.unsubscribe_list FOR EACH ROW EXECUTE FUNCTION mailroom.suppression_lists_history();

COMMENT ON TRIGGER unsubscribe_list_history ON mailroom.unsubscribe_list IS 'Records each unsubscribe and lift in mailroom.suppression_events.';

CREATE TRIGGER unsubscribe_list_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.unsubscribe_list FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER unsubscribe_list_notify ON mailroom.unsubscribe_list IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- suppression_events

CREATE TABLE mailroom.suppression_events (
    id bigint NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    address text NOT NULL,
    kind text NOT NULL,
    change text NOT NULL,
    source text NOT NULL,
    status text,
    reason text,
    email_id bigint,
    bounce_event_id bigint,
    sender_account_id bigint,
    campaign_id text,
    actor text DEFAULT SESSION_USER NOT NULL,
    CONSTRAINT suppression_events_address_lowercase CHECK ((address = lower(address))),
    CONSTRAINT suppression_events_change_known CHECK ((change = ANY (ARRAY['reported'::text, 'listed'::text, 'lifted'::text]))),
    CONSTRAINT suppression_events_kind_known CHECK ((kind = ANY (ARRAY['hard'::text, 'soft'::text, 'complaint'::text, 'unsubscribe'::text, 'manual'::text])))
);

COMMENT ON TABLE mailroom.suppression_events IS 'The history of every address''s suppressions: each report, each listing nobody reported (a refusal during the SMTP session, an unsubscribe, an operator, an import) and each lift; written by triggers on bounce_events, bounce_list and unsubscribe_list.';

COMMENT ON COLUMN mailroom.suppression_events.occurred_at IS 'When the report arrived or the list changed.';
COMMENT ON COLUMN mailroom.suppression_events.address IS 'The address, lowercased.';
COMMENT ON COLUMN mailroom.suppression_events.kind IS 'hard, soft, complaint (bounce_list and reports), unsubscribe (unsubscribe_list) or manual (an operator''s).';
COMMENT ON COLUMN mailroom.suppression_events.change IS 'reported: a DSN, complaint or webhook report (bounce_event_id names it); listed: the address was put on a list, or its listing renewed, without a report; lifted: taken off a list.';
COMMENT ON COLUMN mailroom.suppression_events.source IS 'Where it came from: a report''s source (dsn, arf, plain, webhook, postmark, sendgrid, ses), smtp (the relay refused the address during the session), an unsubscribe''s (one_click, link, mailto, privacy), operator, import or sql (a change made in SQL by hand).';
COMMENT ON COLUMN mailroom.suppression_events.status IS 'The enhanced status code (5.1.1) or SMTP code reported, or the complaint''s Feedback-Type.';
COMMENT ON COLUMN mailroom.suppression_events.reason IS 'The diagnostic, the refusal, or the operator''s reason.';
COMMENT ON COLUMN mailroom.suppression_events.bounce_event_id IS 'The report this row records (change reported).';
COMMENT ON COLUMN mailroom.suppression_events.actor IS 'Who made the change: the operator (OS user, console:user) for the command line and the console, else the database role.';

ALTER TABLE mailroom.suppression_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.suppression_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.suppression_events
    ADD CONSTRAINT suppression_events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.suppression_events
    ADD CONSTRAINT suppression_events_bounce_event_exists FOREIGN KEY (bounce_event_id) REFERENCES mailroom.bounce_events(id) ON DELETE SET NULL;

ALTER TABLE ONLY mailroom.suppression_events
    ADD CONSTRAINT suppression_events_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE SET NULL;

CREATE INDEX suppression_events_address_idx ON mailroom.suppression_events USING btree (address, id);

CREATE INDEX suppression_events_bounce_event_idx ON mailroom.suppression_events USING btree (bounce_event_id) WHERE (bounce_event_id IS NOT NULL);

CREATE FUNCTION mailroom.suppression_events_webhook_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION mailroom.suppression_events_webhook_events() IS 'Statement trigger: an email.unsubscribed event for each unsubscribe that names its email, while an endpoint listens.';

CREATE TRIGGER suppression_events_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.suppression_events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER suppression_events_notify ON mailroom.suppression_events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER suppression_events_webhook_events AFTER INSERT ON mailroom.suppression_events REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.suppression_events_webhook_events();

COMMENT ON TRIGGER suppression_events_webhook_events ON mailroom.suppression_events IS 'Writes mailroom.webhook_events for unsubscribes.';

-- suppressions

CREATE VIEW mailroom.suppressions AS
 SELECT b.email AS address,
    b.bounce_type AS kind,
        CASE
            WHEN (mailroom.suppression_verdict(b.bounce_type, b.bounce_count, false, true) IS NOT NULL) THEN 'all email'::text
            ELSE 'held a day after each bounce'::text
        END AS stops,
    b.reason,
    COALESCE(b.enhanced_code, (b.smtp_code)::text) AS status,
    b.bounce_count AS times,
    b.first_bounced_at AS since,
    b.last_bounced_at AS last_at,
    b.sender_account_id,
    b.campaign_id
   FROM mailroom.bounce_list b
UNION ALL
 SELECT u.email AS address,
    'unsubscribe'::text AS kind,
    'non-transactional email'::text AS stops,
    u.reason,
    NULL::text AS status,
    1 AS times,
    u.unsubscribed_at AS since,
    u.unsubscribed_at AS last_at,
    NULL::bigint AS sender_account_id,
    u.campaign_id
   FROM mailroom.unsubscribe_list u;

COMMENT ON VIEW mailroom.suppressions IS 'Every suppressed address, one row per list it is on: its kind, what it stops (all email, non-transactional email, or a hold for a soft bounce under three), why and since when.';

-- functions

CREATE FUNCTION mailroom.email_suppression(status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN status <> 'pending' THEN NULL
        WHEN to_extra IS NULL AND cc IS NULL AND bcc IS NULL THEN mailroom.suppression_reason(recipient, transactional)
        WHEN bool_and(mailroom.suppression_reason(a, transactional) IS NOT NULL)
            THEN 'every recipient suppressed; the first: ' || mailroom.suppression_reason(recipient, transactional)
    END
    FROM unnest(ARRAY[recipient] || coalesce(to_extra, '{}') || coalesce(cc, '{}') || coalesce(bcc, '{}')) AS r(a)
$$;

COMMENT ON FUNCTION mailroom.email_suppression(status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean) IS 'Why a new email is stored suppressed (every recipient suppressed), NULL when it is queued: the reason mailroom.email_queue_suppress_listed stores. Granted to no one.';

REVOKE ALL ON FUNCTION mailroom.email_suppression(status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean) FROM PUBLIC;

CREATE FUNCTION mailroom.enqueue_suppression(status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT mailroom.suppression_told(mailroom.email_suppression(status, recipient, to_extra, cc, bcc, transactional))
$$;

COMMENT ON FUNCTION mailroom.enqueue_suppression(status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean) IS 'Whether a new email is stored suppressed, as its caller is told (mailroom.suppression_told), NULL when it is queued; the Python API returns it with the id.';

REVOKE ALL ON FUNCTION mailroom.enqueue_suppression(status text, recipient text, to_extra text[], cc text[], bcc text[], transactional boolean) FROM PUBLIC;

CREATE FUNCTION mailroom.suppression_lists_history() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    unsubscribe boolean := TG_TABLE_NAME = 'unsubscribe_list';
    row_kind text;
    row_source text;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.email IS DISTINCT FROM OLD.email THEN
        -- A privacy erasure renames the address: its history follows, no new event.
        UPDATE mailroom.suppression_events SET address = NEW.email WHERE address = OLD.email;
        RETURN NULL;
    END IF;
    IF TG_OP = 'DELETE' THEN
        -- by name through jsonb: this one function serves both tables, and only bounce_list has bounce_type
        row_kind := coalesce(to_jsonb(OLD) ->> 'bounce_type', 'unsubscribe');
        INSERT INTO mailroom.suppression_events (address, kind, change, source, reason, actor)
        VALUES (OLD.email, row_kind, 'lifted', coalesce(mailroom.suppression_note('source'), 'sql'),
                mailroom.suppression_note('reason'), coalesce(mailroom.suppression_note('actor'), session_user));
        RETURN NULL;
    END IF;
    IF unsubscribe THEN
        INSERT INTO mailroom.suppression_events (address, kind, change, source, reason, email_id, campaign_id, actor)
        VALUES (NEW.email, 'unsubscribe', 'listed', coalesce(mailroom.suppression_note('source'), NEW.source),
                coalesce(mailroom.suppression_note('reason'), NEW.reason), NEW.email_id, NEW.campaign_id,
                coalesce(mailroom.suppression_note('actor'), session_user));
        RETURN NULL;
    END IF;
    IF mailroom.suppression_note('report') = NEW.email THEN
        RETURN NULL;  -- the report's own row says it (bounce_events_history)
    END IF;
    -- Without a report and without an operator's note, the worker listed it: the relay refused the
    -- address during the SMTP session (worker.engine.queue_sql.RECORD_BOUNCES).
    row_source := coalesce(mailroom.suppression_note('source'), 'smtp');
    INSERT INTO mailroom.suppression_events (address, kind, change, source, status, reason, sender_account_id,
                                             campaign_id, actor)
    VALUES (NEW.email, NEW.bounce_type, 'listed', row_source,
            coalesce(NEW.enhanced_code, NEW.smtp_code::text),
            coalesce(mailroom.suppression_note('reason'), NEW.reason), NEW.sender_account_id, NEW.campaign_id,
            coalesce(mailroom.suppression_note('actor'), session_user));
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.suppression_lists_history() IS 'Row trigger on bounce_list and unsubscribe_list: each listing, renewal and lift becomes a suppression_events row (a report''s listing is its report''s row).';

CREATE FUNCTION mailroom.suppression_note(name text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT nullif(current_setting('mailroom.suppression_' || name, true), '')
$$;

COMMENT ON FUNCTION mailroom.suppression_note(name text) IS 'The transaction''s mailroom.suppression_source, _actor or _reason setting (set by the operator''s commands), NULL when unset.';

CREATE FUNCTION mailroom.suppression_reason(address text, transactional boolean) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT mailroom.suppression_verdict(b.bounce_type, b.bounce_count, u.email IS NOT NULL,
                                        suppression_reason.transactional)
    FROM (SELECT lower(suppression_reason.address) AS email) a
    LEFT JOIN mailroom.bounce_list b ON b.email = a.email
    LEFT JOIN mailroom.unsubscribe_list u ON u.email = a.email
$$;

COMMENT ON FUNCTION mailroom.suppression_reason(address text, transactional boolean) IS 'Why email to this address is not sent, NULL when it may be sent: the address (any case) looked up on bounce_list and unsubscribe_list and judged by mailroom.suppression_verdict.';

REVOKE ALL ON FUNCTION mailroom.suppression_reason(address text, transactional boolean) FROM PUBLIC;

CREATE FUNCTION mailroom.suppression_told(reason text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT mailroom.suppression_told_to(session_user, reason)
$$;

COMMENT ON FUNCTION mailroom.suppression_told(reason text) IS 'What the connected role is told of a suppression: the reason when it may read the suppression list (SELECT on mailroom.bounce_list), else only that the address is on it. Used by every answer an application gets: enqueue_outcome, my_emails, enqueue_suppression.';

CREATE FUNCTION mailroom.suppression_told_to(role_name name, reason text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN reason IS NULL THEN NULL
                WHEN NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = role_name) THEN
                    'suppressed: the address is on the suppression list (an operator can say why)'
                WHEN pg_catalog.has_table_privilege(role_name, 'mailroom.bounce_list'::regclass, 'SELECT') THEN reason
                ELSE 'suppressed: the address is on the suppression list (an operator can say why)'
           END
$$;

COMMENT ON FUNCTION mailroom.suppression_told_to(role_name name, reason text) IS 'What a role is told of a suppression: the reason when it may read the suppression list (SELECT on mailroom.bounce_list), else only that the address is on it.';

CREATE FUNCTION mailroom.suppression_verdict(bounce_type text, bounce_count integer, unsubscribed boolean, transactional boolean) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN bounce_type = 'manual' THEN 'suppressed by an operator (manual)'
                WHEN bounce_type IN ('hard', 'complaint') THEN 'on the bounce list (' || bounce_type || ')'
                WHEN bounce_type = 'soft' AND bounce_count >= 3
                    THEN 'on the bounce list (soft, ' || bounce_count::text || ' times)'
                WHEN unsubscribed AND NOT transactional THEN 'unsubscribed'
           END
$$;

COMMENT ON FUNCTION mailroom.suppression_verdict(bounce_type text, bounce_count integer, unsubscribed boolean, transactional boolean) IS 'The suppression rule, once: why email to an address is not sent, given its bounce_list row (bounce_type, bounce_count; NULL when not listed), whether it is on unsubscribe_list and whether the email is transactional; NULL when it may be sent. Suppressed: an operator''s suppression (manual), a hard bounce, a complaint, three soft bounces, or an unsubscribe for non-transactional email. A soft bounce under three is not a suppression: the claim holds the email until a day after the last bounce (its own rule, worker.engine.queue_sql.CLAIM), the enqueue queues it, the retry preview does not count it as suppressed again and a reminder goes (held like any email). Called over rows already joined (the claim) and by mailroom.suppression_reason, which looks the address up.';

-- == tracking ==

-- tracked_links

CREATE TABLE mailroom.tracked_links (
    token uuid DEFAULT gen_random_uuid() NOT NULL,
    email_id bigint NOT NULL,
    "position" integer NOT NULL,
    url text NOT NULL,
    CONSTRAINT tracked_links_position_not_negative CHECK (("position" >= 0)),
    CONSTRAINT tracked_links_url_http CHECK ((url ~* '^https?://'::text))
);

COMMENT ON TABLE mailroom.tracked_links IS 'The destination of each tracked link of an email: the tracker redirects only to a stored URL, never to one from a request.';

COMMENT ON COLUMN mailroom.tracked_links.token IS 'The link''s id in the tracked URL (secret to read-only roles).';
COMMENT ON COLUMN mailroom.tracked_links."position" IS 'The link''s place in the email (0 for the first).';

ALTER TABLE ONLY mailroom.tracked_links
    ADD CONSTRAINT tracked_links_one_per_position UNIQUE (email_id, "position");

ALTER TABLE ONLY mailroom.tracked_links
    ADD CONSTRAINT tracked_links_pkey PRIMARY KEY (token);

ALTER TABLE ONLY mailroom.tracked_links
    ADD CONSTRAINT tracked_links_email_exists FOREIGN KEY (email_id) REFERENCES mailroom.email_queue(id) ON DELETE CASCADE;

-- open_events

CREATE TABLE mailroom.open_events (
    id bigint NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    email_id bigint NOT NULL,
    campaign_id text,
    ip_address inet,
    user_agent text
)
PARTITION BY RANGE (occurred_at);

COMMENT ON TABLE mailroom.open_events IS 'Open-pixel fetches, partitioned by month (image proxies and scanners fetch too: a count of fetches, not of readers).';

COMMENT ON COLUMN mailroom.open_events.occurred_at IS 'When the pixel was fetched.';

ALTER TABLE mailroom.open_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.open_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.open_events
    ADD CONSTRAINT open_events_pkey PRIMARY KEY (id, occurred_at);

CREATE INDEX open_events_campaign_idx ON ONLY mailroom.open_events USING btree (campaign_id, occurred_at);

CREATE INDEX open_events_email_idx ON ONLY mailroom.open_events USING btree (email_id);

CREATE INDEX open_events_occurred_at_idx ON ONLY mailroom.open_events USING btree (occurred_at);

CREATE TRIGGER open_events_notify AFTER INSERT ON mailroom.open_events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER open_events_notify ON mailroom.open_events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER open_events_webhook_events AFTER INSERT ON mailroom.open_events REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.tracking_webhook_events();

COMMENT ON TRIGGER open_events_webhook_events ON mailroom.open_events IS 'Writes mailroom.webhook_events for opens.';

-- open_events_default

CREATE TABLE mailroom.open_events_default (
    id bigint CONSTRAINT open_events_id_not_null NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() CONSTRAINT open_events_occurred_at_not_null NOT NULL,
    email_id bigint CONSTRAINT open_events_email_id_not_null NOT NULL,
    campaign_id text,
    ip_address inet,
    user_agent text
);

COMMENT ON TABLE mailroom.open_events_default IS 'Opens outside every month partition.';

ALTER TABLE ONLY mailroom.open_events ATTACH PARTITION mailroom.open_events_default DEFAULT;

ALTER TABLE ONLY mailroom.open_events_default
    ADD CONSTRAINT open_events_default_pkey PRIMARY KEY (id, occurred_at);

CREATE INDEX open_events_default_campaign_id_occurred_at_idx ON mailroom.open_events_default USING btree (campaign_id, occurred_at);

CREATE INDEX open_events_default_email_id_idx ON mailroom.open_events_default USING btree (email_id);

CREATE INDEX open_events_default_occurred_at_idx ON mailroom.open_events_default USING btree (occurred_at);

ALTER INDEX mailroom.open_events_campaign_idx ATTACH PARTITION mailroom.open_events_default_campaign_id_occurred_at_idx;

ALTER INDEX mailroom.open_events_email_idx ATTACH PARTITION mailroom.open_events_default_email_id_idx;

ALTER INDEX mailroom.open_events_occurred_at_idx ATTACH PARTITION mailroom.open_events_default_occurred_at_idx;

ALTER INDEX mailroom.open_events_pkey ATTACH PARTITION mailroom.open_events_default_pkey;

-- click_events

CREATE TABLE mailroom.click_events (
    id bigint NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    email_id bigint NOT NULL,
    link_token uuid NOT NULL,
    url text NOT NULL,
    campaign_id text,
    ip_address inet,
    user_agent text
)
PARTITION BY RANGE (occurred_at);

COMMENT ON TABLE mailroom.click_events IS 'Tracked-link clicks, partitioned by month.';

COMMENT ON COLUMN mailroom.click_events.occurred_at IS 'When the link was followed.';
COMMENT ON COLUMN mailroom.click_events.link_token IS 'The tracked link followed (mailroom.tracked_links.token).';
COMMENT ON COLUMN mailroom.click_events.url IS 'The destination redirected to.';

ALTER TABLE mailroom.click_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.click_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.click_events
    ADD CONSTRAINT click_events_pkey PRIMARY KEY (id, occurred_at);

CREATE INDEX click_events_campaign_idx ON ONLY mailroom.click_events USING btree (campaign_id, occurred_at);

CREATE INDEX click_events_email_idx ON ONLY mailroom.click_events USING btree (email_id);

CREATE INDEX click_events_occurred_at_idx ON ONLY mailroom.click_events USING btree (occurred_at);

CREATE TRIGGER click_events_notify AFTER INSERT ON mailroom.click_events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER click_events_notify ON mailroom.click_events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER click_events_webhook_events AFTER INSERT ON mailroom.click_events REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.tracking_webhook_events();

COMMENT ON TRIGGER click_events_webhook_events ON mailroom.click_events IS 'Writes mailroom.webhook_events for clicks.';

-- click_events_default

CREATE TABLE mailroom.click_events_default (
    id bigint CONSTRAINT click_events_id_not_null NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() CONSTRAINT click_events_occurred_at_not_null NOT NULL,
    email_id bigint CONSTRAINT click_events_email_id_not_null NOT NULL,
    link_token uuid CONSTRAINT click_events_link_token_not_null NOT NULL,
    url text CONSTRAINT click_events_url_not_null NOT NULL,
    campaign_id text,
    ip_address inet,
    user_agent text
);

COMMENT ON TABLE mailroom.click_events_default IS 'Clicks outside every month partition.';

ALTER TABLE ONLY mailroom.click_events ATTACH PARTITION mailroom.click_events_default DEFAULT;

ALTER TABLE ONLY mailroom.click_events_default
    ADD CONSTRAINT click_events_default_pkey PRIMARY KEY (id, occurred_at);

CREATE INDEX click_events_default_campaign_id_occurred_at_idx ON mailroom.click_events_default USING btree (campaign_id, occurred_at);

CREATE INDEX click_events_default_email_id_idx ON mailroom.click_events_default USING btree (email_id);

CREATE INDEX click_events_default_occurred_at_idx ON mailroom.click_events_default USING btree (occurred_at);

ALTER INDEX mailroom.click_events_campaign_idx ATTACH PARTITION mailroom.click_events_default_campaign_id_occurred_at_idx;

ALTER INDEX mailroom.click_events_email_idx ATTACH PARTITION mailroom.click_events_default_email_id_idx;

ALTER INDEX mailroom.click_events_occurred_at_idx ATTACH PARTITION mailroom.click_events_default_occurred_at_idx;

ALTER INDEX mailroom.click_events_pkey ATTACH PARTITION mailroom.click_events_default_pkey;

-- campaigns

CREATE TABLE mailroom.campaigns (
    campaign_id text NOT NULL,
    list_id text,
    postal_address text,
    track_opens boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT campaigns_campaign_id_length CHECK (((length(campaign_id) >= 1) AND (length(campaign_id) <= 100))),
    CONSTRAINT campaigns_list_id_dot_atom CHECK (((length(list_id) <= 255) AND (list_id ~ '^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)+$'::text))),
    CONSTRAINT campaigns_postal_address_plain_text CHECK ((((length(btrim(postal_address)) >= 5) AND (length(btrim(postal_address)) <= 300)) AND (postal_address !~ '[\u0001-\u001f\u007f-\u009f]'::text)))
);

COMMENT ON TABLE mailroom.campaigns IS 'How the email of one campaign (email_queue.campaign_id) is dressed: its List-Id, its postal address and whether it carries an open pixel. A campaign without a row uses the defaults.';

COMMENT ON COLUMN mailroom.campaigns.list_id IS 'RFC 2919 list identifier written as List-Id: <list_id>; NULL: derived from the campaign id and the From domain.';
COMMENT ON COLUMN mailroom.campaigns.postal_address IS 'Physical postal address shown in the footer of this campaign''s email, before the sender account''s and MAILROOM_POSTAL_ADDRESS.';
COMMENT ON COLUMN mailroom.campaigns.track_opens IS 'Whether campaign email enqueued from now on carries the open-tracking pixel (click tracking is the email''s own choice).';

ALTER TABLE ONLY mailroom.campaigns
    ADD CONSTRAINT campaigns_pkey PRIMARY KEY (campaign_id);

CREATE TRIGGER campaigns_touch BEFORE UPDATE ON mailroom.campaigns FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

COMMENT ON TRIGGER campaigns_touch ON mailroom.campaigns IS 'updated_at follows every change; created_at is never rewritten.';

-- functions

CREATE FUNCTION mailroom.campaign_mail_policy(campaign text, OUT track_opens boolean, OUT has_postal_address boolean) RETURNS record
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'mailroom'
    AS $$
    SELECT coalesce((SELECT c.track_opens FROM mailroom.campaigns c WHERE c.campaign_id = campaign), true),
           EXISTS (SELECT 1 FROM mailroom.campaigns c
                   WHERE c.campaign_id = campaign AND c.postal_address IS NOT NULL)
           OR coalesce((SELECT bool_and(s.postal_address IS NOT NULL) FROM mailroom.sender_accounts s), false)
$$;

COMMENT ON FUNCTION mailroom.campaign_mail_policy(campaign text, OUT track_opens boolean, OUT has_postal_address boolean) IS 'For enqueue: whether the campaign''s email carries an open pixel, and whether a postal address is known for it (its own, or every sender account has one; the global setting is checked by the caller).';

CREATE FUNCTION mailroom.tracking_webhook_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION mailroom.tracking_webhook_events() IS 'Statement trigger of open_events and click_events: an email.opened or email.clicked event (with the URL) for each, while an endpoint listens.';

-- == webhooks: events back to the application ==

-- webhook_endpoints

CREATE TABLE mailroom.webhook_endpoints (
    id bigint NOT NULL,
    url text NOT NULL,
    owner_role name,
    events text[] NOT NULL,
    secret_encrypted bytea NOT NULL,
    allow_private boolean DEFAULT false NOT NULL,
    status text DEFAULT 'active'::text NOT NULL,
    status_reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    created_by text DEFAULT SESSION_USER NOT NULL,
    failures integer DEFAULT 0 NOT NULL,
    failing_since timestamp with time zone,
    circuit_until timestamp with time zone,
    last_success_at timestamp with time zone,
    last_error text,
    CONSTRAINT webhook_endpoints_events_known CHECK (((cardinality(events) >= 1) AND (events <@ ARRAY['email.sent'::text, 'email.bounced'::text, 'email.complained'::text, 'email.opened'::text, 'email.clicked'::text, 'email.unsubscribed'::text, 'email.failed'::text, 'email.expired'::text, 'email.suppressed'::text, 'email.cancelled'::text, 'document.signed'::text]))),
    CONSTRAINT webhook_endpoints_failures_not_negative CHECK ((failures >= 0)),
    CONSTRAINT webhook_endpoints_last_error_bounded CHECK ((length(last_error) <= 1000)),
    CONSTRAINT webhook_endpoints_status_known CHECK ((status = ANY (ARRAY['active'::text, 'paused'::text, 'disabled'::text, 'removing'::text]))),
    CONSTRAINT webhook_endpoints_status_reason_bounded CHECK ((length(status_reason) <= 1000)),
    CONSTRAINT webhook_endpoints_url CHECK ((((length(url) >= 10) AND (length(url) <= 2048)) AND (url ~* '^https?://[^/?#@]+([/?#].*)?$'::text) AND (url ~ '^[!-~]+$'::text)))
);

COMMENT ON TABLE mailroom.webhook_endpoints IS 'Where events go: a URL, the event types it wants, whose email (owner_role; NULL: every email, an operator''s endpoint), its signing secret (encrypted with the secret key), its state and its circuit.';

COMMENT ON COLUMN mailroom.webhook_endpoints.owner_role IS 'The application role whose email''s events this endpoint receives (email_queue.enqueued_by); NULL for an operator''s endpoint, which receives every event but is told no recipient.';
COMMENT ON COLUMN mailroom.webhook_endpoints.allow_private IS 'An operator allowed this endpoint to resolve to loopback, private, link-local or metadata addresses.';
COMMENT ON COLUMN mailroom.webhook_endpoints.status IS 'active; paused (events wait for resume); disabled (the receiver answered 410 Gone: no new events until resumed); removing (being deleted: no new event, so no writer waits on the delete).';
COMMENT ON COLUMN mailroom.webhook_endpoints.failures IS 'Failed attempts in a row since the last success.';
COMMENT ON COLUMN mailroom.webhook_endpoints.failing_since IS 'The first failure since the last success (health warns after an hour).';
COMMENT ON COLUMN mailroom.webhook_endpoints.circuit_until IS 'After failures in a row, no attempt to this endpoint before this time.';

ALTER TABLE mailroom.webhook_endpoints ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.webhook_endpoints_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (id);

CREATE TRIGGER webhook_endpoints_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.webhook_endpoints FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER webhook_endpoints_notify ON mailroom.webhook_endpoints IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- webhook_events

CREATE TABLE mailroom.webhook_events (
    id bigint NOT NULL,
    uid uuid DEFAULT gen_random_uuid() NOT NULL,
    type text NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() NOT NULL,
    email_id bigint,
    owner name,
    idempotency_key text,
    recipient text,
    data jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT webhook_events_data_object CHECK ((jsonb_typeof(data) = 'object'::text))
);

COMMENT ON TABLE mailroom.webhook_events IS 'What happened to an email (or a document), written by triggers in the transaction of the change: none for a change that rolled back, none lost when a process dies. Written only while an endpoint exists.';

COMMENT ON COLUMN mailroom.webhook_events.uid IS 'The event''s stable id (webhook-id: evt_<uid>), the same on every retry and replay.';
COMMENT ON COLUMN mailroom.webhook_events.owner IS 'The role that enqueued the email (email_queue.enqueued_by): only its endpoints and operators'' receive the event, and only its endpoints the recipient.';

ALTER TABLE mailroom.webhook_events ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.webhook_events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.webhook_events
    ADD CONSTRAINT webhook_events_pkey PRIMARY KEY (id);

CREATE INDEX webhook_events_email_idx ON mailroom.webhook_events USING btree (email_id);

CREATE INDEX webhook_events_occurred_idx ON mailroom.webhook_events USING btree (occurred_at);

CREATE INDEX webhook_events_recipient_idx ON mailroom.webhook_events USING btree (lower(recipient));

CREATE FUNCTION mailroom.webhook_events_fan_out() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    INSERT INTO mailroom.webhook_deliveries (endpoint_id, event_id, email_id)
    SELECT p.id, e.id, e.email_id
    FROM new_events e
    JOIN mailroom.webhook_endpoints p
      ON e.type = ANY (p.events) AND p.status IN ('active', 'paused')
     AND (p.owner_role IS NULL OR p.owner_role = e.owner);
    IF FOUND THEN
        PERFORM pg_notify('mailroom_webhooks', '');
    END IF;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.webhook_events_fan_out() IS 'Statement trigger: one delivery for each new event and each endpoint that wants it (its type, its owner''s email or an operator''s endpoint); NOTIFY mailroom_webhooks.';

CREATE TRIGGER webhook_events_fan_out AFTER INSERT ON mailroom.webhook_events REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.webhook_events_fan_out();

COMMENT ON TRIGGER webhook_events_fan_out ON mailroom.webhook_events IS 'Fans each statement''s events out to the endpoints (mailroom.webhook_deliveries).';

-- webhook_deliveries

CREATE TABLE mailroom.webhook_deliveries (
    endpoint_id bigint NOT NULL,
    event_id bigint NOT NULL,
    email_id bigint,
    status text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone DEFAULT now() NOT NULL,
    leased_until timestamp with time zone,
    first_attempt_at timestamp with time zone,
    finished_at timestamp with time zone,
    last_code smallint,
    last_error text,
    CONSTRAINT webhook_deliveries_attempts_not_negative CHECK ((attempts >= 0)),
    CONSTRAINT webhook_deliveries_finished CHECK (((status = 'pending'::text) = (finished_at IS NULL))),
    CONSTRAINT webhook_deliveries_last_error_bounded CHECK ((length(last_error) <= 1000)),
    CONSTRAINT webhook_deliveries_status_known CHECK ((status = ANY (ARRAY['pending'::text, 'delivered'::text, 'dead'::text])))
);

COMMENT ON TABLE mailroom.webhook_deliveries IS 'One event for one endpoint: pending (with its next attempt and, while a worker posts it, a lease), delivered (a 2xx), or dead (retries exhausted).';

COMMENT ON COLUMN mailroom.webhook_deliveries.leased_until IS 'A worker is posting it until then; after, another may (the receiver then sees the same webhook-id again).';

ALTER TABLE ONLY mailroom.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (endpoint_id, event_id);

ALTER TABLE ONLY mailroom.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_endpoint FOREIGN KEY (endpoint_id) REFERENCES mailroom.webhook_endpoints(id) ON DELETE CASCADE;

ALTER TABLE ONLY mailroom.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_event FOREIGN KEY (event_id) REFERENCES mailroom.webhook_events(id) ON DELETE CASCADE;

CREATE INDEX webhook_deliveries_dead_idx ON mailroom.webhook_deliveries USING btree (endpoint_id) WHERE (status = 'dead'::text);

CREATE INDEX webhook_deliveries_delivered_idx ON mailroom.webhook_deliveries USING btree (endpoint_id, finished_at) WHERE (status = 'delivered'::text);

CREATE INDEX webhook_deliveries_email_order_idx ON mailroom.webhook_deliveries USING btree (endpoint_id, email_id, event_id) WHERE (status = 'pending'::text);

CREATE INDEX webhook_deliveries_event_idx ON mailroom.webhook_deliveries USING btree (event_id);

CREATE INDEX webhook_deliveries_pending_idx ON mailroom.webhook_deliveries USING btree (endpoint_id, event_id) WHERE (status = 'pending'::text);

-- functions

CREATE FUNCTION mailroom.webhooks_listening() RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT EXISTS (SELECT FROM mailroom.webhook_endpoints WHERE status IN ('active', 'paused'))
$$;

COMMENT ON FUNCTION mailroom.webhooks_listening() IS 'Whether an endpoint could receive an event (active or paused): the event triggers write nothing otherwise.';

REVOKE ALL ON FUNCTION mailroom.webhooks_listening() FROM PUBLIC;

-- == DMARC aggregate reports ==

-- dmarc_reports

CREATE TABLE mailroom.dmarc_reports (
    id bigint NOT NULL,
    org_name text NOT NULL,
    report_id text NOT NULL,
    org_email text,
    domain text NOT NULL,
    begins_at timestamp with time zone NOT NULL,
    ends_at timestamp with time zone NOT NULL,
    policy text NOT NULL,
    subdomain_policy text,
    percent smallint,
    adkim text,
    aspf text,
    messages bigint NOT NULL,
    arrived_by text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    records integer DEFAULT 0 NOT NULL,
    digest bytea,
    disputes integer DEFAULT 0 NOT NULL,
    disputed_at timestamp with time zone,
    CONSTRAINT dmarc_reports_adkim_known CHECK ((adkim = ANY (ARRAY['r'::text, 's'::text]))),
    CONSTRAINT dmarc_reports_arrived_by_known CHECK ((arrived_by = ANY (ARRAY['cli'::text, 'receiver'::text, 'mailbox'::text]))),
    CONSTRAINT dmarc_reports_aspf_known CHECK ((aspf = ANY (ARRAY['r'::text, 's'::text]))),
    CONSTRAINT dmarc_reports_digest_length CHECK ((octet_length(digest) = 32)),
    CONSTRAINT dmarc_reports_disputed_when_disputes CHECK (((disputes = 0) = (disputed_at IS NULL))),
    CONSTRAINT dmarc_reports_disputes_not_negative CHECK ((disputes >= 0)),
    CONSTRAINT dmarc_reports_domain_length CHECK (((length(domain) >= 1) AND (length(domain) <= 253))),
    CONSTRAINT dmarc_reports_messages_not_negative CHECK ((messages >= 0)),
    CONSTRAINT dmarc_reports_org_email_length CHECK ((length(org_email) <= 320)),
    CONSTRAINT dmarc_reports_org_name_length CHECK (((length(org_name) >= 1) AND (length(org_name) <= 255))),
    CONSTRAINT dmarc_reports_percent_range CHECK (((percent >= 0) AND (percent <= 100))),
    CONSTRAINT dmarc_reports_policy_known CHECK ((policy = ANY (ARRAY['none'::text, 'quarantine'::text, 'reject'::text]))),
    CONSTRAINT dmarc_reports_range_ordered CHECK ((ends_at >= begins_at)),
    CONSTRAINT dmarc_reports_records_not_negative CHECK ((records >= 0)),
    CONSTRAINT dmarc_reports_report_id_length CHECK (((length(report_id) >= 1) AND (length(report_id) <= 255))),
    CONSTRAINT dmarc_reports_subdomain_policy_known CHECK ((subdomain_policy = ANY (ARRAY['none'::text, 'quarantine'::text, 'reject'::text])))
);

COMMENT ON TABLE mailroom.dmarc_reports IS 'DMARC aggregate reports (RFC 7489 rua) about our sender domains: one row per reporting organisation and report id';

COMMENT ON COLUMN mailroom.dmarc_reports.org_name IS 'The reporting organisation (google.com, Outlook.com, Yahoo), as the report names it';
COMMENT ON COLUMN mailroom.dmarc_reports.report_id IS 'The report''s id, unique per organisation: a report sent again is stored once';
COMMENT ON COLUMN mailroom.dmarc_reports.org_email IS 'The reporting organisation''s contact address';
COMMENT ON COLUMN mailroom.dmarc_reports.domain IS 'The domain whose published policy the report applies (policy_published/domain)';
COMMENT ON COLUMN mailroom.dmarc_reports.begins_at IS 'Start of the period the report covers';
COMMENT ON COLUMN mailroom.dmarc_reports.ends_at IS 'End of the period the report covers';
COMMENT ON COLUMN mailroom.dmarc_reports.policy IS 'The DMARC policy (p=) the reporter found published: none, quarantine or reject';
COMMENT ON COLUMN mailroom.dmarc_reports.subdomain_policy IS 'The subdomain policy (sp=) the reporter found, NULL when the report gives none';
COMMENT ON COLUMN mailroom.dmarc_reports.percent IS 'The pct= the reporter found: the share of failing mail the policy applies to';
COMMENT ON COLUMN mailroom.dmarc_reports.adkim IS 'DKIM alignment mode published: r (relaxed) or s (strict)';
COMMENT ON COLUMN mailroom.dmarc_reports.aspf IS 'SPF alignment mode published: r (relaxed) or s (strict)';
COMMENT ON COLUMN mailroom.dmarc_reports.messages IS 'Messages the report covers: the sum of its records'' counts';
COMMENT ON COLUMN mailroom.dmarc_reports.arrived_by IS 'How the report came in: cli (mailroom dmarc ingest), receiver (SMTP) or mailbox (poll)';
COMMENT ON COLUMN mailroom.dmarc_reports.received_at IS 'When Mailroom stored the report; retention deletes by it';
COMMENT ON COLUMN mailroom.dmarc_reports.records IS 'How many records (dmarc_records rows) the report holds; what the bound in all counts';
COMMENT ON COLUMN mailroom.dmarc_reports.digest IS 'SHA-256 of what the report says (header and records, as stored): the same report again is seen before, one with other content disputes it; NULL for reports stored before it was kept (the next arrival sets it)';
COMMENT ON COLUMN mailroom.dmarc_reports.disputes IS 'Reports that came later with this organisation and id but other content (refused): one of them is not what it claims';
COMMENT ON COLUMN mailroom.dmarc_reports.disputed_at IS 'When the last disputing report came, NULL when none did';

ALTER TABLE mailroom.dmarc_reports ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.dmarc_reports_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.dmarc_reports
    ADD CONSTRAINT dmarc_reports_one_per_org_and_id UNIQUE (org_name, report_id);

ALTER TABLE ONLY mailroom.dmarc_reports
    ADD CONSTRAINT dmarc_reports_pkey PRIMARY KEY (id);

CREATE INDEX dmarc_reports_domain_idx ON mailroom.dmarc_reports USING btree (domain, ends_at);

CREATE INDEX dmarc_reports_org_received_idx ON mailroom.dmarc_reports USING btree (org_name, received_at);

CREATE INDEX dmarc_reports_received_idx ON mailroom.dmarc_reports USING btree (received_at);

CREATE FUNCTION mailroom.dmarc_reports_count() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        UPDATE mailroom.dmarc_size SET reports = 0, records = 0;
    ELSIF TG_OP = 'INSERT' THEN
        UPDATE mailroom.dmarc_size SET reports = reports + c.n, records = records + c.r
        FROM (SELECT count(*) AS n, coalesce(sum(records), 0) AS r FROM new_rows) c;
    ELSE
        UPDATE mailroom.dmarc_size SET reports = reports - c.n, records = records - c.r
        FROM (SELECT count(*) AS n, coalesce(sum(records), 0) AS r FROM old_rows) c;
    END IF;
    RETURN NULL;
END;
$$;

COMMENT ON FUNCTION mailroom.dmarc_reports_count() IS 'Keeps mailroom.dmarc_size equal to what dmarc_reports holds, for inserts, deletes and truncation';

CREATE TRIGGER dmarc_reports_count_deletes AFTER DELETE ON mailroom.dmarc_reports REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.dmarc_reports_count();

COMMENT ON TRIGGER dmarc_reports_count_deletes ON mailroom.dmarc_reports IS 'Takes the deleted reports and their records off mailroom.dmarc_size (retention, privacy).';

CREATE TRIGGER dmarc_reports_count_inserts AFTER INSERT ON mailroom.dmarc_reports REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.dmarc_reports_count();

COMMENT ON TRIGGER dmarc_reports_count_inserts ON mailroom.dmarc_reports IS 'Adds the inserted reports and their records to mailroom.dmarc_size (one statement, one update).';

CREATE TRIGGER dmarc_reports_count_truncates AFTER TRUNCATE ON mailroom.dmarc_reports FOR EACH STATEMENT EXECUTE FUNCTION mailroom.dmarc_reports_count();

COMMENT ON TRIGGER dmarc_reports_count_truncates ON mailroom.dmarc_reports IS 'Sets mailroom.dmarc_size to nothing when the reports are truncated.';

-- dmarc_records

CREATE TABLE mailroom.dmarc_records (
    report bigint NOT NULL,
    "position" integer NOT NULL,
    source_ip inet NOT NULL,
    messages bigint NOT NULL,
    disposition text NOT NULL,
    dkim_aligned boolean NOT NULL,
    spf_aligned boolean NOT NULL,
    header_from text,
    envelope_from text,
    auth_results jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT dmarc_records_auth_results_object CHECK ((jsonb_typeof(auth_results) = 'object'::text)),
    CONSTRAINT dmarc_records_disposition_length CHECK (((length(disposition) >= 1) AND (length(disposition) <= 32))),
    CONSTRAINT dmarc_records_envelope_from_length CHECK ((length(envelope_from) <= 253)),
    CONSTRAINT dmarc_records_header_from_length CHECK ((length(header_from) <= 253)),
    CONSTRAINT dmarc_records_messages_not_negative CHECK ((messages >= 0)),
    CONSTRAINT dmarc_records_position_not_negative CHECK (("position" >= 0))
);

COMMENT ON TABLE mailroom.dmarc_records IS 'The records of a DMARC aggregate report: messages from one source address with the same results';

COMMENT ON COLUMN mailroom.dmarc_records.report IS 'The report (dmarc_reports.id) this record belongs to';
COMMENT ON COLUMN mailroom.dmarc_records."position" IS 'The record''s place in its report, from 0';
COMMENT ON COLUMN mailroom.dmarc_records.source_ip IS 'The address the messages came from, as the receiving provider saw it';
COMMENT ON COLUMN mailroom.dmarc_records.messages IS 'How many messages the record counts';
COMMENT ON COLUMN mailroom.dmarc_records.disposition IS 'What the provider did under the policy: none, quarantine or reject';
COMMENT ON COLUMN mailroom.dmarc_records.dkim_aligned IS 'DKIM passed for a domain aligned with the From domain (policy_evaluated/dkim = pass)';
COMMENT ON COLUMN mailroom.dmarc_records.spf_aligned IS 'SPF passed for a domain aligned with the From domain (policy_evaluated/spf = pass)';
COMMENT ON COLUMN mailroom.dmarc_records.header_from IS 'The From domain of the messages';
COMMENT ON COLUMN mailroom.dmarc_records.envelope_from IS 'The envelope (MAIL FROM) domain of the messages, when the report gives it';
COMMENT ON COLUMN mailroom.dmarc_records.auth_results IS 'The raw DKIM and SPF results: {"dkim": [{domain, selector, result}], "spf": [{domain, scope, result}]}, a few of each';

ALTER TABLE ONLY mailroom.dmarc_records
    ADD CONSTRAINT dmarc_records_pkey PRIMARY KEY (report, "position");

ALTER TABLE ONLY mailroom.dmarc_records
    ADD CONSTRAINT dmarc_records_report_exists FOREIGN KEY (report) REFERENCES mailroom.dmarc_reports(id) ON DELETE CASCADE;

-- dmarc_size

CREATE TABLE mailroom.dmarc_size (
    one boolean DEFAULT true NOT NULL,
    reports bigint NOT NULL,
    records bigint NOT NULL,
    CONSTRAINT dmarc_size_one_row CHECK (one),
    CONSTRAINT dmarc_size_records_not_negative CHECK ((records >= 0)),
    CONSTRAINT dmarc_size_reports_not_negative CHECK ((reports >= 0))
);

COMMENT ON TABLE mailroom.dmarc_size IS 'One row: how many DMARC reports are stored and how many records they hold, kept by triggers';

COMMENT ON COLUMN mailroom.dmarc_size.one IS 'Always true: the table holds one row';
COMMENT ON COLUMN mailroom.dmarc_size.reports IS 'Rows of dmarc_reports';
COMMENT ON COLUMN mailroom.dmarc_size.records IS 'The sum of dmarc_reports.records: what MAILROOM_DMARC_MAX_RECORDS bounds';

ALTER TABLE ONLY mailroom.dmarc_size
    ADD CONSTRAINT dmarc_size_pkey PRIMARY KEY (one);

-- dmarc_refusals

CREATE TABLE mailroom.dmarc_refusals (
    day date NOT NULL,
    reason text NOT NULL,
    reports integer NOT NULL,
    CONSTRAINT dmarc_refusals_reason_known CHECK ((reason = ANY (ARRAY['organisation_rate'::text, 'full'::text, 'disputed'::text]))),
    CONSTRAINT dmarc_refusals_reports_not_negative CHECK ((reports >= 0))
);

COMMENT ON TABLE mailroom.dmarc_refusals IS 'DMARC reports refused per UTC day: over their organisation''s daily bound, with the reports full, or disputing a stored one';

COMMENT ON COLUMN mailroom.dmarc_refusals.day IS 'The UTC day the reports were refused';
COMMENT ON COLUMN mailroom.dmarc_refusals.reason IS 'organisation_rate (past MAILROOM_DMARC_ORG_DAILY_MAX), full (past MAILROOM_DMARC_MAX_RECORDS) or disputed (a stored report''s organisation and id, other content)';
COMMENT ON COLUMN mailroom.dmarc_refusals.reports IS 'How many reports were refused that day for that reason';

ALTER TABLE ONLY mailroom.dmarc_refusals
    ADD CONSTRAINT dmarc_refusals_pkey PRIMARY KEY (day, reason);

-- == lifecycle: accounts and tokens ==

-- accounts

CREATE TABLE mailroom.accounts (
    id bigint NOT NULL,
    email text NOT NULL,
    login text NOT NULL,
    status text DEFAULT 'provisioned'::text NOT NULL,
    locale text DEFAULT 'en'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    status_changed_at timestamp with time zone,
    activated_at timestamp with time zone,
    suspended_at timestamp with time zone,
    unsuspended_at timestamp with time zone,
    CONSTRAINT accounts_active_has_activated_at CHECK (((status <> 'active'::text) OR (activated_at IS NOT NULL))),
    CONSTRAINT accounts_email_length CHECK (((length(email) >= 3) AND (length(email) <= 254))),
    CONSTRAINT accounts_login_length CHECK (((length(login) >= 1) AND (length(login) <= 254))),
    CONSTRAINT accounts_status_known CHECK ((status = ANY (ARRAY['provisioned'::text, 'active'::text, 'suspended'::text]))),
    CONSTRAINT accounts_suspended_at_matches_status CHECK (((status = 'suspended'::text) = (suspended_at IS NOT NULL)))
);

COMMENT ON TABLE mailroom.accounts IS 'User accounts of the lifecycle producer: provisioned, activated with a mailed token, suspended and back.';

COMMENT ON COLUMN mailroom.accounts.status IS 'provisioned: created, not yet activated (an activation token is made with it); active: activated; suspended: blocked. A never-activated account that is unsuspended returns to provisioned.';
COMMENT ON COLUMN mailroom.accounts.status_changed_at IS 'When status last changed.';
COMMENT ON COLUMN mailroom.accounts.activated_at IS 'When the account first became active.';
COMMENT ON COLUMN mailroom.accounts.suspended_at IS 'When the account was suspended (set exactly while suspended).';
COMMENT ON COLUMN mailroom.accounts.unsuspended_at IS 'When the account last left suspended.';

ALTER TABLE mailroom.accounts ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME mailroom.accounts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.accounts
    ADD CONSTRAINT accounts_email_unique UNIQUE (email);

ALTER TABLE ONLY mailroom.accounts
    ADD CONSTRAINT accounts_login_unique UNIQUE (login);

ALTER TABLE ONLY mailroom.accounts
    ADD CONSTRAINT accounts_pkey PRIMARY KEY (id);

CREATE INDEX accounts_status_idx ON mailroom.accounts USING btree (status);

CREATE FUNCTION mailroom.accounts_before_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.status_changed_at := coalesce(NEW.status_changed_at, now());
    IF NEW.status = 'active' THEN
        NEW.activated_at := coalesce(NEW.activated_at, now());
    ELSIF NEW.status = 'suspended' THEN
        NEW.suspended_at := coalesce(NEW.suspended_at, now());
    END IF;
    IF NEW.status = 'provisioned' THEN
        -- The token's foreign key is deferred, so the token may precede its account in this transaction.
        INSERT INTO mailroom.tokens (account_id, action, expires_at)
        VALUES (NEW.id, 'activation', now() + mailroom.token_ttl());
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.accounts_before_insert() IS 'Row trigger: status timestamps of a new account, and the activation token of a provisioned one.';

CREATE FUNCTION mailroom.accounts_before_status_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.status = OLD.status THEN
        RETURN NEW;
    END IF;
    IF OLD.status = 'active' AND NEW.status = 'provisioned' THEN
        RAISE EXCEPTION 'account % is active and cannot return to provisioned', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.status_changed_at := now();
    IF NEW.status = 'active' THEN
        IF OLD.status = 'provisioned' THEN
            NEW.activated_at := now();
        ELSIF OLD.status = 'suspended' THEN
            NEW.unsuspended_at := now();
            NEW.suspended_at := NULL;
            IF OLD.activated_at IS NULL THEN
                NEW.status := 'provisioned';
            END IF;
        END IF;
    ELSIF NEW.status = 'suspended' THEN
        NEW.suspended_at := now();
        NEW.unsuspended_at := NULL;
    ELSIF NEW.status = 'provisioned' AND OLD.status = 'suspended' THEN
        NEW.unsuspended_at := now();
        NEW.suspended_at := NULL;
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.accounts_before_status_change() IS 'Row trigger: provisioned -> active -> suspended -> active, with their timestamps; an active account never returns to provisioned.';

CREATE TRIGGER accounts_before_insert BEFORE INSERT ON mailroom.accounts FOR EACH ROW EXECUTE FUNCTION mailroom.accounts_before_insert();

COMMENT ON TRIGGER accounts_before_insert ON mailroom.accounts IS 'Status timestamps and the activation token.';

CREATE TRIGGER accounts_before_status_change BEFORE UPDATE OF status ON mailroom.accounts FOR EACH ROW EXECUTE FUNCTION mailroom.accounts_before_status_change();

COMMENT ON TRIGGER accounts_before_status_change ON mailroom.accounts IS 'Allowed status changes and their timestamps.';

CREATE TRIGGER accounts_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.accounts FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER accounts_notify ON mailroom.accounts IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER accounts_touch BEFORE UPDATE ON mailroom.accounts FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

COMMENT ON TRIGGER accounts_touch ON mailroom.accounts IS 'updated_at follows every change; created_at is immutable.';

-- tokens

CREATE TABLE mailroom.tokens (
    id bigint NOT NULL,
    action text NOT NULL,
    secret bytea DEFAULT mailroom.random_secret(),
    code text DEFAULT mailroom.random_code() NOT NULL,
    account_id bigint NOT NULL,
    expires_at timestamp with time zone DEFAULT (now() + '00:15:00'::interval) NOT NULL,
    consumed_at timestamp with time zone,
    mailed_at timestamp with time zone,
    email_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    mail_skipped_reason text,
    secret_hash bytea NOT NULL,
    failed_attempts integer DEFAULT 0 NOT NULL,
    CONSTRAINT tokens_action_known CHECK ((action = ANY (ARRAY['activation'::text, 'password_recovery'::text]))),
    CONSTRAINT tokens_code_five_digits CHECK ((code ~ '^[0-9]{5}$'::text)),
    CONSTRAINT tokens_expire_after_creation CHECK ((expires_at > created_at)),
    CONSTRAINT tokens_failed_attempts_not_negative CHECK ((failed_attempts >= 0)),
    CONSTRAINT tokens_secret_32_bytes CHECK ((octet_length(secret) = 32)),
    CONSTRAINT tokens_secret_hash_32_bytes CHECK ((octet_length(secret_hash) = 32)),
    CONSTRAINT tokens_secret_until_handled CHECK (((secret IS NULL) = ((mailed_at IS NOT NULL) OR (mail_skipped_reason IS NOT NULL))))
);

COMMENT ON TABLE mailroom.tokens IS 'Activation and password-recovery tokens: a link secret and a 5-digit code, mailed once by the lifecycle mailer, consumed once.';

COMMENT ON COLUMN mailroom.tokens.action IS 'activation: consuming it activates the account; password_recovery: it lets the user set a new password.';
COMMENT ON COLUMN mailroom.tokens.secret IS 'The link''s 32 random bytes, kept only until the mailer handled the token (then NULL).';
COMMENT ON COLUMN mailroom.tokens.code IS 'The 5-digit code the user may type instead of following the link.';
COMMENT ON COLUMN mailroom.tokens.expires_at IS 'When the token stops working (mailroom.token_ttl() after creation).';
COMMENT ON COLUMN mailroom.tokens.consumed_at IS 'When the token was used (once).';
COMMENT ON COLUMN mailroom.tokens.mailed_at IS 'When the mailer enqueued its email.';
COMMENT ON COLUMN mailroom.tokens.email_id IS 'The email that carried the token.';
COMMENT ON COLUMN mailroom.tokens.mail_skipped_reason IS 'Why the mailer did not mail it (expired, account in the wrong state).';
COMMENT ON COLUMN mailroom.tokens.secret_hash IS 'SHA-256 of the secret: how a link finds its token, so the database holds no usable link.';
COMMENT ON COLUMN mailroom.tokens.failed_attempts IS 'Wrong codes given for it; at mailroom.token_max_attempts() the token is locked.';

ALTER TABLE mailroom.tokens ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.tokens
    ADD CONSTRAINT tokens_secret_hash_unique UNIQUE (secret_hash);

ALTER TABLE ONLY mailroom.tokens
    ADD CONSTRAINT tokens_account_exists FOREIGN KEY (account_id) REFERENCES mailroom.accounts(id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED;

CREATE INDEX tokens_account_idx ON mailroom.tokens USING btree (account_id, action);

CREATE INDEX tokens_to_mail_idx ON mailroom.tokens USING btree (id) WHERE ((mailed_at IS NULL) AND (mail_skipped_reason IS NULL));

CREATE FUNCTION mailroom.tokens_after_consumed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.action = 'activation' THEN
        UPDATE mailroom.accounts SET status = 'active' WHERE id = NEW.account_id AND status = 'provisioned';
    END IF;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.tokens_after_consumed() IS 'Row trigger: a consumed activation token activates its provisioned account.';

CREATE FUNCTION mailroom.tokens_before_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.secret IS NULL THEN
        RAISE EXCEPTION 'a new token needs its secret' USING ERRCODE = 'not_null_violation';
    END IF;
    NEW.secret_hash := sha256(NEW.secret);
    NEW.failed_attempts := 0;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.tokens_before_insert() IS 'Row trigger: a new token needs its secret; stores its SHA-256 (secret_hash) and starts its wrong-code count at 0.';

CREATE FUNCTION mailroom.tokens_before_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.secret_hash IS DISTINCT FROM OLD.secret_hash OR NEW.code IS DISTINCT FROM OLD.code
       OR NEW.account_id IS DISTINCT FROM OLD.account_id OR NEW.action IS DISTINCT FROM OLD.action
       OR NEW.expires_at IS DISTINCT FROM OLD.expires_at
       OR (NEW.secret IS DISTINCT FROM OLD.secret AND NEW.secret IS NOT NULL) THEN
        RAISE EXCEPTION 'token % cannot change its secret, code, account, action or expiry', OLD.id
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.failed_attempts < OLD.failed_attempts THEN
        RAISE EXCEPTION 'token % cannot forget its wrong codes', OLD.id USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.consumed_at IS NOT NULL AND NEW.consumed_at IS DISTINCT FROM OLD.consumed_at THEN
        RAISE EXCEPTION 'token % was already consumed at %', OLD.id, OLD.consumed_at
            USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.consumed_at IS NULL AND NEW.consumed_at >= OLD.expires_at THEN
        RAISE EXCEPTION 'token % expired at %', OLD.id, OLD.expires_at USING ERRCODE = 'check_violation';
    END IF;
    IF OLD.consumed_at IS NULL AND NEW.consumed_at IS NOT NULL
       AND OLD.failed_attempts >= mailroom.token_max_attempts() THEN
        RAISE EXCEPTION 'token % was locked after % wrong codes', OLD.id, OLD.failed_attempts
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.tokens_before_update() IS 'Row trigger: consumed once, before it expires and while not locked; its action never changes, its secret can only be forgotten, its wrong codes only counted up.';

CREATE FUNCTION mailroom.tokens_notify_mailer() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('mailroom_tokens', 'insert');
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.tokens_notify_mailer() IS 'Statement trigger: wakes the lifecycle mailer (one NOTIFY per statement that inserted tokens).';

CREATE TRIGGER tokens_after_consumed AFTER UPDATE OF consumed_at ON mailroom.tokens FOR EACH ROW WHEN (((new.consumed_at IS NOT NULL) AND (old.consumed_at IS NULL))) EXECUTE FUNCTION mailroom.tokens_after_consumed();

COMMENT ON TRIGGER tokens_after_consumed ON mailroom.tokens IS 'Activation.';

CREATE TRIGGER tokens_before_insert BEFORE INSERT ON mailroom.tokens FOR EACH ROW EXECUTE FUNCTION mailroom.tokens_before_insert();

COMMENT ON TRIGGER tokens_before_insert ON mailroom.tokens IS 'Secret hash of a new token.';

CREATE TRIGGER tokens_before_update BEFORE UPDATE ON mailroom.tokens FOR EACH ROW EXECUTE FUNCTION mailroom.tokens_before_update();

COMMENT ON TRIGGER tokens_before_update ON mailroom.tokens IS 'What may change in a token, and when.';

CREATE TRIGGER tokens_created_at BEFORE UPDATE ON mailroom.tokens FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();

COMMENT ON TRIGGER tokens_created_at ON mailroom.tokens IS 'created_at is immutable.';

CREATE TRIGGER tokens_notify AFTER INSERT ON mailroom.tokens FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER tokens_notify ON mailroom.tokens IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER tokens_notify_mailer AFTER INSERT ON mailroom.tokens FOR EACH STATEMENT EXECUTE FUNCTION mailroom.tokens_notify_mailer();

COMMENT ON TRIGGER tokens_notify_mailer ON mailroom.tokens IS 'Wakes the lifecycle mailer.';

-- jobs

CREATE TABLE mailroom.jobs (
    name text NOT NULL,
    last_seq bigint DEFAULT 0 NOT NULL,
    last_run_at timestamp with time zone
);

COMMENT ON TABLE mailroom.jobs IS 'A cursor per producer job; the job locks its row (FOR UPDATE) so two workers never run it at once.';

COMMENT ON COLUMN mailroom.jobs.last_seq IS 'The last sequence number the job handled.';
COMMENT ON COLUMN mailroom.jobs.last_run_at IS 'When the job last ran.';

ALTER TABLE ONLY mailroom.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (name);

-- functions

CREATE FUNCTION mailroom.random_code() RETURNS text
    LANGUAGE plpgsql
    AS $$
DECLARE
    v bigint;
BEGIN
    LOOP
        v := ('x' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 8))::bit(32)::bigint;
        -- 4294900000 is the largest multiple of 100000 below 2^32.
        EXIT WHEN v < 4294900000;
    END LOOP;
    RETURN lpad((v % 100000)::text, 5, '0');
END $$;

COMMENT ON FUNCTION mailroom.random_code() IS 'A uniformly random 5-digit code (rejection sampling, never 100000).';

CREATE FUNCTION mailroom.random_secret() RETURNS bytea
    LANGUAGE sql
    AS $$
    SELECT decode(md5(gen_random_uuid()::text || gen_random_uuid()::text)
                  || md5(gen_random_uuid()::text || gen_random_uuid()::text), 'hex')
$$;

COMMENT ON FUNCTION mailroom.random_secret() IS '32 random bytes from core PostgreSQL''s CSPRNG (gen_random_uuid draws from pg_strong_random).';

CREATE FUNCTION mailroom.token_max_attempts() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT 5
$$;

COMMENT ON FUNCTION mailroom.token_max_attempts() IS 'Wrong codes after which a token is locked (5).';

CREATE FUNCTION mailroom.token_ttl() RETURNS interval
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(current_setting('mailroom.token_ttl', true), ''), '15 minutes')::interval
$$;

COMMENT ON FUNCTION mailroom.token_ttl() IS 'How long a new token lives: the setting mailroom.token_ttl (MAILROOM_TOKEN_TTL_SECONDS), else 15 minutes.';

-- == birthdays: people and events ==

-- people

CREATE TABLE mailroom.people (
    id uuid DEFAULT gen_random_uuid() NOT NULL,
    email text NOT NULL,
    first_name text NOT NULL,
    last_name text NOT NULL,
    date_of_birth date NOT NULL,
    time_zone text NOT NULL,
    locale text DEFAULT 'en'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    version integer DEFAULT 1 NOT NULL,
    CONSTRAINT people_date_of_birth_after_1900 CHECK ((date_of_birth > '1900-01-01'::date)),
    CONSTRAINT people_email_length CHECK (((length(email) >= 3) AND (length(email) <= 254))),
    CONSTRAINT people_first_name_length CHECK (((length(first_name) >= 1) AND (length(first_name) <= 100))),
    CONSTRAINT people_last_name_length CHECK (((length(last_name) >= 1) AND (length(last_name) <= 100)))
);

COMMENT ON TABLE mailroom.people IS 'People whose birthday email the scheduler sends at their local time.';

COMMENT ON COLUMN mailroom.people.time_zone IS 'IANA time zone the birthday email is timed in (checked against mailroom.time_zone_names).';
COMMENT ON COLUMN mailroom.people.version IS 'Optimistic-update version, moved on by every update.';

ALTER TABLE ONLY mailroom.people
    ADD CONSTRAINT people_email_unique UNIQUE (email);

ALTER TABLE ONLY mailroom.people
    ADD CONSTRAINT people_pkey PRIMARY KEY (id);

CREATE FUNCTION mailroom.people_after_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    at timestamptz := mailroom.clock();
    send_time time := mailroom.birthday_time();
BEGIN
    INSERT INTO mailroom.events (person_id, event_type, due_at, local_due_at, time_zone, idempotency_key)
    SELECT n.id, 'birthday', d.due_at, d.due_at AT TIME ZONE n.time_zone, n.time_zone,
           'birthday:' || n.id::text || ':' || b.day::text
    FROM new_people n
    CROSS JOIN LATERAL (
        SELECT mailroom.next_birthday(n.date_of_birth, (at AT TIME ZONE n.time_zone)::date) AS day
    ) b
    CROSS JOIN LATERAL (SELECT mailroom.local_instant(b.day, send_time, n.time_zone) AS due_at) d
    ORDER BY n.id
    ON CONFLICT DO NOTHING;
    PERFORM pg_notify('mailroom_events', 'people');
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.people_after_insert() IS 'Statement trigger: new people get their next birthday event in the inserting transaction, one set-based pass.';

CREATE FUNCTION mailroom.people_after_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    at timestamptz := mailroom.clock();
    send_time time := mailroom.birthday_time();
    closed uuid[];
BEGIN
    WITH changed AS (
        SELECT n.id, n.date_of_birth, n.time_zone, n.date_of_birth IS DISTINCT FROM o.date_of_birth AS born
        FROM new_people n JOIN old_people o ON o.id = n.id
        WHERE n.time_zone IS DISTINCT FROM o.time_zone OR n.date_of_birth IS DISTINCT FROM o.date_of_birth
    ), next AS (
        SELECT c.id, c.time_zone, c.born, b.day
        FROM changed c
        CROSS JOIN LATERAL (SELECT mailroom.next_birthday_of(c.id, c.date_of_birth, c.time_zone, at) AS day) b
    ), closing AS (
        UPDATE mailroom.events e
        SET status = CASE WHEN x.born THEN 'cancelled' ELSE 'missed' END,
            failure_reason = CASE
                WHEN x.born THEN format('the date of birth changed after the birthday of %s came due',
                                        e.local_due_at::date)
                ELSE format('the time zone changed to %s after it came due; the local day %s had ended there',
                            x.time_zone, e.local_due_at::date)
            END,
            -- a cancelled birthday frees its key: should the old date of birth come back, it is scheduled again
            idempotency_key = CASE WHEN x.born THEN e.idempotency_key || ':cancelled:' || e.id::text
                                   ELSE e.idempotency_key END,
            version = e.version + 1
        FROM next x
        WHERE e.person_id = x.id AND e.event_type = 'birthday' AND e.status IN ('pending', 'processing')
          AND e.due_at <= at AND x.day <> e.local_due_at::date
        RETURNING e.person_id
    )
    SELECT array_agg(person_id) INTO closed FROM closing;

    WITH changed AS (
        SELECT n.id, n.date_of_birth, n.time_zone
        FROM new_people n JOIN old_people o ON o.id = n.id
        WHERE n.time_zone IS DISTINCT FROM o.time_zone OR n.date_of_birth IS DISTINCT FROM o.date_of_birth
    ), next AS (
        SELECT c.id, c.time_zone, b.day, mailroom.local_instant(b.day, send_time, c.time_zone) AS due_at
        FROM changed c
        CROSS JOIN LATERAL (SELECT mailroom.next_birthday_of(c.id, c.date_of_birth, c.time_zone, at) AS day) b
    )
    UPDATE mailroom.events e
    SET due_at = x.due_at, local_due_at = x.due_at AT TIME ZONE x.time_zone, time_zone = x.time_zone,
        idempotency_key = 'birthday:' || x.id::text || ':' || x.day::text,
        status = 'pending', version = e.version + 1
    FROM next x
    WHERE e.person_id = x.id AND e.event_type = 'birthday' AND e.status IN ('pending', 'processing');

    IF closed IS NOT NULL THEN
        PERFORM mailroom.schedule_birthdays(closed, at, send_time);
    END IF;
    PERFORM pg_notify('mailroom_events', 'people');
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.people_after_update() IS 'Statement trigger: a new time zone or date of birth moves the pending event, or closes a due one as missed or cancelled and schedules the next.';

CREATE FUNCTION mailroom.people_bump_version() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.version = OLD.version THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.people_bump_version() IS 'Row trigger: the version follows every change (optimistic updates compare it).';

CREATE FUNCTION mailroom.people_refresh_payload() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE mailroom.events e
    SET delivery_payload = mailroom.birthday_payload(n.first_name, n.last_name, n.locale)
    FROM new_people n JOIN old_people o ON o.id = n.id
    WHERE e.person_id = n.id AND e.status IN ('pending', 'processing')
      AND (n.first_name, n.last_name, n.locale, n.time_zone, n.date_of_birth)
          IS DISTINCT FROM (o.first_name, o.last_name, o.locale, o.time_zone, o.date_of_birth)
      AND e.delivery_payload IS DISTINCT FROM mailroom.birthday_payload(n.first_name, n.last_name, n.locale);
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.people_refresh_payload() IS 'Statement trigger: a changed person''s waiting events take their new names and locale as delivery_payload.';

CREATE FUNCTION mailroom.people_validate() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NOT mailroom.is_time_zone(NEW.time_zone) THEN
        RAISE EXCEPTION 'unknown time zone %', NEW.time_zone USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.date_of_birth >= current_date THEN
        RAISE EXCEPTION 'date of birth % is not in the past', NEW.date_of_birth USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.people_validate() IS 'Row trigger: a known time zone and a date of birth in the past.';

CREATE TRIGGER people_after_insert AFTER INSERT ON mailroom.people REFERENCING NEW TABLE AS new_people FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_after_insert();

COMMENT ON TRIGGER people_after_insert ON mailroom.people IS 'Schedules the next birthday.';

CREATE TRIGGER people_after_update AFTER UPDATE ON mailroom.people REFERENCING OLD TABLE AS old_people NEW TABLE AS new_people FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_after_update();

COMMENT ON TRIGGER people_after_update ON mailroom.people IS 'Reschedules after a change of time zone or date of birth.';

CREATE TRIGGER people_bump_version BEFORE UPDATE ON mailroom.people FOR EACH ROW EXECUTE FUNCTION mailroom.people_bump_version();

COMMENT ON TRIGGER people_bump_version ON mailroom.people IS 'Optimistic version.';

CREATE TRIGGER people_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.people FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER people_notify ON mailroom.people IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER people_refresh_payload AFTER UPDATE ON mailroom.people REFERENCING OLD TABLE AS old_people NEW TABLE AS new_people FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_refresh_payload();

COMMENT ON TRIGGER people_refresh_payload ON mailroom.people IS 'Keeps the waiting events'' delivery_payload current.';

CREATE TRIGGER people_touch BEFORE UPDATE ON mailroom.people FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

COMMENT ON TRIGGER people_touch ON mailroom.people IS 'updated_at follows every change; created_at is immutable.';

CREATE TRIGGER people_validate BEFORE INSERT OR UPDATE OF time_zone, date_of_birth ON mailroom.people FOR EACH ROW EXECUTE FUNCTION mailroom.people_validate();

COMMENT ON TRIGGER people_validate ON mailroom.people IS 'Time zone and date of birth.';

-- events

CREATE TABLE mailroom.events (
    id uuid DEFAULT mailroom.new_event_id() NOT NULL,
    person_id uuid NOT NULL,
    event_type text DEFAULT 'birthday'::text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    due_at timestamp with time zone NOT NULL,
    local_due_at timestamp without time zone NOT NULL,
    time_zone text NOT NULL,
    executed_at timestamp with time zone,
    failure_reason text,
    retry_count integer DEFAULT 0 NOT NULL,
    version integer DEFAULT 1 NOT NULL,
    idempotency_key text NOT NULL,
    email_id bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    delivery_payload jsonb NOT NULL,
    retry_at timestamp with time zone,
    CONSTRAINT events_completed_has_executed_at CHECK (((status <> 'completed'::text) OR (executed_at IS NOT NULL))),
    CONSTRAINT events_delivery_payload_names_template CHECK (((jsonb_typeof(delivery_payload) = 'object'::text) AND (NOT (jsonb_typeof((delivery_payload -> 'template'::text)) IS DISTINCT FROM 'string'::text)))),
    CONSTRAINT events_event_type_birthday CHECK ((event_type = 'birthday'::text)),
    CONSTRAINT events_failed_has_reason CHECK (((status <> 'failed'::text) OR (failure_reason IS NOT NULL))),
    CONSTRAINT events_retry_count_range CHECK (((retry_count >= 0) AND (retry_count <= 3))),
    CONSTRAINT events_status_known CHECK ((status = ANY (ARRAY['pending'::text, 'processing'::text, 'queued'::text, 'completed'::text, 'failed'::text, 'missed'::text, 'cancelled'::text]))),
    CONSTRAINT events_version_positive CHECK ((version >= 1))
);

COMMENT ON TABLE mailroom.events IS 'Birthday events: one pending per person, claimed by the scheduler when due, each turned into an email once.';

COMMENT ON COLUMN mailroom.events.status IS 'pending: waiting until due_at (and retry_at); processing: claimed by the scheduler; queued: its email is enqueued and not yet sent; completed: the relay accepted its email; failed: it could not be sent (failure_reason: the email failed, expired, bounced, was suppressed or cancelled, or could not be rendered or enqueued after 3 retries); missed: the local day ended before it went out; cancelled: the date of birth changed.';
COMMENT ON COLUMN mailroom.events.due_at IS 'The UTC instant the event is due (local_due_at in time_zone).';
COMMENT ON COLUMN mailroom.events.local_due_at IS 'The local date and time it is due at in the person''s zone.';
COMMENT ON COLUMN mailroom.events.time_zone IS 'The zone due_at was computed in.';
COMMENT ON COLUMN mailroom.events.executed_at IS 'When the relay accepted its email (completed).';
COMMENT ON COLUMN mailroom.events.failure_reason IS 'Why it failed, was missed or cancelled; while pending after a failed attempt, that attempt''s error.';
COMMENT ON COLUMN mailroom.events.retry_count IS 'Attempts to render and enqueue its email that failed and were retried (0 to 3; the fourth failure fails the event).';
COMMENT ON COLUMN mailroom.events.version IS 'Optimistic version: a scheduler whose claim went stale (the person changed) drops its completion.';
COMMENT ON COLUMN mailroom.events.idempotency_key IS 'Person, type and day: the same birthday is never scheduled twice.';
COMMENT ON COLUMN mailroom.events.email_id IS 'The email it became.';
COMMENT ON COLUMN mailroom.events.delivery_payload IS 'What it will send: {template, locale, data}, set when the event is created and kept current while it waits. Holds only the person''s names and locale, which read-only roles see in people anyway.';
COMMENT ON COLUMN mailroom.events.retry_at IS 'After a failed attempt: not claimed again before this instant (backoff); NULL otherwise.';

ALTER TABLE ONLY mailroom.events
    ADD CONSTRAINT events_idempotency_key_unique UNIQUE (idempotency_key);

ALTER TABLE ONLY mailroom.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.events
    ADD CONSTRAINT events_person_exists FOREIGN KEY (person_id) REFERENCES mailroom.people(id) ON DELETE CASCADE;

CREATE INDEX events_due_idx ON mailroom.events USING btree (due_at) WHERE (status = 'pending'::text);

CREATE UNIQUE INDEX events_one_pending_idx ON mailroom.events USING btree (person_id, event_type) WHERE (status = ANY (ARRAY['pending'::text, 'processing'::text]));

CREATE INDEX events_outcome_idx ON mailroom.events USING btree (updated_at) WHERE ((status = ANY (ARRAY['queued'::text, 'failed'::text, 'missed'::text])) OR (retry_count > 0));

CREATE INDEX events_person_idx ON mailroom.events USING btree (person_id);

CREATE INDEX events_processing_idx ON mailroom.events USING btree (updated_at) WHERE (status = 'processing'::text);

CREATE FUNCTION mailroom.events_fill_payload() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    SELECT mailroom.birthday_payload(p.first_name, p.last_name, p.locale) INTO NEW.delivery_payload
    FROM mailroom.people p WHERE p.id = NEW.person_id;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.events_fill_payload() IS 'Row trigger: a new event without a delivery_payload takes its person''s.';

CREATE FUNCTION mailroom.events_take_email_outcome() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    outcome record;
BEGIN
    SELECT (mailroom.event_outcome(q.status, q.last_error, q.failure_kind, q.suppression_reason)).*, q.sent_at
    INTO outcome FROM mailroom.email_queue q WHERE q.id = NEW.email_id;
    IF FOUND AND outcome.status <> 'queued' THEN
        NEW.status := outcome.status;
        NEW.failure_reason := outcome.reason;
        NEW.executed_at := CASE WHEN outcome.status = 'completed' THEN outcome.sent_at END;
    END IF;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.events_take_email_outcome() IS 'Row trigger: an event handed an email that is already sent, failed or suppressed takes that outcome at once.';

CREATE TRIGGER events_fill_payload BEFORE INSERT ON mailroom.events FOR EACH ROW WHEN ((new.delivery_payload IS NULL)) EXECUTE FUNCTION mailroom.events_fill_payload();

COMMENT ON TRIGGER events_fill_payload ON mailroom.events IS 'Only for rows inserted without a payload.';

CREATE TRIGGER events_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER events_notify ON mailroom.events IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER events_take_email_outcome BEFORE UPDATE OF status ON mailroom.events FOR EACH ROW WHEN (((new.status = 'queued'::text) AND (old.status = 'processing'::text) AND (new.email_id IS NOT NULL))) EXECUTE FUNCTION mailroom.events_take_email_outcome();

COMMENT ON TRIGGER events_take_email_outcome ON mailroom.events IS 'When the scheduler hands an event its email.';

CREATE TRIGGER events_touch BEFORE UPDATE ON mailroom.events FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

COMMENT ON TRIGGER events_touch ON mailroom.events IS 'updated_at follows every change; created_at is immutable.';

-- time_zone_names

CREATE TABLE mailroom.time_zone_names (
    name text NOT NULL
);

COMMENT ON TABLE mailroom.time_zone_names IS 'Known time zone names, a fast check for every inserted person (pg_timezone_names reads the tz database on every call).';

ALTER TABLE ONLY mailroom.time_zone_names
    ADD CONSTRAINT time_zone_names_pkey PRIMARY KEY (name);

-- functions

CREATE FUNCTION mailroom.birthday_in(dob date, year integer) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT (dob + make_interval(years => year - extract(year FROM dob)::integer))::date
$$;

COMMENT ON FUNCTION mailroom.birthday_in(dob date, year integer) IS 'The birthday in a year: 29 February falls on 28 February in common years.';

CREATE FUNCTION mailroom.birthday_payload(first_name text, last_name text, locale text) RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT jsonb_build_object('template', 'birthday', 'locale', locale,
                              'data', jsonb_build_object('first_name', first_name, 'last_name', last_name))
$$;

COMMENT ON FUNCTION mailroom.birthday_payload(first_name text, last_name text, locale text) IS 'The delivery_payload of a birthday event: template birthday, the person''s locale, and their names as the template''s data.';

CREATE FUNCTION mailroom.birthday_time() RETURNS time without time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(current_setting('mailroom.birthday_time', true), ''), '09:00')::time
$$;

COMMENT ON FUNCTION mailroom.birthday_time() IS 'The local time of day birthday email goes out: the setting mailroom.birthday_time, else 09:00.';

CREATE FUNCTION mailroom.event_outcome(email_status text, last_error text, failure_kind text, suppression_reason text, OUT status text, OUT reason text) RETURNS record
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE email_status
               WHEN 'sent' THEN 'completed'
               WHEN 'pending' THEN 'queued'
               WHEN 'unrendered' THEN 'queued'
               WHEN 'assigned' THEN 'queued'
               ELSE 'failed'
           END,
           CASE email_status
               WHEN 'failed' THEN CASE WHEN failure_kind = 'expired' THEN 'the email expired: '
                                       ELSE 'the email failed: ' END
                                  || coalesce(last_error, 'no reason recorded')
               WHEN 'bounced' THEN 'the email bounced: ' || coalesce(last_error, 'a bounce report arrived')
               WHEN 'suppressed' THEN 'the recipient is suppressed: '
                                      || coalesce(suppression_reason, 'on the suppression list')
               WHEN 'cancelled' THEN 'the email was cancelled'
           END
$$;

COMMENT ON FUNCTION mailroom.event_outcome(email_status text, last_error text, failure_kind text, suppression_reason text, OUT status text, OUT reason text) IS 'A birthday event''s status and failure reason given its email''s status: sent is completed; pending or being sent is queued; failed, expired, bounced, suppressed or cancelled is failed with the reason.';

CREATE FUNCTION mailroom.is_time_zone(zone text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (SELECT 1 FROM mailroom.time_zone_names WHERE name = zone)
        OR EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = zone)
$$;

COMMENT ON FUNCTION mailroom.is_time_zone(zone text) IS 'Whether a name is a time zone: mailroom.time_zone_names, else pg_timezone_names (a zone newer than the table).';

CREATE FUNCTION mailroom.local_instant(day date, send_time time without time zone, zone text) RETURNS timestamp with time zone
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT (day + send_time) AT TIME ZONE zone
$$;

COMMENT ON FUNCTION mailroom.local_instant(day date, send_time time without time zone, zone text) IS 'The UTC instant of a local time on a day in a zone; a skipped local time lands as far after the jump, a repeated one is read in standard time.';

CREATE FUNCTION mailroom.new_event_id() RETURNS uuid
    LANGUAGE sql
    AS $$SELECT uuidv7()$$;

COMMENT ON FUNCTION mailroom.new_event_id() IS 'A new event id: uuidv7 (time ordered, so the primary key grows at its right edge) where the server has it, else gen_random_uuid.';

CREATE FUNCTION mailroom.next_birthday(dob date, from_date date) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE
        WHEN mailroom.birthday_in(dob, extract(year FROM greatest(from_date, dob + 1))::integer)
             >= greatest(from_date, dob + 1)
        THEN mailroom.birthday_in(dob, extract(year FROM greatest(from_date, dob + 1))::integer)
        ELSE mailroom.birthday_in(dob, extract(year FROM greatest(from_date, dob + 1))::integer + 1)
    END
$$;

COMMENT ON FUNCTION mailroom.next_birthday(dob date, from_date date) IS 'The first birthday on or after a date (never the day of birth itself).';

CREATE FUNCTION mailroom.next_birthday_of(person uuid, dob date, zone text, at timestamp with time zone) RETURNS date
    LANGUAGE sql STABLE
    AS $$
    SELECT mailroom.next_birthday(dob, greatest((at AT TIME ZONE zone)::date,
        (SELECT max(e.local_due_at)::date FROM mailroom.events e
         WHERE e.person_id = person AND e.event_type = 'birthday'
           AND e.status IN ('queued', 'completed', 'missed', 'failed')) + 1))
$$;

COMMENT ON FUNCTION mailroom.next_birthday_of(person uuid, dob date, zone text, at timestamp with time zone) IS 'A person''s next birthday day in their zone, never on or before a birthday already queued, completed, missed or failed.';

CREATE FUNCTION mailroom.schedule_birthdays(person_ids uuid[], at timestamp with time zone, send_time time without time zone, part integer DEFAULT 0, parts integer DEFAULT 1) RETURNS integer
    LANGUAGE plpgsql
    AS $$
DECLARE
    created integer;
BEGIN
    IF person_ids IS NULL THEN
        -- Everyone: joins the planner can hash, over the whole table at once.
        INSERT INTO mailroom.events (person_id, event_type, due_at, local_due_at, time_zone, idempotency_key)
        SELECT p.id, 'birthday', d.due_at, d.due_at AT TIME ZONE p.time_zone, p.time_zone,
               'birthday:' || p.id::text || ':' || b.day::text
        FROM mailroom.people p
        LEFT JOIN (SELECT e.person_id, max(e.local_due_at)::date AS last_day FROM mailroom.events e
                   WHERE e.event_type = 'birthday' AND e.status IN ('queued', 'completed', 'missed', 'failed')
                   GROUP BY e.person_id) h ON h.person_id = p.id
        CROSS JOIN LATERAL (
            SELECT mailroom.next_birthday(p.date_of_birth,
                                          greatest((at AT TIME ZONE p.time_zone)::date, h.last_day + 1)) AS day
        ) b
        CROSS JOIN LATERAL (SELECT mailroom.local_instant(b.day, send_time, p.time_zone) AS due_at) d
        WHERE (parts = 1 OR get_byte(uuid_send(p.id), 0) * parts / 256 = part)
          AND NOT EXISTS (SELECT 1 FROM mailroom.events e
                          WHERE e.person_id = p.id AND e.event_type = 'birthday'
                            AND e.status IN ('pending', 'processing'))
        -- In person order: the person-keyed indexes then grow at their right edge (slice = id range).
        ORDER BY p.id
        ON CONFLICT DO NOTHING;
    ELSE
        -- A few people (after each sent birthday): index probes per person.
        INSERT INTO mailroom.events (person_id, event_type, due_at, local_due_at, time_zone, idempotency_key)
        SELECT p.id, 'birthday', d.due_at, d.due_at AT TIME ZONE p.time_zone, p.time_zone,
               'birthday:' || p.id::text || ':' || b.day::text
        FROM unnest(person_ids) AS u(id)
        JOIN mailroom.people p ON p.id = u.id
        CROSS JOIN LATERAL (SELECT mailroom.next_birthday_of(p.id, p.date_of_birth, p.time_zone, at) AS day) b
        CROSS JOIN LATERAL (SELECT mailroom.local_instant(b.day, send_time, p.time_zone) AS due_at) d
        WHERE NOT EXISTS (SELECT 1 FROM mailroom.events e
                          WHERE e.person_id = p.id AND e.event_type = 'birthday'
                            AND e.status IN ('pending', 'processing'))
        ON CONFLICT DO NOTHING;
    END IF;
    GET DIAGNOSTICS created = ROW_COUNT;
    RETURN created;
END $$;

COMMENT ON FUNCTION mailroom.schedule_birthdays(person_ids uuid[], at timestamp with time zone, send_time time without time zone, part integer, parts integer) IS 'The set-based scheduling pass: everyone given (NULL: everyone, optionally one part of several) without a pending event gets their next one (after any birthday already queued, completed, missed or failed); returns how many were made.';

-- == inbox: orders and other outside events ==

-- inbox

CREATE TABLE mailroom.inbox (
    message_id text NOT NULL,
    consumer text NOT NULL,
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    receive_count integer DEFAULT 1 NOT NULL,
    processed_at timestamp with time zone,
    email_id bigint,
    CONSTRAINT inbox_consumer_length CHECK (((length(consumer) >= 1) AND (length(consumer) <= 255))),
    CONSTRAINT inbox_message_id_length CHECK (((length(message_id) >= 1) AND (length(message_id) <= 255))),
    CONSTRAINT inbox_receive_count_positive CHECK ((receive_count >= 1))
);

COMMENT ON TABLE mailroom.inbox IS 'Incoming application events (orders placed, completed, cancelled, ...), de-duplicated by message id per consumer and turned into email once.';

COMMENT ON COLUMN mailroom.inbox.message_id IS 'The sender''s id for the event: a redelivery of the same id is counted, not applied twice.';
COMMENT ON COLUMN mailroom.inbox.consumer IS 'Who handles the event; one message may feed several consumers.';
COMMENT ON COLUMN mailroom.inbox.payload IS 'The event as received (secret to read-only roles: it becomes template data).';
COMMENT ON COLUMN mailroom.inbox.receive_count IS 'How many times the event was delivered.';
COMMENT ON COLUMN mailroom.inbox.processed_at IS 'When its email was enqueued (NULL: not yet).';
COMMENT ON COLUMN mailroom.inbox.email_id IS 'The email it became.';

ALTER TABLE ONLY mailroom.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (message_id, consumer);

CREATE INDEX inbox_received_idx ON mailroom.inbox USING btree (received_at);

CREATE TRIGGER inbox_notify AFTER INSERT OR UPDATE ON mailroom.inbox FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER inbox_notify ON mailroom.inbox IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- == documents and signatures ==

-- documents

CREATE TABLE mailroom.documents (
    doc_id text NOT NULL,
    title text DEFAULT ''::text NOT NULL,
    url text DEFAULT ''::text NOT NULL,
    checksum text,
    checksum_algorithm text,
    description text DEFAULT ''::text NOT NULL,
    created_by text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    require_login boolean DEFAULT false NOT NULL,
    CONSTRAINT documents_checksum_algorithm_known CHECK ((checksum_algorithm = ANY (ARRAY['SHA-256'::text, 'SHA-512'::text]))),
    CONSTRAINT documents_checksum_has_algorithm CHECK (((checksum IS NULL) = (checksum_algorithm IS NULL))),
    CONSTRAINT documents_checksum_hex CHECK ((checksum ~ '^[0-9a-f]{64}([0-9a-f]{64})?$'::text)),
    CONSTRAINT documents_checksum_length_fits_algorithm CHECK (((checksum IS NULL) OR ((checksum_algorithm = 'SHA-256'::text) AND (length(checksum) = 64)) OR ((checksum_algorithm = 'SHA-512'::text) AND (length(checksum) = 128)))),
    CONSTRAINT documents_doc_id_format CHECK ((doc_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'::text)),
    CONSTRAINT documents_url_http_or_empty CHECK (((url = ''::text) OR (url ~* '^https?://'::text)))
);

COMMENT ON TABLE mailroom.documents IS 'Documents people are asked to acknowledge by signature.';

COMMENT ON COLUMN mailroom.documents.checksum IS 'Hex digest of the document''s content (length fits checksum_algorithm).';
COMMENT ON COLUMN mailroom.documents.checksum_algorithm IS 'SHA-256 or SHA-512; set with checksum or not at all.';
COMMENT ON COLUMN mailroom.documents.require_login IS 'True: the signing page accepts a signature only after an OpenID Connect login whose verified email is the signer''s (the link alone is not enough). MAILROOM_OIDC settings may require it for every document.';

ALTER TABLE ONLY mailroom.documents
    ADD CONSTRAINT documents_pkey PRIMARY KEY (doc_id);

CREATE FUNCTION mailroom.documents_create_signature_head() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO mailroom.signature_heads (doc_id) VALUES (NEW.doc_id) ON CONFLICT (doc_id) DO NOTHING;
    RETURN NULL;
END $$;

COMMENT ON FUNCTION mailroom.documents_create_signature_head() IS 'Row trigger: every document has a chain head from its first moment, so a missing head is itself evidence.';

CREATE TRIGGER documents_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.documents FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER documents_notify ON mailroom.documents IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER documents_signature_head AFTER INSERT ON mailroom.documents FOR EACH ROW EXECUTE FUNCTION mailroom.documents_create_signature_head();

COMMENT ON TRIGGER documents_signature_head ON mailroom.documents IS 'Creates the document''s signature head.';

CREATE TRIGGER documents_touch BEFORE UPDATE ON mailroom.documents FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

COMMENT ON TRIGGER documents_touch ON mailroom.documents IS 'updated_at follows every change; created_at is immutable.';

-- expected_signers

CREATE TABLE mailroom.expected_signers (
    id bigint NOT NULL,
    doc_id text NOT NULL,
    email text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    locale text DEFAULT 'en'::text NOT NULL,
    added_at timestamp with time zone DEFAULT now() NOT NULL,
    added_by text DEFAULT ''::text NOT NULL,
    notes text,
    CONSTRAINT expected_signers_email_lowercase CHECK ((email = lower(email)))
);

COMMENT ON TABLE mailroom.expected_signers IS 'Who is expected to sign each document; reminders go to those who have not.';

COMMENT ON COLUMN mailroom.expected_signers.email IS 'The signer''s address, lowercased.';
COMMENT ON COLUMN mailroom.expected_signers.added_by IS 'Who added the signer.';

ALTER TABLE mailroom.expected_signers ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.expected_signers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.expected_signers
    ADD CONSTRAINT expected_signers_once_per_document UNIQUE (doc_id, email);

ALTER TABLE ONLY mailroom.expected_signers
    ADD CONSTRAINT expected_signers_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.expected_signers
    ADD CONSTRAINT expected_signers_doc_exists FOREIGN KEY (doc_id) REFERENCES mailroom.documents(doc_id) ON DELETE CASCADE;

CREATE TRIGGER expected_signers_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.expected_signers FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER expected_signers_notify ON mailroom.expected_signers IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- signatures

CREATE TABLE mailroom.signatures (
    id bigint NOT NULL,
    doc_id text NOT NULL,
    signer_email text NOT NULL,
    signer_name text,
    signed_at timestamp with time zone NOT NULL,
    nonce text NOT NULL,
    payload text NOT NULL,
    payload_hash text NOT NULL,
    signature text NOT NULL,
    prev_hash text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    seq integer NOT NULL,
    user_sub text,
    referer text,
    ip_address inet,
    user_agent text,
    CONSTRAINT signatures_nonce_min_length CHECK ((length(nonce) >= 16)),
    CONSTRAINT signatures_payload_hash_hex CHECK ((payload_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT signatures_prev_hash_hex CHECK ((prev_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT signatures_referer_format CHECK ((((length(referer) >= 1) AND (length(referer) <= 2048)) AND (referer !~ '[[:cntrl:]]'::text))),
    CONSTRAINT signatures_seq_positive CHECK ((seq >= 1)),
    CONSTRAINT signatures_signer_email_lowercase CHECK ((signer_email = lower(signer_email))),
    CONSTRAINT signatures_user_agent_format CHECK ((((length(user_agent) >= 1) AND (length(user_agent) <= 1000)) AND (user_agent !~ '[[:cntrl:]]'::text))),
    CONSTRAINT signatures_user_sub_format CHECK ((((length(user_sub) >= 1) AND (length(user_sub) <= 600)) AND (user_sub !~ '[[:cntrl:]]'::text)))
);

COMMENT ON TABLE mailroom.signatures IS 'Ed25519 signatures of documents, append-only, each chained to the one before it in its document (prev_hash, seq).';

COMMENT ON COLUMN mailroom.signatures.signed_at IS 'When the signer signed (inside the signed payload).';
COMMENT ON COLUMN mailroom.signatures.nonce IS 'Unique per signature: a signed payload cannot be replayed.';
COMMENT ON COLUMN mailroom.signatures.payload IS 'The exact text that was signed.';
COMMENT ON COLUMN mailroom.signatures.payload_hash IS 'SHA-256 (hex) of the payload.';
COMMENT ON COLUMN mailroom.signatures.signature IS 'The Ed25519 signature of the payload.';
COMMENT ON COLUMN mailroom.signatures.prev_hash IS 'mailroom.signature_link_hash of the previous signature of the document (NULL for the first).';
COMMENT ON COLUMN mailroom.signatures.seq IS 'Position in the document''s chain (1 for the first).';
COMMENT ON COLUMN mailroom.signatures.user_sub IS 'The identity the signer proved on the signing page: email:<address> for a signer''s link, or the OpenID Connect subject when a login was required; NULL for signatures made by an operator (`mailroom docs sign`).';
COMMENT ON COLUMN mailroom.signatures.referer IS 'The Referer header of the signing page''s POST, as the browser sent it (at most 2048 characters); NULL when absent.';
COMMENT ON COLUMN mailroom.signatures.ip_address IS 'The address the signing page''s POST came from (the connecting peer as the tracker saw it).';
COMMENT ON COLUMN mailroom.signatures.user_agent IS 'The User-Agent header of the signing page''s POST, control characters removed (at most 1000 characters).';

ALTER TABLE mailroom.signatures ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.signatures_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.signatures
    ADD CONSTRAINT signatures_nonce_unique UNIQUE (nonce);

ALTER TABLE ONLY mailroom.signatures
    ADD CONSTRAINT signatures_one_per_signer_and_document UNIQUE (doc_id, signer_email);

ALTER TABLE ONLY mailroom.signatures
    ADD CONSTRAINT signatures_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.signatures
    ADD CONSTRAINT signatures_doc_exists FOREIGN KEY (doc_id) REFERENCES mailroom.documents(doc_id);

CREATE UNIQUE INDEX signatures_chain_idx ON mailroom.signatures USING btree (doc_id, prev_hash) NULLS NOT DISTINCT;

CREATE INDEX signatures_doc_idx ON mailroom.signatures USING btree (doc_id, id);

CREATE UNIQUE INDEX signatures_seq_idx ON mailroom.signatures USING btree (doc_id, seq);

CREATE FUNCTION mailroom.signatures_advance_head() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    head_count integer;
BEGIN
    INSERT INTO mailroom.signature_heads (doc_id) VALUES (NEW.doc_id) ON CONFLICT (doc_id) DO NOTHING;
    SELECT h.count INTO head_count FROM mailroom.signature_heads h WHERE h.doc_id = NEW.doc_id FOR UPDATE;
    IF NEW.seq IS NULL THEN
        NEW.seq := head_count + 1;
    ELSIF NEW.seq <> head_count + 1 THEN
        RAISE EXCEPTION 'signature of % at position % refused: the chain''s next position is %',
            NEW.doc_id, NEW.seq, head_count + 1
            USING ERRCODE = 'check_violation';
    END IF;
    UPDATE mailroom.signature_heads
    SET count = NEW.seq, last_hash = mailroom.signature_link_hash(NEW.payload_hash, NEW.signature),
        updated_at = clock_timestamp()
    WHERE doc_id = NEW.doc_id;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.signatures_advance_head() IS 'Row trigger: a new signature takes the next position of its document''s chain and moves the head; the head row lock serialises writers.';

CREATE FUNCTION mailroom.signatures_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'DELETE' AND mailroom.signature_maintenance_allows(OLD.doc_id) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'mailroom.signatures is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'remove a document''s signatures with mailroom.signature_maintenance(doc_id, reason, actor)';
END $$;

COMMENT ON FUNCTION mailroom.signatures_append_only() IS 'Trigger: UPDATE, DELETE and TRUNCATE of signatures are refused (42501), but inside mailroom.signature_maintenance().';

CREATE FUNCTION mailroom.signatures_webhook_events() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION mailroom.signatures_webhook_events() IS 'Statement trigger: a document.signed event for each signature, while an endpoint listens (operators'' endpoints only).';

CREATE TRIGGER signatures_chain_head BEFORE INSERT ON mailroom.signatures FOR EACH ROW EXECUTE FUNCTION mailroom.signatures_advance_head();

COMMENT ON TRIGGER signatures_chain_head ON mailroom.signatures IS 'Position and head of the chain.';

CREATE TRIGGER signatures_created_at BEFORE UPDATE ON mailroom.signatures FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();

COMMENT ON TRIGGER signatures_created_at ON mailroom.signatures IS 'created_at is immutable.';

CREATE TRIGGER signatures_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.signatures FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER signatures_notify ON mailroom.signatures IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TRIGGER signatures_refuse_change BEFORE DELETE OR UPDATE ON mailroom.signatures FOR EACH ROW EXECUTE FUNCTION mailroom.signatures_append_only();

COMMENT ON TRIGGER signatures_refuse_change ON mailroom.signatures IS 'Append-only (runs after signatures_created_at, by name).';

CREATE TRIGGER signatures_refuse_truncate BEFORE TRUNCATE ON mailroom.signatures FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signatures_append_only();

COMMENT ON TRIGGER signatures_refuse_truncate ON mailroom.signatures IS 'Append-only: no TRUNCATE.';

CREATE TRIGGER signatures_webhook_events AFTER INSERT ON mailroom.signatures REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signatures_webhook_events();

COMMENT ON TRIGGER signatures_webhook_events ON mailroom.signatures IS 'Writes mailroom.webhook_events for signatures.';

-- signature_heads

CREATE TABLE mailroom.signature_heads (
    doc_id text NOT NULL,
    count integer DEFAULT 0 NOT NULL,
    last_hash text,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT signature_heads_count_not_negative CHECK ((count >= 0)),
    CONSTRAINT signature_heads_last_hash_hex CHECK ((last_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT signature_heads_last_hash_matches_count CHECK (((count = 0) = (last_hash IS NULL)))
);

COMMENT ON TABLE mailroom.signature_heads IS 'The head of each document''s signature chain: how many signatures and the link hash the next must carry. Deleting any signature leaves a head that says so.';

COMMENT ON COLUMN mailroom.signature_heads.count IS 'Signatures in the chain.';
COMMENT ON COLUMN mailroom.signature_heads.last_hash IS 'The link hash the next signature''s prev_hash must be (NULL while empty).';

ALTER TABLE ONLY mailroom.signature_heads
    ADD CONSTRAINT signature_heads_pkey PRIMARY KEY (doc_id);

ALTER TABLE ONLY mailroom.signature_heads
    ADD CONSTRAINT signature_heads_doc_exists FOREIGN KEY (doc_id) REFERENCES mailroom.documents(doc_id) ON DELETE CASCADE;

CREATE FUNCTION mailroom.signature_heads_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_LEVEL = 'ROW' AND (pg_trigger_depth() > 1 OR mailroom.signature_maintenance_allows(
            CASE WHEN TG_OP = 'DELETE' THEN OLD.doc_id ELSE NEW.doc_id END)) THEN
        RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
    END IF;
    RAISE EXCEPTION 'mailroom.signature_heads is kept by the signatures'' triggers (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;

COMMENT ON FUNCTION mailroom.signature_heads_guard() IS 'Trigger: heads change only from the signature triggers, a document''s deletion or the maintenance path (42501 otherwise).';

CREATE TRIGGER signature_heads_guard BEFORE INSERT OR DELETE OR UPDATE ON mailroom.signature_heads FOR EACH ROW EXECUTE FUNCTION mailroom.signature_heads_guard();

COMMENT ON TRIGGER signature_heads_guard ON mailroom.signature_heads IS 'No direct writes.';

CREATE TRIGGER signature_heads_no_truncate BEFORE TRUNCATE ON mailroom.signature_heads FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signature_heads_guard();

COMMENT ON TRIGGER signature_heads_no_truncate ON mailroom.signature_heads IS 'No TRUNCATE.';

-- checksum_verifications

CREATE TABLE mailroom.checksum_verifications (
    id bigint NOT NULL,
    doc_id text NOT NULL,
    verified_by text DEFAULT ''::text NOT NULL,
    verified_at timestamp with time zone DEFAULT now() NOT NULL,
    stored_checksum text,
    calculated_checksum text NOT NULL,
    algorithm text NOT NULL,
    is_valid boolean NOT NULL,
    error_message text,
    CONSTRAINT checksum_verifications_algorithm_known CHECK ((algorithm = ANY (ARRAY['SHA-256'::text, 'SHA-512'::text]))),
    CONSTRAINT checksum_verifications_invalid_has_error CHECK ((is_valid OR (error_message IS NOT NULL)))
);

COMMENT ON TABLE mailroom.checksum_verifications IS 'Each check of a document''s checksum: what was stored, what was calculated, whether they matched.';

COMMENT ON COLUMN mailroom.checksum_verifications.is_valid IS 'Whether the calculated checksum matched (false needs error_message).';

ALTER TABLE mailroom.checksum_verifications ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.checksum_verifications_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.checksum_verifications
    ADD CONSTRAINT checksum_verifications_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.checksum_verifications
    ADD CONSTRAINT checksum_verifications_doc_exists FOREIGN KEY (doc_id) REFERENCES mailroom.documents(doc_id) ON DELETE CASCADE;

-- reminder_logs

CREATE TABLE mailroom.reminder_logs (
    id bigint NOT NULL,
    doc_id text NOT NULL,
    recipient_email text NOT NULL,
    email_id bigint,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    requested_by text DEFAULT ''::text NOT NULL,
    template text NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    finished_at timestamp with time zone,
    error_message text,
    CONSTRAINT reminder_logs_status_known CHECK ((status = ANY (ARRAY['queued'::text, 'sent'::text, 'failed'::text, 'bounced'::text, 'suppressed'::text, 'cancelled'::text])))
);

COMMENT ON TABLE mailroom.reminder_logs IS 'Reminder emails asked for each expected signer; the row follows its email''s fate.';

COMMENT ON COLUMN mailroom.reminder_logs.email_id IS 'The reminder email (its reference_id names this row).';
COMMENT ON COLUMN mailroom.reminder_logs.status IS 'queued: the email is in the queue; sent, failed, bounced, suppressed, cancelled: copied from the email''s final state.';
COMMENT ON COLUMN mailroom.reminder_logs.finished_at IS 'When the email reached its final state.';

ALTER TABLE mailroom.reminder_logs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.reminder_logs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.reminder_logs
    ADD CONSTRAINT reminder_logs_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.reminder_logs
    ADD CONSTRAINT reminder_logs_recipient_is_expected_signer FOREIGN KEY (doc_id, recipient_email) REFERENCES mailroom.expected_signers(doc_id, email) ON DELETE CASCADE;

CREATE INDEX reminder_logs_doc_idx ON mailroom.reminder_logs USING btree (doc_id, recipient_email, requested_at DESC);

CREATE INDEX reminder_logs_email_idx ON mailroom.reminder_logs USING btree (email_id) WHERE (status = 'queued'::text);

-- oauth_sessions

CREATE TABLE mailroom.oauth_sessions (
    id bigint NOT NULL,
    session_secret_hash bytea NOT NULL,
    user_sub text NOT NULL,
    email text NOT NULL,
    refresh_token_encrypted bytea,
    access_token_expires_at timestamp with time zone,
    last_refreshed_at timestamp with time zone,
    user_agent text,
    ip_address inet,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT oauth_sessions_email_format CHECK ((((length(email) >= 3) AND (length(email) <= 254)) AND (email ~ '^[^@\s]+@[^@\s]+$'::text))),
    CONSTRAINT oauth_sessions_secret_hash_length CHECK ((octet_length(session_secret_hash) = 32)),
    CONSTRAINT oauth_sessions_user_agent_length CHECK ((length(user_agent) <= 1000)),
    CONSTRAINT oauth_sessions_user_sub_length CHECK (((length(user_sub) >= 1) AND (length(user_sub) <= 255)))
);

COMMENT ON TABLE mailroom.oauth_sessions IS 'Login sessions of the signing page''s OpenID Connect login: one per browser that logged in; unused for 37 days, deleted';

COMMENT ON COLUMN mailroom.oauth_sessions.session_secret_hash IS 'SHA-256 of the session cookie''s value (256 random bits): a stolen table gives no usable cookie';
COMMENT ON COLUMN mailroom.oauth_sessions.user_sub IS 'The issuer''s subject (the ID token''s sub): who logged in';
COMMENT ON COLUMN mailroom.oauth_sessions.email IS 'The address the issuer verified for the subject at login';
COMMENT ON COLUMN mailroom.oauth_sessions.refresh_token_encrypted IS 'The latest refresh token (replaced at each rotation), encrypted with the secret key; NULL when the issuer gave none';
COMMENT ON COLUMN mailroom.oauth_sessions.access_token_expires_at IS 'When the access token expires: the next use after it refreshes the tokens, or ends the session when that is refused';
COMMENT ON COLUMN mailroom.oauth_sessions.last_refreshed_at IS 'When the tokens were last refreshed; NULL before the first refresh';
COMMENT ON COLUMN mailroom.oauth_sessions.user_agent IS 'The browser''s User-Agent at login: a request with another one ends the session (the theft rule)';
COMMENT ON COLUMN mailroom.oauth_sessions.ip_address IS 'The client address at login: a request from another /24 (IPv4) or /48 (IPv6) ends the session (the theft rule)';
COMMENT ON COLUMN mailroom.oauth_sessions.created_at IS 'When the session started (the login)';
COMMENT ON COLUMN mailroom.oauth_sessions.updated_at IS 'When the session was last used or refreshed; 37 days after it the session is over and maintenance deletes it';

ALTER TABLE mailroom.oauth_sessions ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.oauth_sessions_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.oauth_sessions
    ADD CONSTRAINT oauth_sessions_one_per_secret UNIQUE (session_secret_hash);

ALTER TABLE ONLY mailroom.oauth_sessions
    ADD CONSTRAINT oauth_sessions_pkey PRIMARY KEY (id);

CREATE INDEX oauth_sessions_updated_idx ON mailroom.oauth_sessions USING btree (updated_at);

CREATE INDEX oauth_sessions_user_sub_idx ON mailroom.oauth_sessions USING btree (user_sub);

CREATE TRIGGER oauth_sessions_created_at_fixed BEFORE UPDATE ON mailroom.oauth_sessions FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();

COMMENT ON TRIGGER oauth_sessions_created_at_fixed ON mailroom.oauth_sessions IS 'created_at can never be rewritten; updated_at is set by each use (the session''s clock, not the row''s)';

-- functions

CREATE FUNCTION mailroom.signature_link_hash(payload_hash text, signature text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT encode(sha256(convert_to(payload_hash || ':' || signature, 'UTF8')), 'hex')
$$;

COMMENT ON FUNCTION mailroom.signature_link_hash(payload_hash text, signature text) IS 'What the next signature''s prev_hash must be: SHA-256 of payload_hash:signature.';

CREATE FUNCTION mailroom.signature_maintenance(doc_id text, reason text, actor text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    doc CONSTANT text := signature_maintenance.doc_id;
    head record;
    removed bigint;
    audit_id bigint;
BEGIN
    IF coalesce(btrim(reason), '') = '' OR coalesce(btrim(actor), '') = '' THEN
        RAISE EXCEPTION 'signature maintenance needs a reason and an actor'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The document lock waits for signers in flight, as they hold it while they sign.
    PERFORM 1 FROM mailroom.documents d WHERE d.doc_id = doc FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no document %', doc USING ERRCODE = 'no_data_found';
    END IF;
    SELECT h.count, h.last_hash INTO head FROM mailroom.signature_heads h WHERE h.doc_id = doc FOR UPDATE;
    SELECT count(*) INTO removed FROM mailroom.signatures s WHERE s.doc_id = doc;
    audit_id := mailroom.audit('signatures.maintenance', actor, doc, removed,
        jsonb_build_object('reason', reason, 'removed', removed,
                           'head_count', head.count, 'head_last_hash', head.last_hash));
    PERFORM set_config('mailroom.signature_maintenance', audit_id::text, true);
    DELETE FROM mailroom.signatures s WHERE s.doc_id = doc;
    INSERT INTO mailroom.signature_heads AS h (doc_id, count, last_hash) VALUES (doc, 0, NULL)
    ON CONFLICT ON CONSTRAINT signature_heads_pkey
    DO UPDATE SET count = 0, last_hash = NULL, updated_at = clock_timestamp();
    PERFORM set_config('mailroom.signature_maintenance', '', true);
    RETURN removed;
END $$;

COMMENT ON FUNCTION mailroom.signature_maintenance(doc_id text, reason text, actor text) IS 'The one audited way to remove signatures: every signature of one document, the head reset; returns how many.';

CREATE FUNCTION mailroom.signature_maintenance_allows(doc text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $_$
    SELECT EXISTS (
        SELECT 1 FROM mailroom.audit_log a
        WHERE a.id = CASE WHEN current_setting('mailroom.signature_maintenance', true) ~ '^[0-9]{1,18}$'
                          THEN current_setting('mailroom.signature_maintenance', true)::bigint END
          AND a.action = 'signatures.maintenance' AND a.target = doc AND a.at >= now())
$_$;

COMMENT ON FUNCTION mailroom.signature_maintenance_allows(doc text) IS 'True inside mailroom.signature_maintenance() for its document (a signatures.maintenance audit row of this transaction).';

-- == audit ==

-- audit_log

CREATE TABLE mailroom.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    db_role text DEFAULT SESSION_USER NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text,
    affected bigint DEFAULT 0 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    seq bigint NOT NULL,
    prev_hash text,
    row_hash text NOT NULL,
    CONSTRAINT audit_log_action_format CHECK ((action ~ '^[a-z][a-z0-9_.]{0,63}$'::text)),
    CONSTRAINT audit_log_actor_length CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT audit_log_affected_not_negative CHECK ((affected >= 0)),
    CONSTRAINT audit_log_detail_object CHECK ((jsonb_typeof(detail) = 'object'::text)),
    CONSTRAINT audit_log_prev_hash_hex CHECK ((prev_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT audit_log_row_hash_hex CHECK ((row_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT audit_log_seq_positive CHECK ((seq >= 1)),
    CONSTRAINT audit_log_target_length CHECK ((length(target) <= 500))
);

COMMENT ON TABLE mailroom.audit_log IS 'Append-only, hash-chained record of sensitive operations: when, which role and actor, what, on what, how many.';

COMMENT ON COLUMN mailroom.audit_log.at IS 'When the operation was recorded.';
COMMENT ON COLUMN mailroom.audit_log.db_role IS 'The database role that wrote the row (session_user).';
COMMENT ON COLUMN mailroom.audit_log.actor IS 'Who asked: an OS user, console, an application''s name.';
COMMENT ON COLUMN mailroom.audit_log.action IS 'What was done (sender.suspend, privacy.erase, app.*, ...).';
COMMENT ON COLUMN mailroom.audit_log.target IS 'What it was done to.';
COMMENT ON COLUMN mailroom.audit_log.affected IS 'How many rows it affected.';
COMMENT ON COLUMN mailroom.audit_log.detail IS 'Further details, a JSON object.';
COMMENT ON COLUMN mailroom.audit_log.seq IS 'Position in the audit chain (set by the audit_log_chain trigger)';
COMMENT ON COLUMN mailroom.audit_log.prev_hash IS 'row_hash of the row at the previous position (NULL for the first row of a never-pruned chain)';
COMMENT ON COLUMN mailroom.audit_log.row_hash IS 'SHA-256 of this row''s canonical encoding (mailroom.audit_row_hash), prev_hash included';

ALTER TABLE mailroom.audit_log ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME mailroom.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

ALTER TABLE ONLY mailroom.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);

CREATE INDEX audit_log_at_idx ON mailroom.audit_log USING btree (at DESC);

CREATE UNIQUE INDEX audit_log_seq_idx ON mailroom.audit_log USING btree (seq);

CREATE FUNCTION mailroom.audit_log_append_only() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'DELETE' AND TG_LEVEL = 'ROW' AND mailroom.audit_prune_allows(OLD.seq) THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'mailroom.audit_log is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege',
              HINT = 'the oldest rows leave only through mailroom.audit_prune(before, reason, actor)';
END $$;

COMMENT ON FUNCTION mailroom.audit_log_append_only() IS 'Trigger: audit rows are never changed or removed, but the oldest by mailroom.audit_prune() (42501 otherwise).';

CREATE FUNCTION mailroom.audit_log_chain() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    head record;
BEGIN
    IF coalesce(current_setting('mailroom.audit_linking', true), '') <> 'on' THEN
        PERFORM mailroom.audit_take_head();
        PERFORM mailroom.audit_link_pending();
    END IF;
    SELECT c.seq, c.last_hash INTO head FROM mailroom.audit_chain c WHERE c.only_row FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the audit chain has no head row (mailroom.audit_chain was emptied)'
            USING ERRCODE = 'insufficient_privilege', HINT = 'run mailroom audit verify';
    END IF;
    NEW.seq := head.seq + 1;
    NEW.prev_hash := head.last_hash;
    NEW.row_hash := mailroom.audit_row_hash(NEW.seq, NEW.id, NEW.at, NEW.db_role, NEW.actor, NEW.action,
                                            NEW.target, NEW.affected, NEW.detail, NEW.prev_hash);
    UPDATE mailroom.audit_chain c
    SET seq = NEW.seq, last_id = NEW.id, last_hash = NEW.row_hash, updated_at = clock_timestamp()
    WHERE c.only_row;
    RETURN NEW;
END $$;

COMMENT ON FUNCTION mailroom.audit_log_chain() IS 'Chains each new audit row (seq, prev_hash, row_hash) and moves mailroom.audit_chain, under its row lock (waited for 5 s at most), after the applications'' rows waiting in mailroom.audit_pending';

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON mailroom.audit_log FOR EACH ROW EXECUTE FUNCTION mailroom.audit_log_append_only();

COMMENT ON TRIGGER audit_log_append_only ON mailroom.audit_log IS 'Append-only.';

CREATE TRIGGER audit_log_chain BEFORE INSERT ON mailroom.audit_log FOR EACH ROW EXECUTE FUNCTION mailroom.audit_log_chain();

COMMENT ON TRIGGER audit_log_chain ON mailroom.audit_log IS 'Chains every new row.';

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON mailroom.audit_log FOR EACH STATEMENT EXECUTE FUNCTION mailroom.audit_log_append_only();

COMMENT ON TRIGGER audit_log_no_truncate ON mailroom.audit_log IS 'No TRUNCATE.';

CREATE TRIGGER audit_log_notify AFTER INSERT ON mailroom.audit_log FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

COMMENT ON TRIGGER audit_log_notify ON mailroom.audit_log IS 'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

-- audit_chain

CREATE TABLE mailroom.audit_chain (
    only_row boolean DEFAULT true NOT NULL,
    seq bigint DEFAULT 0 NOT NULL,
    last_id bigint,
    last_hash text,
    pruned_seq bigint DEFAULT 0 NOT NULL,
    pruned_hash text,
    updated_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    CONSTRAINT audit_chain_head_set CHECK ((((seq = 0) = (last_hash IS NULL)) AND ((seq = 0) = (last_id IS NULL)))),
    CONSTRAINT audit_chain_last_hash_hex CHECK ((last_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT audit_chain_one_row CHECK (only_row),
    CONSTRAINT audit_chain_pruned_hash_hex CHECK ((pruned_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT audit_chain_pruned_set CHECK (((pruned_seq = 0) = (pruned_hash IS NULL))),
    CONSTRAINT audit_chain_pruned_within CHECK (((pruned_seq >= 0) AND (pruned_seq <= seq))),
    CONSTRAINT audit_chain_seq_positive CHECK ((seq >= 0))
);

COMMENT ON TABLE mailroom.audit_chain IS 'The audit trail''s chain head (one row), moved by the audit_log_chain trigger; export it with mailroom audit head';

COMMENT ON COLUMN mailroom.audit_chain.only_row IS 'Always true: the table has one row.';
COMMENT ON COLUMN mailroom.audit_chain.seq IS 'Position of the newest audit row (0: none yet)';
COMMENT ON COLUMN mailroom.audit_chain.last_id IS 'Id of the newest audit row';
COMMENT ON COLUMN mailroom.audit_chain.last_hash IS 'row_hash of the newest audit row';
COMMENT ON COLUMN mailroom.audit_chain.pruned_seq IS 'Rows at positions up to this one were removed by mailroom.audit_prune (0: none)';
COMMENT ON COLUMN mailroom.audit_chain.pruned_hash IS 'row_hash of the last pruned row: the prev_hash the oldest kept row must carry';

ALTER TABLE ONLY mailroom.audit_chain
    ADD CONSTRAINT audit_chain_pkey PRIMARY KEY (only_row);

CREATE FUNCTION mailroom.audit_chain_guard() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_LEVEL = 'ROW' AND TG_OP = 'UPDATE'
       AND (pg_trigger_depth() > 1 OR mailroom.audit_prune_allows(NEW.pruned_seq)) THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'mailroom.audit_chain is kept by the audit trail''s trigger (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;

COMMENT ON FUNCTION mailroom.audit_chain_guard() IS 'Trigger: the head changes only from the chain trigger or inside mailroom.audit_prune() (42501 otherwise).';

CREATE TRIGGER audit_chain_guard BEFORE INSERT OR DELETE OR UPDATE ON mailroom.audit_chain FOR EACH ROW EXECUTE FUNCTION mailroom.audit_chain_guard();

COMMENT ON TRIGGER audit_chain_guard ON mailroom.audit_chain IS 'No direct writes.';

CREATE TRIGGER audit_chain_no_truncate BEFORE TRUNCATE ON mailroom.audit_chain FOR EACH STATEMENT EXECUTE FUNCTION mailroom.audit_chain_guard();

COMMENT ON TRIGGER audit_chain_no_truncate ON mailroom.audit_chain IS 'No TRUNCATE.';

-- audit_pending

CREATE TABLE mailroom.audit_pending (
    id bigint DEFAULT nextval('mailroom.audit_log_id_seq'::regclass) NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    db_role text DEFAULT SESSION_USER NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text,
    affected bigint DEFAULT 0 NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT audit_pending_action_app CHECK ((action ~ '^app\.[a-z0-9_.]{0,60}$'::text)),
    CONSTRAINT audit_pending_actor_length CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT audit_pending_affected_positive CHECK ((affected >= 0)),
    CONSTRAINT audit_pending_detail_object CHECK ((jsonb_typeof(detail) = 'object'::text)),
    CONSTRAINT audit_pending_target_length CHECK ((length(target) <= 500))
);

COMMENT ON TABLE mailroom.audit_pending IS 'Applications'' audit rows (mailroom.app_audit) waiting to be chained into mailroom.audit_log: moved there, with their id and time, by mailroom.audit_link_pending under the chain head''s lock (the next audit row anyone else writes, and maintenance). No role writes it directly.';

COMMENT ON COLUMN mailroom.audit_pending.id IS 'The audit row''s id, drawn from mailroom.audit_log''s own sequence: the id app_audit returned and the chained row keeps.';
COMMENT ON COLUMN mailroom.audit_pending.at IS 'When the application wrote it (kept when it is chained).';
COMMENT ON COLUMN mailroom.audit_pending.db_role IS 'The application''s database role (session_user).';
COMMENT ON COLUMN mailroom.audit_pending.actor IS 'Who the application says acted.';
COMMENT ON COLUMN mailroom.audit_pending.action IS 'app.* : an application''s own action.';
COMMENT ON COLUMN mailroom.audit_pending.detail IS 'The application''s detail (at most 16 KiB of JSON).';

ALTER TABLE ONLY mailroom.audit_pending
    ADD CONSTRAINT audit_pending_pkey PRIMARY KEY (id);

-- functions

CREATE FUNCTION mailroom.audit(action text, actor text, target text DEFAULT NULL::text, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'::jsonb) RETURNS bigint
    LANGUAGE sql
    AS $$
    INSERT INTO mailroom.audit_log (actor, action, target, affected, detail)
    VALUES (coalesce(nullif(left(actor, 200), ''), session_user), action, left(target, 500),
            coalesce(affected, 0), coalesce(detail, '{}'))
    RETURNING id
$$;

COMMENT ON FUNCTION mailroom.audit(action text, actor text, target text, affected bigint, detail jsonb) IS 'Record one sensitive operation; returns the audit row''s id. The database role is taken from the session.';

CREATE FUNCTION mailroom.audit_field(value text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN value IS NULL THEN '-,'
                ELSE octet_length(convert_to(value, 'UTF8'))::text || ':' || value || ',' END
$$;

COMMENT ON FUNCTION mailroom.audit_field(value text) IS 'One field of an audit row''s canonical encoding: <UTF-8 byte length>:<text>, and NULL as -,';

CREATE FUNCTION mailroom.audit_head_holders() RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT string_agg(format('pid %s (role %s, application %s, %s, in a transaction for %s)', a.pid,
                             coalesce(a.usename::text, '?'), coalesce(nullif(a.application_name, ''), '-'),
                             coalesce(a.state, 'state hidden'),
                             coalesce(date_trunc('second', clock_timestamp() - a.xact_start)::text, '?')),
                      '; ' ORDER BY a.xact_start NULLS LAST, a.pid)
    FROM pg_stat_activity a
    WHERE a.pid <> pg_backend_pid() AND a.wait_event_type IS DISTINCT FROM 'Lock'
      AND a.pid IN (SELECT l.pid FROM pg_locks l
                    WHERE l.locktype = 'relation' AND l.relation = 'mailroom.audit_chain'::regclass
                      AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                      AND l.granted AND l.mode IN ('RowShareLock', 'RowExclusiveLock'))
$$;

COMMENT ON FUNCTION mailroom.audit_head_holders() IS 'The sessions holding the audit chain head (pid, role, application_name, state, how long in their transaction), from pg_locks and pg_stat_activity; NULL when none.';

REVOKE ALL ON FUNCTION mailroom.audit_head_holders() FROM PUBLIC;

CREATE FUNCTION mailroom.audit_link_pending(max_rows integer DEFAULT 1000) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    linked integer;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM mailroom.audit_pending) THEN
        RETURN 0;
    END IF;
    PERFORM mailroom.audit_take_head();
    -- The rows inserted here are chained by audit_log_chain, which must not link again for each.
    PERFORM set_config('mailroom.audit_linking', 'on', true);
    WITH moved AS (
        DELETE FROM mailroom.audit_pending p
        WHERE p.id IN (SELECT w.id FROM mailroom.audit_pending w ORDER BY w.id LIMIT max_rows)
        RETURNING p.*
    )
    INSERT INTO mailroom.audit_log (id, at, db_role, actor, action, target, affected, detail)
    OVERRIDING SYSTEM VALUE
    SELECT m.id, m.at, m.db_role, m.actor, m.action, m.target, m.affected, m.detail FROM moved m ORDER BY m.id;
    GET DIAGNOSTICS linked = ROW_COUNT;
    PERFORM set_config('mailroom.audit_linking', '', true);
    RETURN linked;
END $$;

COMMENT ON FUNCTION mailroom.audit_link_pending(max_rows integer) IS 'Chain up to max_rows of the oldest applications'' audit rows waiting in mailroom.audit_pending (under the head''s lock, held to the end of the transaction); how many. Run by every audit write and by maintenance.';

REVOKE ALL ON FUNCTION mailroom.audit_link_pending(max_rows integer) FROM PUBLIC;

CREATE FUNCTION mailroom.audit_prune(before timestamp with time zone, reason text, actor text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    head record;
    through bigint;
    through_hash text;
    removed bigint;
    audit_id bigint;
BEGIN
    IF audit_prune.before IS NULL OR coalesce(btrim(reason), '') = '' OR coalesce(btrim(actor), '') = '' THEN
        RAISE EXCEPTION 'pruning the audit trail needs a time, a reason and an actor'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The head's lock waits for audit writers in flight and keeps new ones out until this commits.
    SELECT c.seq, c.pruned_seq INTO head FROM mailroom.audit_chain c WHERE c.only_row FOR UPDATE;
    SELECT coalesce(min(a.seq) - 1, head.seq) INTO through
    FROM mailroom.audit_log a WHERE a.at >= audit_prune.before;
    IF through <= head.pruned_seq THEN
        RETURN 0;
    END IF;
    SELECT a.row_hash INTO through_hash FROM mailroom.audit_log a WHERE a.seq = through;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'audit chain position % is missing: the chain is broken', through
            USING ERRCODE = 'data_corrupted', HINT = 'run mailroom audit verify';
    END IF;
    SELECT count(*) INTO removed FROM mailroom.audit_log a WHERE a.seq <= through;
    audit_id := mailroom.audit('audit.prune', actor, NULL, removed,
        jsonb_build_object('reason', reason, 'before', audit_prune.before, 'through_seq', through,
                           'through_hash', through_hash, 'previously_pruned_seq', head.pruned_seq));
    PERFORM set_config('mailroom.audit_prune', audit_id::text, true);
    UPDATE mailroom.audit_chain c SET pruned_seq = through, pruned_hash = through_hash WHERE c.only_row;
    DELETE FROM mailroom.audit_log a WHERE a.seq <= through;
    PERFORM set_config('mailroom.audit_prune', '', true);
    RETURN removed;
END $$;

COMMENT ON FUNCTION mailroom.audit_prune(before timestamp with time zone, reason text, actor text) IS 'Remove the audit trail''s oldest rows written before a time, audited, leaving a verifiable anchor';

REVOKE ALL ON FUNCTION mailroom.audit_prune(before timestamp with time zone, reason text, actor text) FROM PUBLIC;

CREATE FUNCTION mailroom.audit_prune_allows(through bigint) RETURNS boolean
    LANGUAGE sql STABLE
    AS $_$
    SELECT EXISTS (
        SELECT 1 FROM mailroom.audit_log a
        WHERE a.id = CASE WHEN current_setting('mailroom.audit_prune', true) ~ '^[0-9]{1,18}$'
                          THEN current_setting('mailroom.audit_prune', true)::bigint END
          AND a.action = 'audit.prune' AND a.at >= now()
          AND through <= (a.detail ->> 'through_seq')::bigint)
$_$;

COMMENT ON FUNCTION mailroom.audit_prune_allows(through bigint) IS 'True inside mailroom.audit_prune() for positions its audit.prune row covers';

CREATE FUNCTION mailroom.audit_row_hash(seq bigint, id bigint, at timestamp with time zone, db_role text, actor text, action text, target text, affected bigint, detail jsonb, prev_hash text) RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT encode(sha256(convert_to('mailroom-audit/1,'
        || mailroom.audit_field(seq::text) || mailroom.audit_field(id::text)
        || mailroom.audit_field((extract(epoch FROM at) * 1000000)::bigint::text)
        || mailroom.audit_field(db_role) || mailroom.audit_field(actor) || mailroom.audit_field(action)
        || mailroom.audit_field(target) || mailroom.audit_field(affected::text)
        || mailroom.audit_field(detail::text) || mailroom.audit_field(prev_hash), 'UTF8')), 'hex')
$$;

COMMENT ON FUNCTION mailroom.audit_row_hash(seq bigint, id bigint, at timestamp with time zone, db_role text, actor text, action text, target text, affected bigint, detail jsonb, prev_hash text) IS 'SHA-256 (hex) of an audit row''s canonical encoding: its row_hash';

CREATE FUNCTION mailroom.audit_take_head() RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    saved text := current_setting('lock_timeout');
    wait_ms bigint := (SELECT s.setting::bigint FROM pg_settings s WHERE s.name = 'lock_timeout');
BEGIN
    IF wait_ms = 0 OR wait_ms > 5000 THEN
        PERFORM set_config('lock_timeout', '5s', true);
    END IF;
    BEGIN
        PERFORM FROM mailroom.audit_chain c WHERE c.only_row FOR UPDATE;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'the audit trail is held by another session''s open transaction: %',
                        coalesce(mailroom.audit_head_holders(), 'it has just ended')
            USING ERRCODE = 'lock_not_available',
                  HINT = 'end that transaction (or SELECT pg_terminate_backend(pid)), then run the command again';
    END;
    PERFORM set_config('lock_timeout', saved, true);
END $$;

COMMENT ON FUNCTION mailroom.audit_take_head() IS 'Lock the audit chain head for this transaction, waiting at most 5 s (or a shorter lock_timeout), else 55P03 naming the sessions that hold it.';

REVOKE ALL ON FUNCTION mailroom.audit_take_head() FROM PUBLIC;

-- == roles and API functions ==

-- my_emails

CREATE VIEW mailroom.my_emails WITH (security_barrier='true') AS
 SELECT id,
    status,
    recipient_email,
    subject,
    idempotency_key,
    reference_type,
    reference_id,
    priority,
    scheduled_for,
    created_at,
    sent_at,
    finished_at,
    retry_count,
    max_retries,
    next_retry_at,
    last_error,
    mailroom.suppression_told(suppression_reason) AS suppression_reason
   FROM mailroom.email_queue
  WHERE (enqueued_by = SESSION_USER);

COMMENT ON VIEW mailroom.my_emails IS 'The email the current role enqueued (enqueued_by = session_user): status and outcome, for applications.';

COMMENT ON COLUMN mailroom.my_emails.suppression_reason IS 'Why the email is suppressed, as far as the reading role may know (mailroom.suppression_told).';

-- functions

CREATE FUNCTION mailroom.app_audit(action text, actor text, target text DEFAULT NULL::text, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'::jsonb) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    row_id bigint;
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
    INSERT INTO mailroom.audit_pending (actor, action, target, affected, detail)
    VALUES (coalesce(nullif(actor, ''), session_user), action, target, coalesce(affected, 0),
            coalesce(detail, '{}'))
    RETURNING id INTO row_id;
    RETURN row_id;
END $$;

COMMENT ON FUNCTION mailroom.app_audit(action text, actor text, target text, affected bigint, detail jsonb) IS 'Record an application''s own audit row (action app.*): it waits in mailroom.audit_pending, taking no lock, and is chained by the next audit write or maintenance; its id. Granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.app_audit(action text, actor text, target text, affected bigint, detail jsonb) FROM PUBLIC;

CREATE FUNCTION mailroom.cancel_my_email(email_id bigint DEFAULT NULL::bigint, idempotency_key text DEFAULT NULL::text) RETURNS TABLE(id bigint, status text, cancelled boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
#variable_conflict use_column
DECLARE
    done bigint[];
BEGIN
    IF (cancel_my_email.email_id IS NULL) = (cancel_my_email.idempotency_key IS NULL) THEN
        RAISE EXCEPTION 'cancel: name the email by its id or by its idempotency key, one of the two'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- An email being claimed is locked: this waits for the claim, then finds it assigned and leaves it.
    WITH changed AS (
        UPDATE mailroom.email_queue q
        SET status = 'cancelled', last_error = 'cancelled by the application that enqueued it'
        WHERE q.enqueued_by = session_user AND q.status IN ('pending', 'unrendered')
          AND (q.id = cancel_my_email.email_id OR q.idempotency_key = cancel_my_email.idempotency_key)
        RETURNING q.id
    )
    SELECT array_agg(c.id) INTO done FROM changed c;
    RETURN QUERY
    SELECT q.id, q.status, q.id = ANY(coalesce(done, '{}')) FROM mailroom.email_queue q
    WHERE q.enqueued_by = session_user
      AND (q.id = cancel_my_email.email_id OR q.idempotency_key = cancel_my_email.idempotency_key);
END $$;

COMMENT ON FUNCTION mailroom.cancel_my_email(email_id bigint, idempotency_key text) IS 'Cancel an email the calling role enqueued, named by its id or its idempotency key, while it is pending or unrendered. Returns the email''s id, status and whether this call cancelled it (no row: no such email of this role). Granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.cancel_my_email(email_id bigint, idempotency_key text) FROM PUBLIC;

CREATE FUNCTION mailroom.enqueue(recipients text[], subject text DEFAULT NULL::text, text_body text DEFAULT NULL::text, html_body text DEFAULT NULL::text, to_name text DEFAULT NULL::text, cc text[] DEFAULT NULL::text[], bcc text[] DEFAULT NULL::text[], reply_to text[] DEFAULT NULL::text[], headers jsonb DEFAULT '{}'::jsonb, idempotency_key text DEFAULT NULL::text, scheduled_for timestamp with time zone DEFAULT NULL::timestamp with time zone, priority integer DEFAULT 0, max_retries integer DEFAULT NULL::integer, reference_type text DEFAULT NULL::text, reference_id text DEFAULT NULL::text, template text DEFAULT NULL::text, template_data jsonb DEFAULT NULL::jsonb, locale text DEFAULT NULL::text, campaign_id text DEFAULT NULL::text, transactional boolean DEFAULT NULL::boolean, track boolean DEFAULT NULL::boolean, expires_at timestamp with time zone DEFAULT NULL::timestamp with time zone, attachments jsonb DEFAULT NULL::jsonb, stream text DEFAULT NULL::text, from_email text DEFAULT NULL::text, from_name text DEFAULT NULL::text) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $_$
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
END $_$;

COMMENT ON FUNCTION mailroom.enqueue(recipients text[], subject text, text_body text, html_body text, to_name text, cc text[], bcc text[], reply_to text[], headers jsonb, idempotency_key text, scheduled_for timestamp with time zone, priority integer, max_retries integer, reference_type text, reference_id text, template text, template_data jsonb, locale text, campaign_id text, transactional boolean, track boolean, expires_at timestamp with time zone, attachments jsonb, stream text, from_email text, from_name text) IS 'Enqueue an email from SQL, in the caller''s transaction, with every field the Python API takes (expires_at, stream, from_email and from_name, and attachments as a JSON array of {filename, content (base64), content_type, content_id}); returns its id (the first email''s for a repeated idempotency key). Email with a template, or with campaign dress (not transactional, or tracked), is stored unrendered and the worker renders and dresses it as the Python API would. 22023: a bad argument; 23514: content the rules refuse.';

REVOKE ALL ON FUNCTION mailroom.enqueue(recipients text[], subject text, text_body text, html_body text, to_name text, cc text[], bcc text[], reply_to text[], headers jsonb, idempotency_key text, scheduled_for timestamp with time zone, priority integer, max_retries integer, reference_type text, reference_id text, template text, template_data jsonb, locale text, campaign_id text, transactional boolean, track boolean, expires_at timestamp with time zone, attachments jsonb, stream text, from_email text, from_name text) FROM PUBLIC;

CREATE FUNCTION mailroom.enqueue_outcome(email_id bigint) RETURNS TABLE(id bigint, status text, suppressed boolean, suppression_reason text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT e.id, e.status, e.status = 'suppressed', mailroom.suppression_told(e.suppression_reason)
    FROM mailroom.email_queue e
    WHERE e.id = enqueue_outcome.email_id AND e.enqueued_by = session_user
$$;

COMMENT ON FUNCTION mailroom.enqueue_outcome(email_id bigint) IS 'The state of an email the calling role enqueued: whether it was stored suppressed, and why as far as it may know (mailroom.suppression_told). Granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.enqueue_outcome(email_id bigint) FROM PUBLIC;

CREATE FUNCTION mailroom.enqueue_rows(recipient_email text[], recipient_name text[], subject text[], text_body text[], html_body text[], headers jsonb[], template text[], locale text[], template_data jsonb[], priority integer[], scheduled_for timestamp with time zone[], max_retries integer[], idempotency_key text[], campaign_id text[], transactional boolean[], reference_type text[], reference_id text[], created_by text[], tracking_token uuid[], unsubscribe_token uuid[], track_opens boolean[], track_clicks boolean[], to_extra text[], cc text[], bcc text[], reply_to text[], dress jsonb[], link_email integer[] DEFAULT '{}'::integer[], link_position integer[] DEFAULT '{}'::integer[], link_token uuid[] DEFAULT '{}'::uuid[], link_url text[] DEFAULT '{}'::text[], expires_at timestamp with time zone[] DEFAULT NULL::timestamp with time zone[], attachment_email integer[] DEFAULT '{}'::integer[], attachment_position integer[] DEFAULT '{}'::integer[], attachment_filename text[] DEFAULT '{}'::text[], attachment_type text[] DEFAULT '{}'::text[], attachment_cid text[] DEFAULT '{}'::text[], attachment_data integer[] DEFAULT '{}'::integer[], contents bytea[] DEFAULT '{}'::bytea[], stream text[] DEFAULT NULL::text[], from_email text[] DEFAULT NULL::text[], from_name text[] DEFAULT NULL::text[]) RETURNS TABLE(n integer, id bigint, written boolean, suppression text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
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

COMMENT ON FUNCTION mailroom.enqueue_rows(recipient_email text[], recipient_name text[], subject text[], text_body text[], html_body text[], headers jsonb[], template text[], locale text[], template_data jsonb[], priority integer[], scheduled_for timestamp with time zone[], max_retries integer[], idempotency_key text[], campaign_id text[], transactional boolean[], reference_type text[], reference_id text[], created_by text[], tracking_token uuid[], unsubscribe_token uuid[], track_opens boolean[], track_clicks boolean[], to_extra text[], cc text[], bcc text[], reply_to text[], dress jsonb[], link_email integer[], link_position integer[], link_token uuid[], link_url text[], expires_at timestamp with time zone[], attachment_email integer[], attachment_position integer[], attachment_filename text[], attachment_type text[], attachment_cid text[], attachment_data integer[], contents bytea[], stream text[], from_email text[], from_name text[]) IS 'The Python API''s door: write checked and rendered emails (one array per column, the tracked links and the files beside them) as the schema''s owner, so an application role needs no privilege on the queue. Forces enqueued_by (session_user), the status and the ids; created_by only from a role that may write the queue. Returns each given email''s position, id, whether it was written (false: its idempotency key was this role''s already) and its suppression as the caller may be told it. Granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.enqueue_rows(recipient_email text[], recipient_name text[], subject text[], text_body text[], html_body text[], headers jsonb[], template text[], locale text[], template_data jsonb[], priority integer[], scheduled_for timestamp with time zone[], max_retries integer[], idempotency_key text[], campaign_id text[], transactional boolean[], reference_type text[], reference_id text[], created_by text[], tracking_token uuid[], unsubscribe_token uuid[], track_opens boolean[], track_clicks boolean[], to_extra text[], cc text[], bcc text[], reply_to text[], dress jsonb[], link_email integer[], link_position integer[], link_token uuid[], link_url text[], expires_at timestamp with time zone[], attachment_email integer[], attachment_position integer[], attachment_filename text[], attachment_type text[], attachment_cid text[], attachment_data integer[], contents bytea[], stream text[], from_email text[], from_name text[]) FROM PUBLIC;

CREATE FUNCTION mailroom.enqueue_templates() RETURNS TABLE(name text, locale text, subject text, text_body text, html_body text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT t.name, t.locale, t.subject, t.text_body, t.html_body FROM mailroom.templates t
$$;

COMMENT ON FUNCTION mailroom.enqueue_templates() IS 'The stored templates, for an application that renders at enqueue (the Python API) without SELECT on mailroom.templates. Granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.enqueue_templates() FROM PUBLIC;

CREATE FUNCTION mailroom.from_refusals(from_email text[], stream text[]) RETURNS integer[]
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
    SELECT coalesce(array_agg(g.n ORDER BY g.n), '{}')
    FROM unnest(from_email, stream) WITH ORDINALITY AS g(f, s, n)
    WHERE g.f IS NOT NULL
      AND NOT EXISTS (
          SELECT FROM mailroom.sender_accounts a
          WHERE g.s = ANY(a.streams)
            AND lower(split_part(g.f, '@', 2)) = ANY(mailroom.sender_from_domains(a.from_domains, a.from_email)))
$$;

COMMENT ON FUNCTION mailroom.from_refusals(from_email text[], stream text[]) IS 'The places (from 1) of the (From, stream) pairs that no sender account serving the stream may send: their From domain is none of its from_domains. Granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.from_refusals(from_email text[], stream text[]) FROM PUBLIC;

CREATE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_rows TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_templates() TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.campaign_mail_policy(text) TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.schema_revision() TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_outcome TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.cancel_my_email TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.from_refusals TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.app_audit TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;

COMMENT ON FUNCTION mailroom.grant_app_role(role_name name) IS 'Let an existing role enqueue through every door (mailroom.enqueue from SQL; mailroom.enqueue_rows, enqueue_templates and campaign_mail_policy for the Python API), read and cancel its own email (mailroom.my_emails, enqueue_outcome, cancel_my_email), the schema''s revision, and write app.* audit rows; no table.';

CREATE FUNCTION mailroom.grant_read_only_role(role_name name) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

COMMENT ON FUNCTION mailroom.grant_read_only_role(role_name name) IS 'Let an existing role read every table but the secret columns; idempotent, and revokes what became secret since.';

CREATE FUNCTION mailroom.is_secret_column(table_name name, column_name name) RETURNS boolean
    LANGUAGE sql IMMUTABLE
    AS $$
    SELECT EXISTS (SELECT FROM mailroom.secret_columns() s
                   WHERE s.table_name = is_secret_column.table_name AND s.column_name = is_secret_column.column_name)
        OR column_name = 'token' OR column_name LIKE '%\_token' OR column_name LIKE '%secret%'
        OR column_name LIKE '%\_encrypted'
$$;

COMMENT ON FUNCTION mailroom.is_secret_column(table_name name, column_name name) IS 'Whether a read-only role is refused this column: listed in mailroom.secret_columns(), or named like a token or secret.';

CREATE FUNCTION mailroom.secret_columns() RETURNS TABLE(table_name name, column_name name)
    LANGUAGE sql IMMUTABLE
    AS $$
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
           ('inbox', 'payload'),
           ('attachment_contents', 'content'), ('email_attachments', 'filename'),
           ('webhook_endpoints', 'url'), ('webhook_events', 'data')
$$;

COMMENT ON FUNCTION mailroom.secret_columns() IS 'Columns no read-only role sees: encrypted secrets, one-time codes, tokens, bodies and raw reports.';
