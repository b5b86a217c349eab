-- The whole mailroom schema as the migrations leave it (generated; do not edit), by area: each table
-- with its comments, constraints, indexes and triggers. Read it; the migrations are what build it.
-- Regenerate after adding a revision: python -m worker.core.schema > migrations/schema.sql


CREATE SCHEMA mailroom;

-- == schema and shared functions ==

-- alembic_version

CREATE TABLE mailroom.alembic_version (
    version_num character varying(32) NOT NULL
);

ALTER TABLE ONLY mailroom.alembic_version
    ADD CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num);

-- functions

CREATE FUNCTION mailroom.clock() RETURNS timestamp with time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(current_setting('mailroom.now', true), '')::timestamptz, now())
$$;

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

CREATE FUNCTION mailroom.notify_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('mailroom_changes', json_build_object('table', TG_TABLE_NAME, 'op', TG_OP)::text);
    RETURN NULL;
END $$;

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
    CONSTRAINT email_queue_assigned_has_lease CHECK (((status = 'assigned'::text) = ((lease_token IS NOT NULL) AND (lease_owner IS NOT NULL) AND (lease_expires_at IS NOT NULL)))),
    CONSTRAINT email_queue_campaign_id_length CHECK (((length(campaign_id) >= 1) AND (length(campaign_id) <= 100))),
    CONSTRAINT email_queue_failed_has_error CHECK (((status <> 'failed'::text) OR (last_error IS NOT NULL))),
    CONSTRAINT email_queue_finished_has_finished_at CHECK (((status <> ALL (ARRAY['sent'::text, 'failed'::text, 'cancelled'::text, 'suppressed'::text])) OR (finished_at IS NOT NULL))),
    CONSTRAINT email_queue_has_body_or_template CHECK (((text_body IS NOT NULL) OR (html_body IS NOT NULL) OR ((template IS NOT NULL) AND (status = ANY (ARRAY['unrendered'::text, 'failed'::text, 'cancelled'::text]))))),
    CONSTRAINT email_queue_headers_object CHECK ((jsonb_typeof(headers) = 'object'::text)),
    CONSTRAINT email_queue_idempotency_key_length CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255))),
    CONSTRAINT email_queue_max_retries_range CHECK (((max_retries >= 0) AND (max_retries <= 100))),
    CONSTRAINT email_queue_priority_range CHECK (((priority >= '-1000'::integer) AND (priority <= 1000))),
    CONSTRAINT email_queue_retries_within_max CHECK ((retry_count <= max_retries)),
    CONSTRAINT email_queue_retry_count_not_negative CHECK ((retry_count >= 0)),
    CONSTRAINT email_queue_sent_at_matches_status CHECK (((status = ANY (ARRAY['sent'::text, 'bounced'::text])) = (sent_at IS NOT NULL))),
    CONSTRAINT email_queue_status_known CHECK ((status = ANY (ARRAY['unrendered'::text, 'pending'::text, 'assigned'::text, 'sent'::text, 'failed'::text, 'cancelled'::text, 'suppressed'::text, 'bounced'::text]))),
    CONSTRAINT email_queue_suppressed_has_reason CHECK (((status <> 'suppressed'::text) OR (suppression_reason IS NOT NULL))),
    CONSTRAINT email_queue_unrendered_has_template CHECK (((status <> 'unrendered'::text) OR (template IS NOT NULL)))
);

COMMENT ON COLUMN mailroom.email_queue.enqueued_by IS 'The database role that enqueued this email (session_user): the scope of its idempotency key and of mailroom.my_emails.';

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

CREATE INDEX email_queue_claim_idx ON mailroom.email_queue USING btree (priority DESC, scheduled_for, id) WHERE (status = 'pending'::text);

CREATE INDEX email_queue_due_idx ON mailroom.email_queue USING btree (scheduled_for) WHERE (status = 'pending'::text);

CREATE UNIQUE INDEX email_queue_enqueued_by_idempotency_key_key ON mailroom.email_queue USING btree (enqueued_by, idempotency_key) WHERE (idempotency_key IS NOT NULL);

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

CREATE FUNCTION mailroom.email_queue_before_update() RETURNS trigger
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

CREATE FUNCTION mailroom.email_queue_notify_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('mailroom_queue', 'insert');
    PERFORM pg_notify('mailroom_changes', json_build_object('table', 'email_queue', 'op', TG_OP)::text);
    RETURN NULL;
END $$;

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

CREATE TRIGGER email_queue_before_insert BEFORE INSERT ON mailroom.email_queue FOR EACH ROW WHEN (((new.scheduled_for IS NULL) OR (new.status <> 'pending'::text))) EXECUTE FUNCTION mailroom.email_queue_before_insert();

CREATE TRIGGER email_queue_before_update BEFORE UPDATE ON mailroom.email_queue FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_before_update();

CREATE TRIGGER email_queue_content_rules_insert AFTER INSERT ON mailroom.email_queue REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_content_rules_insert();

CREATE TRIGGER email_queue_content_rules_update BEFORE UPDATE OF recipient_email, recipient_name, subject, text_body, html_body, headers, to_extra, cc, bcc, reply_to ON mailroom.email_queue FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_content_rules_update();

CREATE TRIGGER email_queue_keep_archived AFTER DELETE ON mailroom.email_queue REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_keep_archived();

CREATE TRIGGER email_queue_keep_archived_one_recipient AFTER DELETE ON mailroom.email_queue REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_archive_no_shared_token();

CREATE TRIGGER email_queue_notify_delete AFTER DELETE ON mailroom.email_queue FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER email_queue_notify_insert AFTER INSERT ON mailroom.email_queue FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_notify_insert();

CREATE TRIGGER email_queue_notify_update AFTER UPDATE ON mailroom.email_queue REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_notify_update();

CREATE TRIGGER email_queue_reminder_outcome AFTER UPDATE OF status ON mailroom.email_queue FOR EACH ROW WHEN (((new.reference_type = 'reminder_log'::text) AND (new.status IS DISTINCT FROM old.status) AND (new.status <> 'assigned'::text) AND (new.reference_id ~ '^[0-9]{1,18}$'::text))) EXECUTE FUNCTION mailroom.reminder_logs_follow_email();

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

CREATE INDEX sent_journal_token_idx ON mailroom.sent_journal USING btree (lease_token);

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

CREATE INDEX send_logs_email_idx ON ONLY mailroom.send_logs USING btree (email_id, attempted_at);

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

ALTER TABLE ONLY mailroom.send_logs ATTACH PARTITION mailroom.send_logs_default DEFAULT;

ALTER TABLE ONLY mailroom.send_logs_default
    ADD CONSTRAINT send_logs_default_pkey PRIMARY KEY (id, attempted_at);

CREATE INDEX send_logs_default_attempted_at_idx ON mailroom.send_logs_default USING btree (attempted_at);

CREATE INDEX send_logs_default_email_id_attempted_at_idx ON mailroom.send_logs_default USING btree (email_id, attempted_at);

CREATE INDEX send_logs_default_sender_account_id_attempted_at_idx ON mailroom.send_logs_default USING btree (sender_account_id, attempted_at);

ALTER INDEX mailroom.send_logs_attempted_idx ATTACH PARTITION mailroom.send_logs_default_attempted_at_idx;

ALTER INDEX mailroom.send_logs_email_idx ATTACH PARTITION mailroom.send_logs_default_email_id_attempted_at_idx;

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

ALTER TABLE ONLY mailroom.archived_emails
    ADD CONSTRAINT archived_emails_pkey PRIMARY KEY (email_id);

CREATE INDEX archived_emails_campaign_idx ON mailroom.archived_emails USING btree (campaign_id) WHERE (campaign_id IS NOT NULL);

CREATE INDEX archived_emails_finished_at_idx ON mailroom.archived_emails USING brin (finished_at);

CREATE INDEX archived_emails_sent_at_idx ON mailroom.archived_emails USING brin (sent_at);

CREATE UNIQUE INDEX archived_emails_unsubscribe_token_idx ON mailroom.archived_emails USING btree (unsubscribe_token) WHERE (unsubscribe_token IS NOT NULL);

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

ALTER TABLE ONLY mailroom.templates
    ADD CONSTRAINT templates_pkey PRIMARY KEY (name, locale);

CREATE TRIGGER templates_touch BEFORE UPDATE ON mailroom.templates FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

-- workers

CREATE TABLE mailroom.workers (
    name text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    seen_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT workers_name_length CHECK (((length(name) >= 1) AND (length(name) <= 200)))
);

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

CREATE FUNCTION mailroom.apply_sent_journal(token uuid) RETURNS integer
    LANGUAGE sql
    AS $$
    WITH j AS (
        DELETE FROM mailroom.sent_journal WHERE lease_token = token RETURNING *
    ), done AS (
        UPDATE mailroom.email_queue q
        SET status = 'sent', sent_at = j.sent_at, message_id = coalesce(j.message_id, q.message_id),
            sender_account_id = j.sender_account_id
        FROM j
        WHERE q.id = j.email_id AND q.lease_token = j.lease_token AND q.status = 'assigned'
        RETURNING q.id, q.recipient_email, q.campaign_id, q.retry_count, j.sent_at, j.sender_account_id,
                  j.smtp_code, j.enhanced_code, j.response, j.duration_ms, j.worker
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

CREATE FUNCTION mailroom.content_rules() RETURNS jsonb
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$ SELECT  E'{"about": "What the database and the Python API both refuse in an email. One file: worker/core/rules.py loads it for Python, and revision 0006 writes it into the database''s checks (mailroom.content_rules() returns it). Patterns are written in the common subset of Python''s re and PostgreSQL''s regular expressions, without capturing groups or bounded repeats where they run per row (PostgreSQL''s engine is many times slower with them); an address is also at most max_local_chars before the @ and has no domain label of 64 characters; a change here needs a revision that installs it again.", "forbidden_in_headers": "[\\\\x00-\\\\x1f\\\\x7f\\\\x85\\\\u2028\\\\u2029]", "encoded_word": "=\\\\?[^?\\\\s]+\\\\?[BbQq]\\\\?[^?\\\\s]*\\\\?=", "header_name": "^[!-9;-~]{1,76}$", "address": "^[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+(?:\\\\.[A-Za-z0-9!#$%&''*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\\\.)+[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?$", "address_long_label": "[A-Za-z0-9-]{64}", "max_local_chars": 64, "max_address_chars": 254, "reserved_headers": ["from", "to", "cc", "bcc", "reply-to", "subject", "date", "message-id", "mime-version", "content-type", "content-transfer-encoding", "content-disposition", "return-path", "received", "sender", "dkim-signature", "list-unsubscribe", "list-unsubscribe-post"], "stored_by_mailroom": ["list-unsubscribe", "list-unsubscribe-post"], "about_reserved_headers": "Reserved headers (revision 0008 installs the relay and trace lists): those Mailroom writes itself (reserved_headers, except stored_by_mailroom, which its tracking stores at enqueue), and those that steer a relay or that receiving servers write to record a message''s path and authentication (relay_and_trace_headers, and every name starting with one of relay_and_trace_header_prefixes): an application setting them could change how a relay handles or reports an email (SendGrid''s bypass_list_management, Postmark''s metadata that names the email in its webhooks) or forge the trace a reader trusts.", "relay_and_trace_headers": ["x-smtpapi", "x-msys-api", "x-pm-message-stream", "x-pm-keepid", "authentication-results", "received-spf", "domainkey-signature", "delivered-to", "x-original-to", "x-forwarded-to", "errors-to"], "relay_and_trace_header_prefixes": ["x-pm-metadata-", "x-mailgun-", "x-ses-", "x-mc-", "x-sg-", "resent-", "arc-", "x-mailroom-"], "max_header_value_chars": 998, "max_name_chars": 255, "max_subject_chars": 998, "max_body_bytes": 26214400, "max_recipients": 100}'::jsonb $_$;

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
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

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

CREATE FUNCTION mailroom.normalise_address(address text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $_$
    -- The local part as given, the domain in lower case: what the Python API stores.
    SELECT CASE WHEN position('@' IN btrim(address)) > 0
        THEN regexp_replace(btrim(address), '@[^@]*$', '') || '@' || lower(regexp_replace(btrim(address), '^.*@', ''))
        ELSE btrim(address) END
$_$;

CREATE FUNCTION mailroom.normalise_addresses(addresses text[]) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN cardinality(addresses) > 0
        THEN ARRAY(SELECT mailroom.normalise_address(a) FROM unnest(addresses) WITH ORDINALITY AS x(a, i) ORDER BY i)
    END
$$;

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

CREATE FUNCTION mailroom.refuse_content(problem text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION '%', problem
        USING ERRCODE = 'check_violation', COLUMN = split_part(split_part(split_part(problem, ':', 1), '[', 1), '.', 1),
              TABLE = 'email_queue', SCHEMA = 'mailroom',
              HINT = 'mailroom.content_rules() shows the rules every writer of the queue obeys';
END $$;

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
    CONSTRAINT sender_accounts_auth_type_known CHECK ((auth_type = ANY (ARRAY['password'::text, 'oauth2'::text]))),
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
    CONSTRAINT sender_accounts_from_email_length CHECK (((length(from_email) >= 3) AND (length(from_email) <= 254))),
    CONSTRAINT sender_accounts_from_name_no_control_chars CHECK ((from_name !~ '[\x00-\x1f\x7f]'::text)),
    CONSTRAINT sender_accounts_limit_reached_on_matches_status CHECK (((status = 'paused_limit_reached'::text) = (limit_reached_on IS NOT NULL))),
    CONSTRAINT sender_accounts_max_connections_range CHECK (((max_connections >= 1) AND (max_connections <= 100))),
    CONSTRAINT sender_accounts_name_format CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$'::text)),
    CONSTRAINT sender_accounts_oauth2_complete CHECK (((auth_type <> 'oauth2'::text) OR ((oauth_token_url IS NOT NULL) AND (oauth_client_id IS NOT NULL) AND (oauth_client_secret_encrypted IS NOT NULL) AND (oauth_refresh_token_encrypted IS NOT NULL) AND (smtp_username IS NOT NULL) AND (smtp_password_encrypted IS NULL)))),
    CONSTRAINT sender_accounts_oauth_client_id_printable CHECK (((oauth_client_id ~ '^[\x21-\x7e]+$'::text) AND (length(oauth_client_id) <= 500))),
    CONSTRAINT sender_accounts_oauth_token_url_https_or_loopback CHECK ((((oauth_token_url ~ '^https://[^\s/?#@]+(/[^\s#]*)?$'::text) OR (oauth_token_url ~ '^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?(/[^\s#]*)?$'::text)) AND (length(oauth_token_url) <= 2000))),
    CONSTRAINT sender_accounts_open_circuit_has_retry_at CHECK (((circuit_state = 'closed'::text) OR (circuit_retry_at IS NOT NULL))),
    CONSTRAINT sender_accounts_password_has_no_oauth CHECK (((auth_type <> 'password'::text) OR ((oauth_token_url IS NULL) AND (oauth_client_id IS NULL) AND (oauth_client_secret_encrypted IS NULL) AND (oauth_refresh_token_encrypted IS NULL)))),
    CONSTRAINT sender_accounts_relay_provider_known CHECK ((relay_provider = ANY (ARRAY['postmark'::text, 'sendgrid'::text]))),
    CONSTRAINT sender_accounts_send_delay_ms_range CHECK (((send_delay_ms >= 0) AND (send_delay_ms <= 3600000))),
    CONSTRAINT sender_accounts_smtp_host_length CHECK (((length(smtp_host) >= 1) AND (length(smtp_host) <= 255))),
    CONSTRAINT sender_accounts_smtp_port_range CHECK (((smtp_port >= 1) AND (smtp_port <= 65535))),
    CONSTRAINT sender_accounts_smtp_security_known CHECK ((smtp_security = ANY (ARRAY['none'::text, 'starttls'::text, 'tls'::text]))),
    CONSTRAINT sender_accounts_status_known CHECK ((status = ANY (ARRAY['active'::text, 'paused'::text, 'suspended'::text, 'warming_up'::text, 'paused_limit_reached'::text]))),
    CONSTRAINT sender_accounts_warmup_has_limit CHECK (((warmup_stage = 0) OR (warmup_limit IS NOT NULL))),
    CONSTRAINT sender_accounts_warmup_limit_not_negative CHECK ((warmup_limit >= 0)),
    CONSTRAINT sender_accounts_warmup_stage_range CHECK (((warmup_stage >= 0) AND (warmup_stage <= 5)))
);

COMMENT ON COLUMN mailroom.sender_accounts.allow_plaintext_login IS 'The operator allowed this account to log in (password or OAuth2 token) over a connection without TLS to a host other than the loopback interface: the secret then crosses the network readable by anyone on the path.';

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

CREATE TRIGGER sender_accounts_before_update BEFORE UPDATE ON mailroom.sender_accounts FOR EACH ROW EXECUTE FUNCTION mailroom.sender_accounts_before_update();

CREATE TRIGGER sender_accounts_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.sender_accounts FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER sender_accounts_touch BEFORE UPDATE ON mailroom.sender_accounts FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

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

ALTER TABLE ONLY mailroom.sender_usage
    ADD CONSTRAINT sender_usage_pkey PRIMARY KEY (sender_account_id, day);

ALTER TABLE ONLY mailroom.sender_usage
    ADD CONSTRAINT sender_usage_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE CASCADE;

-- sender_pacing

CREATE TABLE mailroom.sender_pacing (
    sender_account_id bigint NOT NULL,
    next_send_at timestamp with time zone NOT NULL
);

ALTER TABLE ONLY mailroom.sender_pacing
    ADD CONSTRAINT sender_pacing_pkey PRIMARY KEY (sender_account_id);

ALTER TABLE ONLY mailroom.sender_pacing
    ADD CONSTRAINT sender_pacing_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE CASCADE;

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

CREATE TRIGGER bounce_events_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

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
    CONSTRAINT bounce_list_bounce_type_known CHECK ((bounce_type = ANY (ARRAY['hard'::text, 'soft'::text, 'complaint'::text]))),
    CONSTRAINT bounce_list_email_lowercase CHECK ((email = lower(email))),
    CONSTRAINT bounce_list_last_after_first CHECK ((last_bounced_at >= first_bounced_at))
);

ALTER TABLE ONLY mailroom.bounce_list
    ADD CONSTRAINT bounce_list_pkey PRIMARY KEY (email);

ALTER TABLE ONLY mailroom.bounce_list
    ADD CONSTRAINT bounce_list_sender_account_exists FOREIGN KEY (sender_account_id) REFERENCES mailroom.sender_accounts(id) ON DELETE SET NULL;

CREATE TRIGGER bounce_list_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_list FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

-- complaint_digests

CREATE TABLE mailroom.complaint_digests (
    id bigint NOT NULL,
    period_start timestamp with time zone NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    complaints integer NOT NULL,
    email_id bigint,
    CONSTRAINT complaint_digests_complaints_positive CHECK ((complaints > 0))
);

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

COMMENT ON COLUMN mailroom.bounce_quarantine.raw IS 'The first bytes of the message (64 KiB; raw_size says how long it was)';

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

CREATE TRIGGER bounce_quarantine_count_inserts AFTER INSERT ON mailroom.bounce_quarantine REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION mailroom.bounce_quarantine_count();

CREATE TRIGGER bounce_quarantine_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.bounce_quarantine FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

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

ALTER TABLE ONLY mailroom.unsubscribe_list
    ADD CONSTRAINT unsubscribe_list_pkey PRIMARY KEY (email);

CREATE INDEX unsubscribe_list_campaign_idx ON mailroom.unsubscribe_list USING btree (campaign_id) WHERE (campaign_id IS NOT NULL);

CREATE INDEX unsubscribe_list_unsubscribed_at_idx ON mailroom.unsubscribe_list USING btree (unsubscribed_at);

CREATE TRIGGER unsubscribe_list_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.unsubscribe_list FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

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

-- open_events_default

CREATE TABLE mailroom.open_events_default (
    id bigint CONSTRAINT open_events_id_not_null NOT NULL,
    occurred_at timestamp with time zone DEFAULT now() CONSTRAINT open_events_occurred_at_not_null NOT NULL,
    email_id bigint CONSTRAINT open_events_email_id_not_null NOT NULL,
    campaign_id text,
    ip_address inet,
    user_agent text
);

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

CREATE TRIGGER accounts_before_insert BEFORE INSERT ON mailroom.accounts FOR EACH ROW EXECUTE FUNCTION mailroom.accounts_before_insert();

CREATE TRIGGER accounts_before_status_change BEFORE UPDATE OF status ON mailroom.accounts FOR EACH ROW EXECUTE FUNCTION mailroom.accounts_before_status_change();

CREATE TRIGGER accounts_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.accounts FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER accounts_touch BEFORE UPDATE ON mailroom.accounts FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

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

CREATE FUNCTION mailroom.tokens_notify_mailer() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('mailroom_tokens', 'insert');
    RETURN NULL;
END $$;

CREATE TRIGGER tokens_after_consumed AFTER UPDATE OF consumed_at ON mailroom.tokens FOR EACH ROW WHEN (((new.consumed_at IS NOT NULL) AND (old.consumed_at IS NULL))) EXECUTE FUNCTION mailroom.tokens_after_consumed();

CREATE TRIGGER tokens_before_insert BEFORE INSERT ON mailroom.tokens FOR EACH ROW EXECUTE FUNCTION mailroom.tokens_before_insert();

CREATE TRIGGER tokens_before_update BEFORE UPDATE ON mailroom.tokens FOR EACH ROW EXECUTE FUNCTION mailroom.tokens_before_update();

CREATE TRIGGER tokens_created_at BEFORE UPDATE ON mailroom.tokens FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();

CREATE TRIGGER tokens_notify AFTER INSERT ON mailroom.tokens FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER tokens_notify_mailer AFTER INSERT ON mailroom.tokens FOR EACH STATEMENT EXECUTE FUNCTION mailroom.tokens_notify_mailer();

-- jobs

CREATE TABLE mailroom.jobs (
    name text NOT NULL,
    last_seq bigint DEFAULT 0 NOT NULL,
    last_run_at timestamp with time zone
);

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

CREATE FUNCTION mailroom.random_secret() RETURNS bytea
    LANGUAGE sql
    AS $$
    SELECT decode(md5(gen_random_uuid()::text || gen_random_uuid()::text)
                  || md5(gen_random_uuid()::text || gen_random_uuid()::text), 'hex')
$$;

CREATE FUNCTION mailroom.token_max_attempts() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT 5
$$;

CREATE FUNCTION mailroom.token_ttl() RETURNS interval
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(current_setting('mailroom.token_ttl', true), ''), '15 minutes')::interval
$$;

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

CREATE FUNCTION mailroom.people_bump_version() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.version = OLD.version THEN
        NEW.version := OLD.version + 1;
    END IF;
    RETURN NEW;
END $$;

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

CREATE TRIGGER people_after_insert AFTER INSERT ON mailroom.people REFERENCING NEW TABLE AS new_people FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_after_insert();

CREATE TRIGGER people_after_update AFTER UPDATE ON mailroom.people REFERENCING OLD TABLE AS old_people NEW TABLE AS new_people FOR EACH STATEMENT EXECUTE FUNCTION mailroom.people_after_update();

CREATE TRIGGER people_bump_version BEFORE UPDATE ON mailroom.people FOR EACH ROW EXECUTE FUNCTION mailroom.people_bump_version();

CREATE TRIGGER people_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.people FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER people_touch BEFORE UPDATE ON mailroom.people FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

CREATE TRIGGER people_validate BEFORE INSERT OR UPDATE OF time_zone, date_of_birth ON mailroom.people FOR EACH ROW EXECUTE FUNCTION mailroom.people_validate();

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
    CONSTRAINT events_completed_has_executed_at CHECK (((status <> 'completed'::text) OR (executed_at IS NOT NULL))),
    CONSTRAINT events_event_type_birthday CHECK ((event_type = 'birthday'::text)),
    CONSTRAINT events_failed_has_reason CHECK (((status <> 'failed'::text) OR (failure_reason IS NOT NULL))),
    CONSTRAINT events_retry_count_not_negative CHECK ((retry_count >= 0)),
    CONSTRAINT events_status_known CHECK ((status = ANY (ARRAY['pending'::text, 'processing'::text, 'completed'::text, 'failed'::text, 'missed'::text, 'cancelled'::text]))),
    CONSTRAINT events_version_positive CHECK ((version >= 1))
);

ALTER TABLE ONLY mailroom.events
    ADD CONSTRAINT events_idempotency_key_unique UNIQUE (idempotency_key);

ALTER TABLE ONLY mailroom.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);

ALTER TABLE ONLY mailroom.events
    ADD CONSTRAINT events_person_exists FOREIGN KEY (person_id) REFERENCES mailroom.people(id) ON DELETE CASCADE;

CREATE INDEX events_due_idx ON mailroom.events USING btree (due_at) WHERE (status = 'pending'::text);

CREATE UNIQUE INDEX events_one_pending_idx ON mailroom.events USING btree (person_id, event_type) WHERE (status = ANY (ARRAY['pending'::text, 'processing'::text]));

CREATE INDEX events_person_idx ON mailroom.events USING btree (person_id);

CREATE INDEX events_processing_idx ON mailroom.events USING btree (updated_at) WHERE (status = 'processing'::text);

CREATE TRIGGER events_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER events_touch BEFORE UPDATE ON mailroom.events FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

-- time_zone_names

CREATE TABLE mailroom.time_zone_names (
    name text NOT NULL
);

ALTER TABLE ONLY mailroom.time_zone_names
    ADD CONSTRAINT time_zone_names_pkey PRIMARY KEY (name);

-- functions

CREATE FUNCTION mailroom.birthday_in(dob date, year integer) RETURNS date
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT (dob + make_interval(years => year - extract(year FROM dob)::integer))::date
$$;

CREATE FUNCTION mailroom.birthday_time() RETURNS time without time zone
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(nullif(current_setting('mailroom.birthday_time', true), ''), '09:00')::time
$$;

CREATE FUNCTION mailroom.is_time_zone(zone text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (SELECT 1 FROM mailroom.time_zone_names WHERE name = zone)
        OR EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = zone)
$$;

CREATE FUNCTION mailroom.local_instant(day date, send_time time without time zone, zone text) RETURNS timestamp with time zone
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$
    SELECT (day + send_time) AT TIME ZONE zone
$$;

CREATE FUNCTION mailroom.new_event_id() RETURNS uuid
    LANGUAGE sql
    AS $$SELECT uuidv7()$$;

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

CREATE FUNCTION mailroom.next_birthday_of(person uuid, dob date, zone text, at timestamp with time zone) RETURNS date
    LANGUAGE sql STABLE
    AS $$
    SELECT mailroom.next_birthday(dob, greatest((at AT TIME ZONE zone)::date,
        (SELECT max(e.local_due_at)::date FROM mailroom.events e
         WHERE e.person_id = person AND e.event_type = 'birthday'
           AND e.status IN ('completed', 'missed', 'failed')) + 1))
$$;

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
                   WHERE e.event_type = 'birthday' AND e.status IN ('completed', 'missed', 'failed')
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

ALTER TABLE ONLY mailroom.inbox
    ADD CONSTRAINT inbox_pkey PRIMARY KEY (message_id, consumer);

CREATE INDEX inbox_received_idx ON mailroom.inbox USING btree (received_at);

CREATE TRIGGER inbox_notify AFTER INSERT OR UPDATE ON mailroom.inbox FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

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
    CONSTRAINT documents_checksum_algorithm_known CHECK ((checksum_algorithm = ANY (ARRAY['SHA-256'::text, 'SHA-512'::text]))),
    CONSTRAINT documents_checksum_has_algorithm CHECK (((checksum IS NULL) = (checksum_algorithm IS NULL))),
    CONSTRAINT documents_checksum_hex CHECK ((checksum ~ '^[0-9a-f]{64}([0-9a-f]{64})?$'::text)),
    CONSTRAINT documents_checksum_length_fits_algorithm CHECK (((checksum IS NULL) OR ((checksum_algorithm = 'SHA-256'::text) AND (length(checksum) = 64)) OR ((checksum_algorithm = 'SHA-512'::text) AND (length(checksum) = 128)))),
    CONSTRAINT documents_doc_id_format CHECK ((doc_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'::text)),
    CONSTRAINT documents_url_http_or_empty CHECK (((url = ''::text) OR (url ~* '^https?://'::text)))
);

ALTER TABLE ONLY mailroom.documents
    ADD CONSTRAINT documents_pkey PRIMARY KEY (doc_id);

CREATE FUNCTION mailroom.documents_create_signature_head() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO mailroom.signature_heads (doc_id) VALUES (NEW.doc_id) ON CONFLICT (doc_id) DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER documents_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.documents FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER documents_signature_head AFTER INSERT ON mailroom.documents FOR EACH ROW EXECUTE FUNCTION mailroom.documents_create_signature_head();

CREATE TRIGGER documents_touch BEFORE UPDATE ON mailroom.documents FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

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
    CONSTRAINT signatures_nonce_min_length CHECK ((length(nonce) >= 16)),
    CONSTRAINT signatures_payload_hash_hex CHECK ((payload_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT signatures_prev_hash_hex CHECK ((prev_hash ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT signatures_seq_positive CHECK ((seq >= 1)),
    CONSTRAINT signatures_signer_email_lowercase CHECK ((signer_email = lower(signer_email)))
);

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

CREATE TRIGGER signatures_chain_head BEFORE INSERT ON mailroom.signatures FOR EACH ROW EXECUTE FUNCTION mailroom.signatures_advance_head();

CREATE TRIGGER signatures_created_at BEFORE UPDATE ON mailroom.signatures FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();

CREATE TRIGGER signatures_notify AFTER INSERT OR DELETE OR UPDATE ON mailroom.signatures FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TRIGGER signatures_refuse_change BEFORE DELETE OR UPDATE ON mailroom.signatures FOR EACH ROW EXECUTE FUNCTION mailroom.signatures_append_only();

CREATE TRIGGER signatures_refuse_truncate BEFORE TRUNCATE ON mailroom.signatures FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signatures_append_only();

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

CREATE TRIGGER signature_heads_guard BEFORE INSERT OR DELETE OR UPDATE ON mailroom.signature_heads FOR EACH ROW EXECUTE FUNCTION mailroom.signature_heads_guard();

CREATE TRIGGER signature_heads_no_truncate BEFORE TRUNCATE ON mailroom.signature_heads FOR EACH STATEMENT EXECUTE FUNCTION mailroom.signature_heads_guard();

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

-- functions

CREATE FUNCTION mailroom.signature_link_hash(payload_hash text, signature text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$
    SELECT encode(sha256(convert_to(payload_hash || ':' || signature, 'UTF8')), 'hex')
$$;

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

CREATE FUNCTION mailroom.signature_maintenance_allows(doc text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $_$
    SELECT EXISTS (
        SELECT 1 FROM mailroom.audit_log a
        WHERE a.id = CASE WHEN current_setting('mailroom.signature_maintenance', true) ~ '^[0-9]{1,18}$'
                          THEN current_setting('mailroom.signature_maintenance', true)::bigint END
          AND a.action = 'signatures.maintenance' AND a.target = doc AND a.at >= now())
$_$;

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

CREATE FUNCTION mailroom.audit_log_chain() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
DECLARE
    head record;
BEGIN
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

COMMENT ON FUNCTION mailroom.audit_log_chain() IS 'Chains each new audit row (seq, prev_hash, row_hash) and moves mailroom.audit_chain, under its row lock';

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON mailroom.audit_log FOR EACH ROW EXECUTE FUNCTION mailroom.audit_log_append_only();

CREATE TRIGGER audit_log_chain BEFORE INSERT ON mailroom.audit_log FOR EACH ROW EXECUTE FUNCTION mailroom.audit_log_chain();

CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON mailroom.audit_log FOR EACH STATEMENT EXECUTE FUNCTION mailroom.audit_log_append_only();

CREATE TRIGGER audit_log_notify AFTER INSERT ON mailroom.audit_log FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

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

CREATE TRIGGER audit_chain_guard BEFORE INSERT OR DELETE OR UPDATE ON mailroom.audit_chain FOR EACH ROW EXECUTE FUNCTION mailroom.audit_chain_guard();

CREATE TRIGGER audit_chain_no_truncate BEFORE TRUNCATE ON mailroom.audit_chain FOR EACH STATEMENT EXECUTE FUNCTION mailroom.audit_chain_guard();

-- functions

CREATE FUNCTION mailroom.audit(action text, actor text, target text DEFAULT NULL::text, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'::jsonb) RETURNS bigint
    LANGUAGE sql
    AS $$
    INSERT INTO mailroom.audit_log (actor, action, target, affected, detail)
    VALUES (coalesce(nullif(left(actor, 200), ''), session_user), action, left(target, 500),
            coalesce(affected, 0), coalesce(detail, '{}'))
    RETURNING id
$$;

CREATE FUNCTION mailroom.audit_field(value text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT CASE WHEN value IS NULL THEN '-,'
                ELSE octet_length(convert_to(value, 'UTF8'))::text || ':' || value || ',' END
$$;

COMMENT ON FUNCTION mailroom.audit_field(value text) IS 'One field of an audit row''s canonical encoding: <UTF-8 byte length>:<text>, and NULL as -,';

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
    suppression_reason
   FROM mailroom.email_queue
  WHERE (enqueued_by = SESSION_USER);

-- functions

CREATE FUNCTION mailroom.app_audit(action text, actor text, target text DEFAULT NULL::text, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'::jsonb) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $$
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

COMMENT ON FUNCTION mailroom.app_audit(action text, actor text, target text, affected bigint, detail jsonb) IS 'Record an application''s own audit row (action app.*); granted to application roles by mailroom.grant_app_role.';

REVOKE ALL ON FUNCTION mailroom.app_audit(action text, actor text, target text, affected bigint, detail jsonb) FROM PUBLIC;

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

REVOKE ALL ON FUNCTION mailroom.enqueue(recipients text[], subject text, text_body text, html_body text, to_name text, cc text[], bcc text[], reply_to text[], headers jsonb, idempotency_key text, scheduled_for timestamp with time zone, priority integer, max_retries integer, reference_type text, reference_id text, template text, template_data jsonb, locale text) FROM PUBLIC;

CREATE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.app_audit TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;

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
           ('inbox', 'payload')
$$;
