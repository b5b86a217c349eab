-- Mailroom's whole data model, revision 0001. Everything lives in the `mailroom` schema.
-- Frozen once released: later revisions change the schema, never this file.

-- ---------------------------------------------------------------------------
-- Shared helpers
-- ---------------------------------------------------------------------------

-- updated_at follows every change; created_at can never be rewritten.
CREATE FUNCTION mailroom.touch_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of %.% is immutable', TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END $$;

CREATE FUNCTION mailroom.forbid_created_at_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of %.% is immutable', TG_TABLE_SCHEMA, TG_TABLE_NAME
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

-- One small payload per statement: which table changed and how. Listeners re-read what they need.
CREATE FUNCTION mailroom.notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mailroom_changes', json_build_object('table', TG_TABLE_NAME, 'op', TG_OP)::text);
    RETURN NULL;
END $$;

-- 32 random bytes from core PostgreSQL's CSPRNG (gen_random_uuid draws from pg_strong_random).
CREATE FUNCTION mailroom.random_secret() RETURNS bytea LANGUAGE sql VOLATILE AS $$
    SELECT decode(md5(gen_random_uuid()::text || gen_random_uuid()::text)
                  || md5(gen_random_uuid()::text || gen_random_uuid()::text), 'hex')
$$;

-- A uniformly random 5-digit code: rejection sampling over 32 random bits, never 100000.
CREATE FUNCTION mailroom.random_code() RETURNS text LANGUAGE plpgsql VOLATILE AS $$
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

-- Creates the monthly partitions of a partitioned table from `start_month` for `months` months.
CREATE FUNCTION mailroom.ensure_month_partitions(parent text, start_month date, months integer)
RETURNS integer LANGUAGE plpgsql AS $$
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

-- ---------------------------------------------------------------------------
-- Delivery core (reference 05)
-- ---------------------------------------------------------------------------

CREATE TABLE mailroom.sender_accounts (
    id                          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                        text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9_.@-]{0,99}$'),
    from_email                  text NOT NULL CHECK (length(from_email) BETWEEN 3 AND 254),
    from_name                   text CHECK (from_name !~ '[\x00-\x1f\x7f]'),
    smtp_host                   text NOT NULL CHECK (length(smtp_host) BETWEEN 1 AND 255),
    smtp_port                   integer NOT NULL CHECK (smtp_port BETWEEN 1 AND 65535),
    smtp_security               text NOT NULL DEFAULT 'starttls'
                                CHECK (smtp_security IN ('none', 'starttls', 'tls')),
    smtp_username               text,
    smtp_password_encrypted     bytea,
    daily_limit                 integer NOT NULL DEFAULT 2000 CHECK (daily_limit >= 0),
    -- 0 = warm-up finished; 1..5 = stage, with warmup_limit the day's cap while warming up.
    warmup_stage                integer NOT NULL DEFAULT 0 CHECK (warmup_stage BETWEEN 0 AND 5),
    warmup_limit                integer CHECK (warmup_limit >= 0),
    send_delay_ms               integer NOT NULL DEFAULT 0 CHECK (send_delay_ms BETWEEN 0 AND 3600000),
    max_connections             integer NOT NULL DEFAULT 4 CHECK (max_connections BETWEEN 1 AND 100),
    status                      text NOT NULL DEFAULT 'active'
                                CHECK (status IN ('active', 'paused', 'suspended', 'warming_up',
                                                  'paused_limit_reached')),
    status_reason               text,
    status_changed_at           timestamptz NOT NULL DEFAULT now(),
    -- the UTC day paused_limit_reached applies to: the account is usable again on any later day
    limit_reached_on            date,
    dkim_domain                 text,
    dkim_selector               text,
    dkim_private_key_encrypted  bytea,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    updated_at                  timestamptz NOT NULL DEFAULT now(),
    last_used_at                timestamptz,
    version                     integer NOT NULL DEFAULT 1,
    CHECK (warmup_stage = 0 OR warmup_limit IS NOT NULL),
    CHECK ((status = 'paused_limit_reached') = (limit_reached_on IS NOT NULL)),
    CHECK ((dkim_domain IS NULL) = (dkim_selector IS NULL)
           AND (dkim_domain IS NULL) = (dkim_private_key_encrypted IS NULL))
);

CREATE FUNCTION mailroom.sender_accounts_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE TRIGGER sender_accounts_touch BEFORE UPDATE ON mailroom.sender_accounts
    FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();
CREATE TRIGGER sender_accounts_before_update BEFORE UPDATE ON mailroom.sender_accounts
    FOR EACH ROW EXECUTE FUNCTION mailroom.sender_accounts_before_update();

-- Per-UTC-day counters keyed by date: a new day starts at zero without any cron.
CREATE TABLE mailroom.sender_usage (
    sender_account_id   bigint NOT NULL REFERENCES mailroom.sender_accounts (id) ON DELETE CASCADE,
    day                 date NOT NULL,
    sent                integer NOT NULL DEFAULT 0 CHECK (sent >= 0),
    bounces             integer NOT NULL DEFAULT 0 CHECK (bounces >= 0),
    errors              integer NOT NULL DEFAULT 0 CHECK (errors >= 0),
    PRIMARY KEY (sender_account_id, day)
);

-- Reserve up to `wanted` sends of today's (UTC) quota; returns how many were granted (0 when none).
-- The sender row lock serialises reservations, so any number of workers never exceed the limit.
-- An account paused at its limit on an earlier day is usable again: no cron resets anything.
CREATE FUNCTION mailroom.reserve_quota(sender bigint, wanted integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
    acct mailroom.sender_accounts%ROWTYPE;
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
        UPDATE mailroom.sender_accounts SET status = acct.status, status_reason = NULL WHERE id = sender;
    END IF;
    IF acct.status NOT IN ('active', 'warming_up') THEN
        RETURN 0;
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

-- Give back reserved sends that did not happen (transient failure, released on shutdown, ...).
CREATE FUNCTION mailroom.release_quota(sender bigint, unused integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    today date := (now() AT TIME ZONE 'UTC')::date;
BEGIN
    IF unused <= 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM mailroom.sender_accounts WHERE id = sender FOR UPDATE;
    UPDATE mailroom.sender_usage SET sent = greatest(0, sent - unused)
    WHERE sender_account_id = sender AND day = today;
    UPDATE mailroom.sender_accounts
    SET status = CASE WHEN warmup_stage > 0 THEN 'warming_up' ELSE 'active' END, status_reason = NULL
    WHERE id = sender AND status = 'paused_limit_reached' AND limit_reached_on = today;
END $$;

CREATE TABLE mailroom.email_queue (
    id                  bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    recipient_email     text NOT NULL CHECK (length(recipient_email) BETWEEN 3 AND 254
                                             AND recipient_email !~ '[\x00-\x20\x7f<>]'),
    recipient_name      text CHECK (recipient_name !~ '[\x00-\x1f\x7f]'),
    subject             text NOT NULL CHECK (subject !~ '[\x00-\x1f\x7f]'),
    text_body           text,
    html_body           text,
    headers             jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    -- provenance: what the content was rendered from
    template            text,
    locale              text,
    template_data       jsonb,
    priority            integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
    scheduled_for       timestamptz NOT NULL DEFAULT now(),
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'assigned', 'sent', 'failed', 'cancelled', 'suppressed')),
    lease_owner         text,
    lease_token         uuid,
    lease_expires_at    timestamptz,
    sender_account_id   bigint REFERENCES mailroom.sender_accounts (id) ON DELETE SET NULL,
    retry_count         integer NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_retries         integer NOT NULL DEFAULT 5 CHECK (max_retries BETWEEN 0 AND 100),
    next_retry_at       timestamptz,
    last_error          text,
    error_details       jsonb,
    suppression_reason  text,
    idempotency_key     text UNIQUE CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    campaign_id         text CHECK (length(campaign_id) BETWEEN 1 AND 100),
    transactional       boolean NOT NULL DEFAULT true,
    track_opens         boolean NOT NULL DEFAULT false,
    track_clicks        boolean NOT NULL DEFAULT false,
    tracking_token      uuid,
    reference_type      text,
    reference_id        text,
    message_id          text,
    created_by          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    assigned_at         timestamptz,
    sent_at             timestamptz,
    finished_at         timestamptz,
    CHECK (text_body IS NOT NULL OR html_body IS NOT NULL),
    CHECK (retry_count <= max_retries),
    -- a lease exists exactly while the email is assigned
    CHECK ((status = 'assigned') = (lease_token IS NOT NULL AND lease_owner IS NOT NULL
                                    AND lease_expires_at IS NOT NULL)),
    CHECK ((status = 'sent') = (sent_at IS NOT NULL)),
    CHECK (status <> 'suppressed' OR suppression_reason IS NOT NULL),
    CHECK (status NOT IN ('sent', 'failed', 'cancelled', 'suppressed') OR finished_at IS NOT NULL),
    CHECK (status <> 'failed' OR last_error IS NOT NULL)
);

-- Status transitions and their timestamps, enforced where every writer goes through them.
CREATE FUNCTION mailroom.email_queue_before_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'created_at of mailroom.email_queue is immutable' USING ERRCODE = 'check_violation';
    END IF;
    NEW.updated_at := now();
    IF NEW.status IS DISTINCT FROM OLD.status THEN
        IF NOT (
            (OLD.status = 'pending'    AND NEW.status IN ('assigned', 'cancelled', 'suppressed'))
         OR (OLD.status = 'assigned'   AND NEW.status IN ('pending', 'sent', 'failed', 'suppressed'))
         OR (OLD.status = 'failed'     AND NEW.status IN ('pending', 'cancelled'))
         OR (OLD.status = 'suppressed' AND NEW.status IN ('pending', 'cancelled'))
        ) THEN
            RAISE EXCEPTION 'email % cannot move from % to %', OLD.id, OLD.status, NEW.status
                USING ERRCODE = 'check_violation';
        END IF;
        CASE NEW.status
            WHEN 'assigned' THEN NEW.assigned_at := now();
            WHEN 'sent' THEN NEW.sent_at := coalesce(NEW.sent_at, now()); NEW.finished_at := now();
            WHEN 'pending' THEN NEW.finished_at := NULL; NEW.suppression_reason := NULL;
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

CREATE FUNCTION mailroom.email_queue_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Bulk COPY sends NULL for "now": the database clock decides, not the client's.
    NEW.scheduled_for := coalesce(NEW.scheduled_for, now());
    IF NEW.status <> 'pending' THEN
        RAISE EXCEPTION 'a new email starts pending, not %', NEW.status USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER email_queue_before_insert BEFORE INSERT ON mailroom.email_queue
    FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_before_insert();
CREATE TRIGGER email_queue_before_update BEFORE UPDATE ON mailroom.email_queue
    FOR EACH ROW EXECUTE FUNCTION mailroom.email_queue_before_update();

-- Wake workers only when something may be claimable: new email, or email that went back to pending.
CREATE FUNCTION mailroom.email_queue_notify_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mailroom_queue', 'insert');
    PERFORM pg_notify('mailroom_changes', json_build_object('table', 'email_queue', 'op', TG_OP)::text);
    RETURN NULL;
END $$;

CREATE FUNCTION mailroom.email_queue_notify_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM new_rows WHERE status = 'pending') THEN
        PERFORM pg_notify('mailroom_queue', 'pending');
    END IF;
    PERFORM pg_notify('mailroom_changes', json_build_object('table', 'email_queue', 'op', TG_OP)::text);
    RETURN NULL;
END $$;

CREATE TRIGGER email_queue_notify_insert AFTER INSERT ON mailroom.email_queue
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_notify_insert();
CREATE TRIGGER email_queue_notify_update AFTER UPDATE ON mailroom.email_queue
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.email_queue_notify_update();
CREATE TRIGGER email_queue_notify_delete AFTER DELETE ON mailroom.email_queue
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

-- Hot paths stay independent of history: every index below covers only an active set.
CREATE INDEX email_queue_claim_idx ON mailroom.email_queue (priority DESC, scheduled_for, id)
    WHERE status = 'pending';
-- A retry moves scheduled_for to its next_retry_at, so "when is anything due next" is one index probe.
CREATE INDEX email_queue_due_idx ON mailroom.email_queue (scheduled_for)
    WHERE status = 'pending';
CREATE INDEX email_queue_lease_idx ON mailroom.email_queue (lease_expires_at)
    WHERE status = 'assigned';
CREATE INDEX email_queue_failed_idx ON mailroom.email_queue (finished_at DESC)
    WHERE status = 'failed';
CREATE INDEX email_queue_suppressed_idx ON mailroom.email_queue (finished_at DESC)
    WHERE status = 'suppressed';
CREATE INDEX email_queue_sent_idx ON mailroom.email_queue (sent_at)
    WHERE status = 'sent';
CREATE INDEX email_queue_recipient_idx ON mailroom.email_queue (lower(recipient_email));
CREATE INDEX email_queue_campaign_idx ON mailroom.email_queue (campaign_id) WHERE campaign_id IS NOT NULL;
CREATE INDEX email_queue_reference_idx ON mailroom.email_queue (reference_type, reference_id)
    WHERE reference_type IS NOT NULL;
CREATE UNIQUE INDEX email_queue_tracking_token_idx ON mailroom.email_queue (tracking_token)
    WHERE tracking_token IS NOT NULL;

-- Every attempt, partitioned by month; partitions are made ahead by maintenance.
CREATE TABLE mailroom.send_logs (
    id                  bigint GENERATED ALWAYS AS IDENTITY,
    attempted_at        timestamptz NOT NULL DEFAULT now(),
    email_id            bigint NOT NULL,
    sender_account_id   bigint,
    recipient_email     text NOT NULL,
    campaign_id         text,
    attempt             integer NOT NULL CHECK (attempt >= 1),
    outcome             text NOT NULL
                        CHECK (outcome IN ('sent', 'transient', 'permanent', 'bounced', 'auth_failed',
                                           'local_error', 'suppressed')),
    smtp_code           integer CHECK (smtp_code BETWEEN 100 AND 599),
    enhanced_code       text CHECK (enhanced_code ~ '^[245]\.\d{1,3}\.\d{1,3}$'),
    response            text,
    duration_ms         integer CHECK (duration_ms >= 0),
    worker              text,
    PRIMARY KEY (id, attempted_at)
) PARTITION BY RANGE (attempted_at);
CREATE INDEX send_logs_email_idx ON mailroom.send_logs (email_id, attempted_at);
CREATE INDEX send_logs_attempted_idx ON mailroom.send_logs (attempted_at);
CREATE INDEX send_logs_sender_idx ON mailroom.send_logs (sender_account_id, attempted_at);
CREATE TABLE mailroom.send_logs_default PARTITION OF mailroom.send_logs DEFAULT;

CREATE TABLE mailroom.bounce_list (
    email               text PRIMARY KEY CHECK (email = lower(email)),
    bounce_type         text NOT NULL CHECK (bounce_type IN ('hard', 'soft', 'complaint')),
    reason              text,
    smtp_code           integer,
    enhanced_code       text,
    sender_account_id   bigint REFERENCES mailroom.sender_accounts (id) ON DELETE SET NULL,
    campaign_id         text,
    first_bounced_at    timestamptz NOT NULL DEFAULT now(),
    last_bounced_at     timestamptz NOT NULL DEFAULT now(),
    bounce_count        integer NOT NULL DEFAULT 1 CHECK (bounce_count >= 1),
    CHECK (last_bounced_at >= first_bounced_at)
);

CREATE TABLE mailroom.unsubscribe_list (
    email               text PRIMARY KEY CHECK (email = lower(email)),
    reason              text,
    source              text NOT NULL DEFAULT 'operator'
                        CHECK (source IN ('one_click', 'link', 'mailto', 'operator', 'import', 'privacy')),
    campaign_id         text,
    email_id            bigint,
    user_agent          text,
    ip_address          inet,
    unsubscribed_at     timestamptz NOT NULL DEFAULT now()
);

-- Click destinations are stored per link: the tracker never redirects to a URL from a request.
CREATE TABLE mailroom.tracked_links (
    token               uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email_id            bigint NOT NULL REFERENCES mailroom.email_queue (id) ON DELETE CASCADE,
    position            integer NOT NULL CHECK (position >= 0),
    url                 text NOT NULL CHECK (url ~* '^https?://'),
    UNIQUE (email_id, position)
);

CREATE TABLE mailroom.open_events (
    id                  bigint GENERATED ALWAYS AS IDENTITY,
    occurred_at         timestamptz NOT NULL DEFAULT now(),
    email_id            bigint NOT NULL,
    campaign_id         text,
    ip_address          inet,
    user_agent          text,
    PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);
CREATE INDEX open_events_email_idx ON mailroom.open_events (email_id);
CREATE INDEX open_events_campaign_idx ON mailroom.open_events (campaign_id, occurred_at);
CREATE TABLE mailroom.open_events_default PARTITION OF mailroom.open_events DEFAULT;

CREATE TABLE mailroom.click_events (
    id                  bigint GENERATED ALWAYS AS IDENTITY,
    occurred_at         timestamptz NOT NULL DEFAULT now(),
    email_id            bigint NOT NULL,
    link_token          uuid NOT NULL,
    url                 text NOT NULL,
    campaign_id         text,
    ip_address          inet,
    user_agent          text,
    PRIMARY KEY (id, occurred_at)
) PARTITION BY RANGE (occurred_at);
CREATE INDEX click_events_email_idx ON mailroom.click_events (email_id);
CREATE INDEX click_events_campaign_idx ON mailroom.click_events (campaign_id, occurred_at);
CREATE TABLE mailroom.click_events_default PARTITION OF mailroom.click_events DEFAULT;

CREATE TABLE mailroom.templates (
    name                text NOT NULL CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    locale              text NOT NULL CHECK (locale ~ '^[a-z]{2}(-[A-Z]{2})?$'),
    subject             text NOT NULL,
    text_body           text,
    html_body           text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, locale),
    CHECK (text_body IS NOT NULL OR html_body IS NOT NULL)
);
CREATE TRIGGER templates_touch BEFORE UPDATE ON mailroom.templates
    FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

-- ---------------------------------------------------------------------------
-- User lifecycle (reference 01)
-- ---------------------------------------------------------------------------

CREATE TABLE mailroom.accounts (
    id                  bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    email               text NOT NULL UNIQUE CHECK (length(email) BETWEEN 3 AND 254),
    login               text NOT NULL UNIQUE CHECK (length(login) BETWEEN 1 AND 254),
    status              text NOT NULL DEFAULT 'provisioned'
                        CHECK (status IN ('provisioned', 'active', 'suspended')),
    locale              text NOT NULL DEFAULT 'en',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    status_changed_at   timestamptz,
    activated_at        timestamptz,
    suspended_at        timestamptz,
    unsuspended_at      timestamptz,
    CHECK (status <> 'active' OR activated_at IS NOT NULL),
    CHECK ((status = 'suspended') = (suspended_at IS NOT NULL))
);
CREATE INDEX accounts_status_idx ON mailroom.accounts (status);

CREATE TABLE mailroom.tokens (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action              text NOT NULL CHECK (action IN ('activation', 'password_recovery')),
    secret              bytea NOT NULL UNIQUE DEFAULT mailroom.random_secret()
                        CHECK (octet_length(secret) = 32),
    code                text NOT NULL DEFAULT mailroom.random_code() CHECK (code ~ '^[0-9]{5}$'),
    account_id          bigint NOT NULL REFERENCES mailroom.accounts (id)
                        ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    expires_at          timestamptz NOT NULL DEFAULT now() + interval '15 minutes',
    consumed_at         timestamptz,
    mailed_at           timestamptz,
    email_id            bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (expires_at > created_at)
);
CREATE INDEX tokens_unmailed_idx ON mailroom.tokens (id) WHERE mailed_at IS NULL;
CREATE INDEX tokens_account_idx ON mailroom.tokens (account_id, action);

-- A cursor per producer job; the job locks its row (FOR UPDATE) so two workers never race on it.
CREATE TABLE mailroom.jobs (
    name                text PRIMARY KEY,
    last_seq            bigint NOT NULL DEFAULT 0,
    last_run_at         timestamptz
);
INSERT INTO mailroom.jobs (name) VALUES ('lifecycle_mailer');

CREATE FUNCTION mailroom.accounts_before_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.status_changed_at := coalesce(NEW.status_changed_at, now());
    IF NEW.status = 'active' THEN
        NEW.activated_at := coalesce(NEW.activated_at, now());
    ELSIF NEW.status = 'suspended' THEN
        NEW.suspended_at := coalesce(NEW.suspended_at, now());
    END IF;
    IF NEW.status = 'provisioned' THEN
        -- The token's foreign key is deferred, so the token may precede its account in this transaction.
        INSERT INTO mailroom.tokens (account_id, action) VALUES (NEW.id, 'activation');
    END IF;
    RETURN NEW;
END $$;

-- provisioned -> active -> suspended -> active; unsuspending a never-activated account returns it to provisioned.
CREATE FUNCTION mailroom.accounts_before_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE FUNCTION mailroom.tokens_after_consumed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.action = 'activation' THEN
        UPDATE mailroom.accounts SET status = 'active' WHERE id = NEW.account_id AND status = 'provisioned';
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER accounts_before_insert BEFORE INSERT ON mailroom.accounts
    FOR EACH ROW EXECUTE FUNCTION mailroom.accounts_before_insert();
CREATE TRIGGER accounts_touch BEFORE UPDATE ON mailroom.accounts
    FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();
CREATE TRIGGER accounts_before_status_change BEFORE UPDATE OF status ON mailroom.accounts
    FOR EACH ROW EXECUTE FUNCTION mailroom.accounts_before_status_change();
CREATE TRIGGER tokens_created_at BEFORE UPDATE ON mailroom.tokens
    FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();
CREATE TRIGGER tokens_after_consumed AFTER UPDATE OF consumed_at ON mailroom.tokens
    FOR EACH ROW WHEN (NEW.consumed_at IS NOT NULL AND OLD.consumed_at IS NULL)
    EXECUTE FUNCTION mailroom.tokens_after_consumed();
CREATE TRIGGER accounts_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.accounts
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
CREATE TRIGGER tokens_notify AFTER INSERT ON mailroom.tokens
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

-- ---------------------------------------------------------------------------
-- Time-based scheduling (reference 02)
-- ---------------------------------------------------------------------------

CREATE FUNCTION mailroom.is_time_zone(zone text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_timezone_names WHERE name = zone)
$$;

CREATE TABLE mailroom.people (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    email               text NOT NULL UNIQUE CHECK (length(email) BETWEEN 3 AND 254),
    first_name          text NOT NULL CHECK (length(first_name) BETWEEN 1 AND 100),
    last_name           text NOT NULL CHECK (length(last_name) BETWEEN 1 AND 100),
    date_of_birth       date NOT NULL CHECK (date_of_birth > DATE '1900-01-01'),
    time_zone           text NOT NULL,
    locale              text NOT NULL DEFAULT 'en',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    version             integer NOT NULL DEFAULT 1
);

CREATE FUNCTION mailroom.people_validate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT mailroom.is_time_zone(NEW.time_zone) THEN
        RAISE EXCEPTION 'unknown time zone %', NEW.time_zone USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.date_of_birth >= current_date THEN
        RAISE EXCEPTION 'date of birth % is not in the past', NEW.date_of_birth USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER people_validate BEFORE INSERT OR UPDATE OF time_zone, date_of_birth ON mailroom.people
    FOR EACH ROW EXECUTE FUNCTION mailroom.people_validate();
CREATE TRIGGER people_touch BEFORE UPDATE ON mailroom.people
    FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();
CREATE TRIGGER people_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.people
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TABLE mailroom.events (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    person_id           uuid NOT NULL REFERENCES mailroom.people (id) ON DELETE CASCADE,
    event_type          text NOT NULL DEFAULT 'birthday' CHECK (event_type IN ('birthday')),
    status              text NOT NULL DEFAULT 'pending'
                        CHECK (status IN ('pending', 'processing', 'completed', 'failed', 'missed', 'cancelled')),
    due_at              timestamptz NOT NULL,
    local_due_at        timestamp NOT NULL,
    time_zone           text NOT NULL,
    executed_at         timestamptz,
    failure_reason      text,
    retry_count         integer NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    version             integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    idempotency_key     text NOT NULL UNIQUE,
    email_id            bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (status <> 'completed' OR executed_at IS NOT NULL),
    CHECK (status <> 'failed' OR failure_reason IS NOT NULL)
);
CREATE INDEX events_due_idx ON mailroom.events (due_at) WHERE status = 'pending';
CREATE UNIQUE INDEX events_one_pending_idx ON mailroom.events (person_id, event_type)
    WHERE status IN ('pending', 'processing');
CREATE INDEX events_person_idx ON mailroom.events (person_id);
CREATE TRIGGER events_touch BEFORE UPDATE ON mailroom.events
    FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();
CREATE TRIGGER events_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.events
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

-- ---------------------------------------------------------------------------
-- Inbox for external events (reference 03)
-- ---------------------------------------------------------------------------

CREATE TABLE mailroom.inbox (
    message_id          text NOT NULL CHECK (length(message_id) BETWEEN 1 AND 255),
    consumer            text NOT NULL CHECK (length(consumer) BETWEEN 1 AND 255),
    event_type          text NOT NULL,
    payload             jsonb NOT NULL,
    received_at         timestamptz NOT NULL DEFAULT now(),
    receive_count       integer NOT NULL DEFAULT 1 CHECK (receive_count >= 1),
    processed_at        timestamptz,
    email_id            bigint,
    PRIMARY KEY (message_id, consumer)
);
CREATE INDEX inbox_received_idx ON mailroom.inbox (received_at);
CREATE TRIGGER inbox_notify AFTER INSERT OR UPDATE ON mailroom.inbox
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

-- ---------------------------------------------------------------------------
-- Signed document acknowledgements (reference 04)
-- ---------------------------------------------------------------------------

CREATE TABLE mailroom.documents (
    doc_id              text PRIMARY KEY CHECK (doc_id ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$'),
    title               text NOT NULL DEFAULT '',
    url                 text NOT NULL DEFAULT '' CHECK (url = '' OR url ~* '^https?://'),
    checksum            text CHECK (checksum ~ '^[0-9a-f]{64}([0-9a-f]{64})?$'),
    checksum_algorithm  text CHECK (checksum_algorithm IN ('SHA-256', 'SHA-512')),
    description         text NOT NULL DEFAULT '',
    created_by          text NOT NULL DEFAULT '',
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK ((checksum IS NULL) = (checksum_algorithm IS NULL)),
    CHECK (checksum IS NULL
           OR (checksum_algorithm = 'SHA-256' AND length(checksum) = 64)
           OR (checksum_algorithm = 'SHA-512' AND length(checksum) = 128))
);
CREATE TRIGGER documents_touch BEFORE UPDATE ON mailroom.documents
    FOR EACH ROW EXECUTE FUNCTION mailroom.touch_row();

CREATE TABLE mailroom.expected_signers (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    doc_id              text NOT NULL REFERENCES mailroom.documents (doc_id) ON DELETE CASCADE,
    email               text NOT NULL CHECK (email = lower(email)),
    name                text NOT NULL DEFAULT '',
    locale              text NOT NULL DEFAULT 'en',
    added_at            timestamptz NOT NULL DEFAULT now(),
    added_by            text NOT NULL DEFAULT '',
    notes               text,
    UNIQUE (doc_id, email)
);

CREATE TABLE mailroom.signatures (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    doc_id              text NOT NULL REFERENCES mailroom.documents (doc_id),
    signer_email        text NOT NULL CHECK (signer_email = lower(signer_email)),
    signer_name         text,
    signed_at           timestamptz NOT NULL,
    nonce               text NOT NULL UNIQUE CHECK (length(nonce) >= 16),
    payload             text NOT NULL,
    payload_hash        text NOT NULL CHECK (payload_hash ~ '^[0-9a-f]{64}$'),
    signature           text NOT NULL,
    prev_hash           text CHECK (prev_hash ~ '^[0-9a-f]{64}$'),
    created_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (doc_id, signer_email)
);
CREATE INDEX signatures_doc_idx ON mailroom.signatures (doc_id, id);
-- The chain of one document never forks: at most one signature may follow any other.
CREATE UNIQUE INDEX signatures_chain_idx ON mailroom.signatures (doc_id, prev_hash) NULLS NOT DISTINCT;
CREATE TRIGGER signatures_created_at BEFORE UPDATE ON mailroom.signatures
    FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();
CREATE TRIGGER signatures_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.signatures
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
CREATE TRIGGER expected_signers_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.expected_signers
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

CREATE TABLE mailroom.reminder_logs (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    doc_id              text NOT NULL,
    recipient_email     text NOT NULL,
    email_id            bigint,
    requested_at        timestamptz NOT NULL DEFAULT now(),
    requested_by        text NOT NULL DEFAULT '',
    template            text NOT NULL,
    status              text NOT NULL DEFAULT 'queued'
                        CHECK (status IN ('queued', 'sent', 'failed', 'bounced', 'suppressed', 'cancelled')),
    finished_at         timestamptz,
    error_message       text,
    FOREIGN KEY (doc_id, recipient_email) REFERENCES mailroom.expected_signers (doc_id, email)
        ON DELETE CASCADE
);
CREATE INDEX reminder_logs_doc_idx ON mailroom.reminder_logs (doc_id, recipient_email, requested_at DESC);
CREATE INDEX reminder_logs_email_idx ON mailroom.reminder_logs (email_id) WHERE status = 'queued';

CREATE TABLE mailroom.checksum_verifications (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    doc_id              text NOT NULL REFERENCES mailroom.documents (doc_id) ON DELETE CASCADE,
    verified_by         text NOT NULL DEFAULT '',
    verified_at         timestamptz NOT NULL DEFAULT now(),
    stored_checksum     text,
    calculated_checksum text NOT NULL,
    algorithm           text NOT NULL CHECK (algorithm IN ('SHA-256', 'SHA-512')),
    is_valid            boolean NOT NULL,
    error_message       text,
    CHECK (is_valid OR error_message IS NOT NULL)
);

-- Statement-level change notifications for the console and the worker.
CREATE TRIGGER sender_accounts_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.sender_accounts
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
CREATE TRIGGER bounce_list_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.bounce_list
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
CREATE TRIGGER unsubscribe_list_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.unsubscribe_list
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
CREATE TRIGGER documents_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.documents
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();

-- Partitions for the month before this one through three months ahead.
SELECT mailroom.ensure_month_partitions(t, (date_trunc('month', now()) - interval '1 month')::date, 5)
FROM unnest(ARRAY['send_logs', 'open_events', 'click_events']) AS t;
