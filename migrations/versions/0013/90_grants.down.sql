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

-- Remembered before 40 and 30 replace the functions; 05 grants them again.
CREATE TEMP TABLE mailroom_door_grants ON COMMIT DROP AS
SELECT DISTINCT p.proname AS function_name, a.grantee::regrole::name AS role_name
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('mailroom.enqueue'::regproc, 'mailroom.enqueue_rows'::regproc)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0;
