-- An application role may also cancel its own email (mailroom.cancel_my_email), and ask which From
-- addresses no sender account may send (mailroom.from_refusals, which the Python API asks).
CREATE OR REPLACE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
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
COMMENT ON FUNCTION mailroom.grant_app_role(name) IS
    'Let an existing role enqueue through every door (mailroom.enqueue from SQL; mailroom.enqueue_rows, enqueue_templates and campaign_mail_policy for the Python API), read and cancel its own email (mailroom.my_emails, enqueue_outcome, cancel_my_email), the schema''s revision, and write app.* audit rows; no table.';

-- The roles that could call the replaced functions may call the new ones; an application role (one that
-- could call mailroom.enqueue) may cancel its own email too.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT function_name, role_name FROM pg_temp.mailroom_door_grants LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.%I TO %I', r.function_name, r.role_name);
        IF r.function_name = 'enqueue' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.cancel_my_email TO %I', r.role_name);
        END IF;
        IF r.function_name = 'enqueue_rows' THEN  -- the Python API asks it before it writes a From of its own
            EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.from_refusals TO %I', r.role_name);
        END IF;
    END LOOP;
    DROP TABLE pg_temp.mailroom_door_grants;
END $$;

-- Read-only roles: the new tables' readable columns (not content, not filenames: secret_columns).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT grantee FROM information_schema.column_privileges
        WHERE table_schema = 'mailroom' AND table_name = 'email_queue' AND column_name = 'recipient_email'
          AND privilege_type = 'SELECT' AND grantee <> current_user
          AND grantee IN (SELECT rolname FROM pg_roles)
          AND NOT EXISTS (SELECT FROM information_schema.table_privileges t
                          WHERE t.table_schema = 'mailroom' AND t.table_name = 'email_queue'
                            AND t.grantee = column_privileges.grantee AND t.privilege_type IN ('INSERT', 'UPDATE'))
    LOOP
        PERFORM mailroom.grant_read_only_role(r.grantee::name);
    END LOOP;
END $$;
