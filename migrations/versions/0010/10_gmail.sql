-- Gmail API sender accounts (auth_type 'gmail'): email goes out through the Gmail API's
-- users.messages.send as a Google Workspace user the service account impersonates (domain-wide
-- delegation), with access tokens from the JWT bearer grant (RFC 7523). The service account's JSON
-- key is stored encrypted like an SMTP password; its column name ends in _encrypted, so
-- mailroom.is_secret_column keeps it from every read-only role without a change to secret_columns().
-- A gmail account carries no password and no OAuth2 setting; any other account no Gmail setting.
ALTER TABLE mailroom.sender_accounts
    DROP CONSTRAINT sender_accounts_auth_type_known,
    ADD CONSTRAINT sender_accounts_auth_type_known CHECK (auth_type IN ('password', 'oauth2', 'gmail')),
    ADD COLUMN gmail_subject_email text,
    ADD COLUMN gmail_key_encrypted bytea,
    ADD CONSTRAINT sender_accounts_gmail_subject_email_format CHECK (
        length(gmail_subject_email) BETWEEN 3 AND 254 AND gmail_subject_email ~ '^[^@\s]+@[^@\s]+$'),
    ADD CONSTRAINT sender_accounts_gmail_complete CHECK (
        auth_type <> 'gmail'
        OR (gmail_subject_email IS NOT NULL AND gmail_key_encrypted IS NOT NULL
            AND smtp_password_encrypted IS NULL AND smtp_username IS NULL
            AND oauth_token_url IS NULL AND oauth_client_id IS NULL
            AND oauth_client_secret_encrypted IS NULL AND oauth_refresh_token_encrypted IS NULL)),
    ADD CONSTRAINT sender_accounts_gmail_settings_only_for_gmail CHECK (
        auth_type = 'gmail' OR (gmail_subject_email IS NULL AND gmail_key_encrypted IS NULL));

COMMENT ON COLUMN mailroom.sender_accounts.auth_type IS 'How the account sends: password (SMTP AUTH with the stored password, or none), oauth2 (SMTP AUTH XOAUTH2 with tokens from its OAuth2 client), gmail (the Gmail API as gmail_subject_email, with tokens from its service account key).';
COMMENT ON COLUMN mailroom.sender_accounts.gmail_subject_email IS 'The Google Workspace user a gmail account''s service account impersonates (the JWT''s sub): the mailbox the Gmail API sends as.';
COMMENT ON COLUMN mailroom.sender_accounts.gmail_key_encrypted IS 'A gmail account''s service account JSON key (its private key signs the token requests), encrypted with the secret key (never readable by read-only roles).';
