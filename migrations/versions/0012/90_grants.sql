-- An application role may use every door: the SQL function, the Python API's (enqueue_rows, with the
-- templates and the campaign policy it renders with), its own outcomes, its audit rows, the schema's
-- revision (the CLI checks it). It reads no table: nothing of another role's email.
CREATE OR REPLACE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_rows TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_templates() TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.campaign_mail_policy(text) TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.schema_revision() TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_outcome TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.app_audit TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;
COMMENT ON FUNCTION mailroom.grant_app_role(name) IS
    'Let an existing role enqueue through every door (mailroom.enqueue from SQL; mailroom.enqueue_rows, enqueue_templates and campaign_mail_policy for the Python API), read its own email (mailroom.my_emails, enqueue_outcome), the schema''s revision, and write app.* audit rows; no table.';

-- The roles that could call the old mailroom.enqueue (dropped with its signature in 20_sql_enqueue) were
-- remembered by 05_remember_app_roles; they are granted every door now.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT role_name FROM pg_temp.mailroom_app_roles LOOP
        PERFORM mailroom.grant_app_role(r.role_name);
    END LOOP;
    DROP TABLE pg_temp.mailroom_app_roles;
END $$;

-- Roles that wrote the queue directly, as the Python API did before this revision (its documented
-- grants: INSERT on mailroom.email_queue), go on enqueueing from Python: the API now goes through
-- enqueue_rows and reads templates and campaign policies through their functions.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT grantee FROM information_schema.role_table_grants
        WHERE table_schema = 'mailroom' AND table_name = 'email_queue' AND privilege_type = 'INSERT'
          AND grantee <> current_user AND grantee IN (SELECT rolname FROM pg_roles)
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_rows TO %I', r.grantee);
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue_templates() TO %I', r.grantee);
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.campaign_mail_policy(text) TO %I', r.grantee);
        EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.schema_revision() TO %I', r.grantee);
    END LOOP;
END $$;
