-- A login over a connection without TLS hands the password (or an OAuth2 access token) to anyone on
-- the network path. The worker refuses such a login (an account whose host is not the loopback
-- interface, with --security none and a username) unless the operator allowed it for that account,
-- knowingly: `mailroom senders add|edit --allow-plaintext-login`. The worker checks this flag itself,
-- so a row changed around the command line cannot send a password in clear either. Existing accounts
-- start refused: one that logged in without TLS is told why at its next connection.
ALTER TABLE mailroom.sender_accounts
    ADD COLUMN allow_plaintext_login boolean NOT NULL DEFAULT false;
COMMENT ON COLUMN mailroom.sender_accounts.allow_plaintext_login IS
    'The operator allowed this account to log in (password or OAuth2 token) over a connection without TLS to a host other than the loopback interface: the secret then crosses the network readable by anyone on the path.';
