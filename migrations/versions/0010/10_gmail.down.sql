ALTER TABLE mailroom.sender_accounts
    DROP CONSTRAINT sender_accounts_gmail_settings_only_for_gmail,
    DROP CONSTRAINT sender_accounts_gmail_complete,
    DROP CONSTRAINT sender_accounts_gmail_subject_email_format,
    DROP COLUMN gmail_key_encrypted,
    DROP COLUMN gmail_subject_email,
    DROP CONSTRAINT sender_accounts_auth_type_known,
    ADD CONSTRAINT sender_accounts_auth_type_known CHECK (auth_type IN ('password', 'oauth2'));

COMMENT ON COLUMN mailroom.sender_accounts.auth_type IS 'password: SMTP AUTH with smtp_password_encrypted; oauth2: XOAUTH2 with an access token from the OAuth2 settings.';
