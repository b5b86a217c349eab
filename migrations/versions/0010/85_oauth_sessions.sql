-- Login sessions of the signing page's optional OpenID Connect login (worker.tracking.oidc): one row
-- per browser that logged in, found by the hash of its cookie (the cookie itself is never stored).
-- The refresh token is kept encrypted with the secret key; its column name ends in _encrypted and the
-- cookie hash's holds "secret", so mailroom.is_secret_column keeps both from every read-only role.
-- A session unused for 37 days is over, and maintenance deletes it (worker.ops.oauth_sessions).
CREATE TABLE mailroom.oauth_sessions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_secret_hash bytea NOT NULL
        CONSTRAINT oauth_sessions_secret_hash_length CHECK (octet_length(session_secret_hash) = 32),
    user_sub text NOT NULL CONSTRAINT oauth_sessions_user_sub_length CHECK (length(user_sub) BETWEEN 1 AND 255),
    email text NOT NULL CONSTRAINT oauth_sessions_email_format CHECK (
        length(email) BETWEEN 3 AND 254 AND email ~ '^[^@\s]+@[^@\s]+$'),
    refresh_token_encrypted bytea,
    access_token_expires_at timestamptz,
    last_refreshed_at timestamptz,
    user_agent text CONSTRAINT oauth_sessions_user_agent_length CHECK (length(user_agent) <= 1000),
    ip_address inet,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT oauth_sessions_one_per_secret UNIQUE (session_secret_hash)
);
COMMENT ON TABLE mailroom.oauth_sessions IS
    'Login sessions of the signing page''s OpenID Connect login: one per browser that logged in; unused for 37 days, deleted';
COMMENT ON COLUMN mailroom.oauth_sessions.session_secret_hash IS
    'SHA-256 of the session cookie''s value (256 random bits): a stolen table gives no usable cookie';
COMMENT ON COLUMN mailroom.oauth_sessions.user_sub IS 'The issuer''s subject (the ID token''s sub): who logged in';
COMMENT ON COLUMN mailroom.oauth_sessions.email IS 'The address the issuer verified for the subject at login';
COMMENT ON COLUMN mailroom.oauth_sessions.refresh_token_encrypted IS
    'The latest refresh token (replaced at each rotation), encrypted with the secret key; NULL when the issuer gave none';
COMMENT ON COLUMN mailroom.oauth_sessions.access_token_expires_at IS
    'When the access token expires: the next use after it refreshes the tokens, or ends the session when that is refused';
COMMENT ON COLUMN mailroom.oauth_sessions.last_refreshed_at IS 'When the tokens were last refreshed; NULL before the first refresh';
COMMENT ON COLUMN mailroom.oauth_sessions.user_agent IS
    'The browser''s User-Agent at login: a request with another one ends the session (the theft rule)';
COMMENT ON COLUMN mailroom.oauth_sessions.ip_address IS
    'The client address at login: a request from another /24 (IPv4) or /48 (IPv6) ends the session (the theft rule)';
COMMENT ON COLUMN mailroom.oauth_sessions.created_at IS 'When the session started (the login)';
COMMENT ON COLUMN mailroom.oauth_sessions.updated_at IS
    'When the session was last used or refreshed; 37 days after it the session is over and maintenance deletes it';
CREATE INDEX oauth_sessions_user_sub_idx ON mailroom.oauth_sessions (user_sub);
CREATE INDEX oauth_sessions_updated_idx ON mailroom.oauth_sessions (updated_at);
CREATE TRIGGER oauth_sessions_created_at_fixed BEFORE UPDATE ON mailroom.oauth_sessions
    FOR EACH ROW EXECUTE FUNCTION mailroom.forbid_created_at_change();
COMMENT ON TRIGGER oauth_sessions_created_at_fixed ON mailroom.oauth_sessions IS
    'created_at can never be rewritten; updated_at is set by each use (the session''s clock, not the row''s)';
