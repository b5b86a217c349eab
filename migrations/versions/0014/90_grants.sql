-- Read-only roles: the webhook tables' readable columns (not URLs, not secrets, not events' data).
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
