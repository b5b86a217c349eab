-- Roles granted read-only access before this revision see its new columns and tables too (and lose what it takes away: the
-- grant function revokes each table's SELECT before granting the readable columns): a console run under such a role
-- would otherwise fail on the first screen that reads them, and would go on reading the bodies 20_tenants made secret.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT grantee FROM information_schema.column_privileges
        WHERE table_schema = 'mailroom' AND table_name = 'sender_accounts' AND column_name = 'name'
          AND privilege_type = 'SELECT' AND grantee <> current_user
          AND grantee IN (SELECT rolname FROM pg_roles)
    LOOP
        PERFORM mailroom.grant_read_only_role(r.grantee::name);
    END LOOP;
END $$;

-- Application roles granted before this revision may call what it adds for them (mailroom.app_audit,
-- which the README shows). They are the roles that may execute mailroom.enqueue, its owner aside.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole::name AS grantee
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = 'mailroom.enqueue'::regproc AND a.privilege_type = 'EXECUTE'
          AND a.grantee <> p.proowner AND a.grantee <> 0
    LOOP
        PERFORM mailroom.grant_app_role(r.grantee);
    END LOOP;
END $$;
