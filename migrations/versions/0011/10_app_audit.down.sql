-- Undo 10_app_audit: the rows still waiting are chained first (nothing an application wrote is lost),
-- then app_audit chains at once again, under the head's lock, as revision 0008 wrote it.
SELECT mailroom.audit_link_pending(2147483647);

CREATE OR REPLACE FUNCTION mailroom.app_audit(
    action text, actor text, target text DEFAULT NULL, affected bigint DEFAULT 0, detail jsonb DEFAULT '{}'
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp SET lock_timeout = '5s' AS $$
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
COMMENT ON FUNCTION mailroom.app_audit(text, text, text, bigint, jsonb) IS
    'Record an application''s own audit row (action app.*); granted to application roles by mailroom.grant_app_role.';

CREATE OR REPLACE FUNCTION mailroom.audit_log_chain() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
COMMENT ON FUNCTION mailroom.audit_log_chain() IS
    'Chains each new audit row (seq, prev_hash, row_hash) and moves mailroom.audit_chain, under its row lock';

DROP FUNCTION mailroom.audit_link_pending(integer);
DROP FUNCTION mailroom.audit_take_head();
DROP FUNCTION mailroom.audit_head_holders();
DROP TABLE mailroom.audit_pending;
