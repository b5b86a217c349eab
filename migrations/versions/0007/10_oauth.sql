-- OAuth2 sender accounts (SMTP AUTH XOAUTH2, as Gmail and Microsoft 365 require): the token endpoint,
-- the client id, and the client secret and refresh token encrypted like SMTP passwords. An oauth2
-- account logs in as its mailbox (smtp_username) with an access token, never with a password; a
-- password account carries none of the OAuth2 settings. The endpoint is HTTPS, or plain HTTP on the
-- loopback interface only (a local test or a sidecar): the client secret never crosses a network in clear.
ALTER TABLE mailroom.sender_accounts
    ADD COLUMN auth_type text NOT NULL DEFAULT 'password' CHECK (auth_type IN ('password', 'oauth2')),
    ADD COLUMN oauth_token_url text CHECK (
        (oauth_token_url ~ '^https://[^\s/?#@]+(/[^\s#]*)?$'
         OR oauth_token_url ~ '^http://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?(/[^\s#]*)?$')
        AND length(oauth_token_url) <= 2000),
    ADD COLUMN oauth_client_id text CHECK (oauth_client_id ~ '^[\x21-\x7e]+$' AND length(oauth_client_id) <= 500),
    ADD COLUMN oauth_client_secret_encrypted bytea,
    ADD COLUMN oauth_refresh_token_encrypted bytea,
    ADD CONSTRAINT sender_accounts_oauth2_complete CHECK (
        auth_type <> 'oauth2'
        OR (oauth_token_url IS NOT NULL AND oauth_client_id IS NOT NULL
            AND oauth_client_secret_encrypted IS NOT NULL AND oauth_refresh_token_encrypted IS NOT NULL
            AND smtp_username IS NOT NULL AND smtp_password_encrypted IS NULL)),
    ADD CONSTRAINT sender_accounts_password_has_no_oauth CHECK (
        auth_type <> 'password'
        OR (oauth_token_url IS NULL AND oauth_client_id IS NULL
            AND oauth_client_secret_encrypted IS NULL AND oauth_refresh_token_encrypted IS NULL));

-- Read-only roles never see the new secrets (grant_read_only_role skips these columns).
CREATE OR REPLACE FUNCTION mailroom.secret_columns() RETURNS TABLE (table_name name, column_name name)
LANGUAGE sql IMMUTABLE AS $$
    VALUES ('sender_accounts'::name, 'smtp_password_encrypted'::name),
           ('sender_accounts', 'dkim_private_key_encrypted'),
           ('sender_accounts', 'oauth_client_secret_encrypted'),
           ('sender_accounts', 'oauth_refresh_token_encrypted'),
           ('tokens', 'secret'), ('tokens', 'secret_hash'), ('tokens', 'code')
$$;
