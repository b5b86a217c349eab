-- Least privilege. An application's role may enqueue (mailroom.enqueue) and read the status of the
-- email it enqueued (mailroom.my_emails), nothing else: no send logs, no secrets, no other table.
-- A read-only role (the console's --read-only mode, dashboards) reads every table but the secret
-- columns, and changes nothing. `mailroom db grant` calls these; they grant to an existing role.
CREATE FUNCTION mailroom.grant_app_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    EXECUTE format('GRANT EXECUTE ON FUNCTION mailroom.enqueue TO %I', role_name);
    EXECUTE format('GRANT SELECT ON mailroom.my_emails TO %I', role_name);
END $$;

-- Columns no read-only role sees: encrypted secrets and one-time codes.
CREATE FUNCTION mailroom.secret_columns() RETURNS TABLE (table_name name, column_name name)
LANGUAGE sql IMMUTABLE AS $$
    VALUES ('sender_accounts'::name, 'smtp_password_encrypted'::name),
           ('sender_accounts', 'dkim_private_key_encrypted'),
           ('tokens', 'secret'), ('tokens', 'secret_hash'), ('tokens', 'code')
$$;

CREATE FUNCTION mailroom.grant_read_only_role(role_name name) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA mailroom TO %I', role_name);
    FOR t IN
        SELECT c.relname, string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) AS columns
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'mailroom'
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
        WHERE c.relkind IN ('r', 'p', 'v')
          AND NOT EXISTS (SELECT 1 FROM mailroom.secret_columns() s
                          WHERE s.table_name = c.relname AND s.column_name = a.attname)
        GROUP BY c.relname
    LOOP
        EXECUTE format('GRANT SELECT (%s) ON mailroom.%I TO %I', t.columns, t.relname, role_name);
    END LOOP;
END $$;
