-- The roles that may execute the two enqueue functions (their owner aside): 30_enqueue_rows and
-- 40_sql_enqueue replace them (their argument lists grow), which forgets them; 90_grants grants them again.
CREATE TEMP TABLE mailroom_door_grants ON COMMIT DROP AS
SELECT DISTINCT p.proname AS function_name, a.grantee::regrole::name AS role_name
FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.oid IN ('mailroom.enqueue'::regproc, 'mailroom.enqueue_rows'::regproc)
  AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0;
