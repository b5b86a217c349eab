CREATE OR REPLACE FUNCTION mailroom.secret_columns() RETURNS TABLE (table_name name, column_name name)
LANGUAGE sql IMMUTABLE AS $$
    VALUES ('sender_accounts'::name, 'smtp_password_encrypted'::name),
           ('sender_accounts', 'dkim_private_key_encrypted'),
           ('tokens', 'secret'), ('tokens', 'secret_hash'), ('tokens', 'code')
$$;
ALTER TABLE mailroom.sender_accounts
    DROP CONSTRAINT sender_accounts_password_has_no_oauth,
    DROP CONSTRAINT sender_accounts_oauth2_complete,
    DROP COLUMN oauth_refresh_token_encrypted,
    DROP COLUMN oauth_client_secret_encrypted,
    DROP COLUMN oauth_client_id,
    DROP COLUMN oauth_token_url,
    DROP COLUMN auth_type;
