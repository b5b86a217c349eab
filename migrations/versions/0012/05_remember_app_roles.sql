-- The application roles: those that may execute mailroom.enqueue, its owner aside. 20_sql_enqueue
-- replaces that function (its argument list grows), which forgets them; 90_grants grants them again.
CREATE TEMP TABLE mailroom_app_roles ON COMMIT DROP AS
SELECT DISTINCT a.grantee::regrole::name AS role_name
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid = 'mailroom.enqueue'::regproc AND a.privilege_type = 'EXECUTE'
  AND a.grantee <> p.proowner AND a.grantee <> 0;
