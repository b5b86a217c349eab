-- An application cannot hold the audit trail. mailroom.app_audit chained an application's row at once,
-- taking the chain head's row lock (mailroom.audit_chain) to the end of the application's transaction:
-- an application that called it and left its transaction open held every operator's audited command
-- (`suppressions add`, `senders pause`, `db grant` waited until killed) and every other application.
-- Now an application's row waits in mailroom.audit_pending, which no lock guards, and is chained later by
-- whoever holds the head next: the next audit row written by anyone else (an operator's command, a
-- grant, a prune) and the worker's maintenance. And whoever writes an audit row waits for the head a few
-- seconds at most, then is told which session holds it.

-- 1. The rows waiting to be chained.
CREATE TABLE mailroom.audit_pending (
    id bigint NOT NULL DEFAULT nextval('mailroom.audit_log_id_seq'::regclass),
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    db_role text NOT NULL DEFAULT session_user,
    actor text NOT NULL,
    action text NOT NULL,
    target text,
    affected bigint NOT NULL DEFAULT 0,
    detail jsonb NOT NULL DEFAULT '{}',
    CONSTRAINT audit_pending_pkey PRIMARY KEY (id),
    CONSTRAINT audit_pending_actor_length CHECK (length(actor) BETWEEN 1 AND 200),
    CONSTRAINT audit_pending_action_app CHECK (action ~ '^app\.[a-z0-9_.]{0,60}$'),
    CONSTRAINT audit_pending_target_length CHECK (length(target) <= 500),
    CONSTRAINT audit_pending_affected_positive CHECK (affected >= 0),
    CONSTRAINT audit_pending_detail_object CHECK (jsonb_typeof(detail) = 'object')
);
COMMENT ON TABLE mailroom.audit_pending IS
    'Applications'' audit rows (mailroom.app_audit) waiting to be chained into mailroom.audit_log: moved there, with their id and time, by mailroom.audit_link_pending under the chain head''s lock (the next audit row anyone else writes, and maintenance). No role writes it directly.';
COMMENT ON COLUMN mailroom.audit_pending.id IS
    'The audit row''s id, drawn from mailroom.audit_log''s own sequence: the id app_audit returned and the chained row keeps.';
COMMENT ON COLUMN mailroom.audit_pending.at IS 'When the application wrote it (kept when it is chained).';
COMMENT ON COLUMN mailroom.audit_pending.db_role IS 'The application''s database role (session_user).';
COMMENT ON COLUMN mailroom.audit_pending.actor IS 'Who the application says acted.';
COMMENT ON COLUMN mailroom.audit_pending.action IS 'app.* : an application''s own action.';
COMMENT ON COLUMN mailroom.audit_pending.detail IS 'The application''s detail (at most 16 KiB of JSON).';

-- 2. Who holds the head: the sessions (but this one) holding a row-level lock mode on mailroom.audit_chain
-- that are not themselves waiting for a lock. Only audit writers take those modes on that table, and
-- a waiter behind the holder holds one too while it waits.
CREATE FUNCTION mailroom.audit_head_holders() RETURNS text LANGUAGE sql STABLE AS $$
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
REVOKE EXECUTE ON FUNCTION mailroom.audit_head_holders() FROM PUBLIC;
COMMENT ON FUNCTION mailroom.audit_head_holders() IS
    'The sessions holding the audit chain head (pid, role, application_name, state, how long in their transaction), from pg_locks and pg_stat_activity; NULL when none.';

-- 3. Take the head, waiting at most 5 s (or the caller's shorter lock_timeout); past that, 55P03
-- (lock_not_available) naming the sessions that hold it.
CREATE FUNCTION mailroom.audit_take_head() RETURNS void LANGUAGE plpgsql AS $$
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
REVOKE EXECUTE ON FUNCTION mailroom.audit_take_head() FROM PUBLIC;
COMMENT ON FUNCTION mailroom.audit_take_head() IS
    'Lock the audit chain head for this transaction, waiting at most 5 s (or a shorter lock_timeout), else 55P03 naming the sessions that hold it.';

-- 4. Chain the oldest waiting rows (at most max_rows), each as it was written: same id, time and role.
-- Not granted to anyone: it takes the head to the end of the caller's transaction.
CREATE FUNCTION mailroom.audit_link_pending(max_rows integer DEFAULT 1000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
REVOKE EXECUTE ON FUNCTION mailroom.audit_link_pending(integer) FROM PUBLIC;
COMMENT ON FUNCTION mailroom.audit_link_pending(integer) IS
    'Chain up to max_rows of the oldest applications'' audit rows waiting in mailroom.audit_pending (under the head''s lock, held to the end of the transaction); how many. Run by every audit write and by maintenance.';

-- 5. Every audit row written takes the head (bounded), chains what applications left waiting, then
-- itself, as before.
CREATE OR REPLACE FUNCTION mailroom.audit_log_chain() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
COMMENT ON FUNCTION mailroom.audit_log_chain() IS
    'Chains each new audit row (seq, prev_hash, row_hash) and moves mailroom.audit_chain, under its row lock (waited for 5 s at most), after the applications'' rows waiting in mailroom.audit_pending';

-- 6. An application's row waits; nothing here locks anything another session needs.
CREATE OR REPLACE FUNCTION mailroom.app_audit(
    action text, actor text, target text DEFAULT NULL, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
COMMENT ON FUNCTION mailroom.app_audit(text, text, text, bigint, jsonb) IS
    'Record an application''s own audit row (action app.*): it waits in mailroom.audit_pending, taking no lock, and is chained by the next audit write or maintenance; its id. Granted to application roles by mailroom.grant_app_role.';

-- Read-only roles read the waiting rows as they read the trail (the console's audit screen lists both).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT grantee FROM information_schema.column_privileges
        WHERE table_schema = 'mailroom' AND table_name = 'audit_log' AND column_name = 'action'
          AND privilege_type = 'SELECT' AND grantee <> current_user
          AND grantee IN (SELECT rolname FROM pg_roles)
    LOOP
        EXECUTE format('GRANT SELECT ON mailroom.audit_pending TO %I', r.grantee);
    END LOOP;
END $$;
