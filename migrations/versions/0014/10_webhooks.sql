-- Events back to the application. An endpoint is a URL that receives the events of one application
-- role's email (or, with no role, an operator's endpoint, every event); each event is written by a
-- trigger in the transaction of the change it reports, and fanned out at once into one delivery per
-- endpoint that wants it. The worker POSTs deliveries (worker.hooks.dispatch), signed as the Standard
-- Webhooks specification says.
CREATE TABLE mailroom.webhook_endpoints (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    url text NOT NULL,
    owner_role name,
    events text[] NOT NULL,
    secret_encrypted bytea NOT NULL,
    allow_private boolean NOT NULL DEFAULT false,
    status text NOT NULL DEFAULT 'active',
    status_reason text,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL DEFAULT session_user,
    failures integer NOT NULL DEFAULT 0,
    failing_since timestamptz,
    circuit_until timestamptz,
    last_success_at timestamptz,
    last_error text,
    CONSTRAINT webhook_endpoints_status_known CHECK (status IN ('active', 'paused', 'disabled', 'removing')),
    -- An absolute http(s) URL in plain ASCII, without credentials, spaces or control characters (worker.hooks.endpoints
    -- checks it more closely, and the dispatcher checks the addresses it resolves to before each POST).
    CONSTRAINT webhook_endpoints_url CHECK (
        length(url) BETWEEN 10 AND 2048 AND url ~* '^https?://[^/?#@]+([/?#].*)?$' AND url ~ '^[!-~]+$'),
    CONSTRAINT webhook_endpoints_events_known CHECK (
        cardinality(events) >= 1 AND events <@ ARRAY['email.sent', 'email.bounced', 'email.complained',
            'email.opened', 'email.clicked', 'email.unsubscribed', 'email.failed', 'email.expired',
            'email.suppressed', 'email.cancelled', 'document.signed']::text[]),
    CONSTRAINT webhook_endpoints_failures_not_negative CHECK (failures >= 0),
    CONSTRAINT webhook_endpoints_last_error_bounded CHECK (length(last_error) <= 1000),
    CONSTRAINT webhook_endpoints_status_reason_bounded CHECK (length(status_reason) <= 1000)
);
COMMENT ON TABLE mailroom.webhook_endpoints IS
    'Where events go: a URL, the event types it wants, whose email (owner_role; NULL: every email, an operator''s endpoint), its signing secret (encrypted with the secret key), its state and its circuit.';
COMMENT ON COLUMN mailroom.webhook_endpoints.owner_role IS
    'The application role whose email''s events this endpoint receives (email_queue.enqueued_by); NULL for an operator''s endpoint, which receives every event but is told no recipient.';
COMMENT ON COLUMN mailroom.webhook_endpoints.allow_private IS
    'An operator allowed this endpoint to resolve to loopback, private, link-local or metadata addresses.';
COMMENT ON COLUMN mailroom.webhook_endpoints.status IS
    'active; paused (events wait for resume); disabled (the receiver answered 410 Gone: no new events until resumed); removing (being deleted: no new event, so no writer waits on the delete).';
COMMENT ON COLUMN mailroom.webhook_endpoints.failures IS 'Failed attempts in a row since the last success.';
COMMENT ON COLUMN mailroom.webhook_endpoints.failing_since IS 'The first failure since the last success (health warns after an hour).';
COMMENT ON COLUMN mailroom.webhook_endpoints.circuit_until IS 'After failures in a row, no attempt to this endpoint before this time.';
CREATE TRIGGER webhook_endpoints_notify AFTER INSERT OR UPDATE OR DELETE ON mailroom.webhook_endpoints
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.notify_change();
COMMENT ON TRIGGER webhook_endpoints_notify ON mailroom.webhook_endpoints IS
    'Tells listeners (console, worker) that the table changed: NOTIFY mailroom_changes.';

CREATE TABLE mailroom.webhook_events (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    uid uuid NOT NULL DEFAULT gen_random_uuid(),
    type text NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    email_id bigint,
    owner name,
    idempotency_key text,
    recipient text,
    data jsonb NOT NULL DEFAULT '{}',
    CONSTRAINT webhook_events_data_object CHECK (jsonb_typeof(data) = 'object')
);
CREATE INDEX webhook_events_occurred_idx ON mailroom.webhook_events (occurred_at);
-- What privacy export and erasure look an address up by.
CREATE INDEX webhook_events_email_idx ON mailroom.webhook_events (email_id);
CREATE INDEX webhook_events_recipient_idx ON mailroom.webhook_events (lower(recipient));
COMMENT ON TABLE mailroom.webhook_events IS
    'What happened to an email (or a document), written by triggers in the transaction of the change: none for a change that rolled back, none lost when a process dies. Written only while an endpoint exists.';
COMMENT ON COLUMN mailroom.webhook_events.uid IS 'The event''s stable id (webhook-id: evt_<uid>), the same on every retry and replay.';
COMMENT ON COLUMN mailroom.webhook_events.owner IS 'The role that enqueued the email (email_queue.enqueued_by): only its endpoints and operators'' receive the event, and only its endpoints the recipient.';

CREATE TABLE mailroom.webhook_deliveries (
    endpoint_id bigint NOT NULL,
    event_id bigint NOT NULL,
    email_id bigint,
    status text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    leased_until timestamptz,
    first_attempt_at timestamptz,
    finished_at timestamptz,
    last_code smallint,
    last_error text,
    PRIMARY KEY (endpoint_id, event_id),
    CONSTRAINT webhook_deliveries_endpoint FOREIGN KEY (endpoint_id)
        REFERENCES mailroom.webhook_endpoints (id) ON DELETE CASCADE,
    CONSTRAINT webhook_deliveries_event FOREIGN KEY (event_id)
        REFERENCES mailroom.webhook_events (id) ON DELETE CASCADE,
    CONSTRAINT webhook_deliveries_status_known CHECK (status IN ('pending', 'delivered', 'dead')),
    CONSTRAINT webhook_deliveries_finished CHECK ((status = 'pending') = (finished_at IS NULL)),
    CONSTRAINT webhook_deliveries_attempts_not_negative CHECK (attempts >= 0),
    CONSTRAINT webhook_deliveries_last_error_bounded CHECK (length(last_error) <= 1000)
);
-- What the dispatcher claims: an endpoint's pending deliveries, oldest event first. (Those waiting out
-- a backoff are read past only while the endpoint's circuit is closed: after five failures in a row it
-- is not read at all until its next probe. Ordered by when they are due instead, the planner sorted
-- the whole backlog on a fresh burst: bench.webhooks fell from 1,441 to 1,100 events/s.)
CREATE INDEX webhook_deliveries_pending_idx ON mailroom.webhook_deliveries (endpoint_id, event_id)
    WHERE status = 'pending';
-- Events of one email go to an endpoint in order: a delivery waits while an earlier one is pending.
CREATE INDEX webhook_deliveries_email_order_idx ON mailroom.webhook_deliveries (endpoint_id, email_id, event_id)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_event_idx ON mailroom.webhook_deliveries (event_id);
-- What `webhooks list` and the console count per endpoint: given up, and delivered in the last day.
CREATE INDEX webhook_deliveries_dead_idx ON mailroom.webhook_deliveries (endpoint_id) WHERE status = 'dead';
CREATE INDEX webhook_deliveries_delivered_idx ON mailroom.webhook_deliveries (endpoint_id, finished_at)
    WHERE status = 'delivered';
COMMENT ON TABLE mailroom.webhook_deliveries IS
    'One event for one endpoint: pending (with its next attempt and, while a worker posts it, a lease), delivered (a 2xx), or dead (retries exhausted).';
COMMENT ON COLUMN mailroom.webhook_deliveries.leased_until IS 'A worker is posting it until then; after, another may (the receiver then sees the same webhook-id again).';

-- The events of a statement, fanned out to the endpoints that want them, and the worker woken.
CREATE FUNCTION mailroom.webhook_events_fan_out() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
COMMENT ON FUNCTION mailroom.webhook_events_fan_out() IS
    'Statement trigger: one delivery for each new event and each endpoint that wants it (its type, its owner''s email or an operator''s endpoint); NOTIFY mailroom_webhooks.';
CREATE TRIGGER webhook_events_fan_out AFTER INSERT ON mailroom.webhook_events
    REFERENCING NEW TABLE AS new_events FOR EACH STATEMENT EXECUTE FUNCTION mailroom.webhook_events_fan_out();
COMMENT ON TRIGGER webhook_events_fan_out ON mailroom.webhook_events IS
    'Fans each statement''s events out to the endpoints (mailroom.webhook_deliveries).';

-- Whether events are written at all: not while no endpoint could receive one.
CREATE FUNCTION mailroom.webhooks_listening() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (SELECT FROM mailroom.webhook_endpoints WHERE status IN ('active', 'paused'))
$$;
REVOKE ALL ON FUNCTION mailroom.webhooks_listening() FROM PUBLIC;
COMMENT ON FUNCTION mailroom.webhooks_listening() IS
    'Whether an endpoint could receive an event (active or paused): the event triggers write nothing otherwise.';
