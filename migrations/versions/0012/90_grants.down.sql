CREATE OR REPLACE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_outcome TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.app_audit TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;
COMMENT ON FUNCTION mailroom.grant_app_role(name) IS
    'Let an existing role enqueue (mailroom.enqueue), read its own email (mailroom.my_emails) and write app.* audit rows; nothing else.';
