-- The audit trail: one append-only row per sensitive operation (sender add/edit/suspend/resume, bulk
-- retry/cancel, privacy export/erase, key rotation, signature maintenance): when, who (the database
-- role, and the OS user or "console" the caller names), what, on what, how many.
CREATE TABLE mailroom.audit_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    db_role text NOT NULL DEFAULT session_user,
    actor text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action text NOT NULL CHECK (action ~ '^[a-z][a-z0-9_.]{0,63}$'),
    target text CHECK (length(target) <= 500),
    affected bigint NOT NULL DEFAULT 0 CHECK (affected >= 0),
    detail jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(detail) = 'object')
);
CREATE INDEX audit_log_at_idx ON mailroom.audit_log (at DESC);

-- Append-only: rows are written by mailroom.audit() and never changed or removed.
CREATE FUNCTION mailroom.audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'mailroom.audit_log is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON mailroom.audit_log
    FOR EACH ROW EXECUTE FUNCTION mailroom.audit_log_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON mailroom.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION mailroom.audit_log_append_only();

-- Record one sensitive operation; returns the audit row's id. `actor` is who asked (an OS user,
-- "console", an application name); the database role is taken from the session.
CREATE FUNCTION mailroom.audit(
    action text, actor text, target text DEFAULT NULL, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'
) RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO mailroom.audit_log (actor, action, target, affected, detail)
    VALUES (coalesce(nullif(left(actor, 200), ''), session_user), action, left(target, 500),
            coalesce(affected, 0), coalesce(detail, '{}'))
    RETURNING id
$$;
