"""Sender accounts as the engine uses them: which are eligible, quota, pacing, and their circuits."""

from __future__ import annotations

ELIGIBLE_SENDERS = """
SELECT id, name, from_email, from_name, smtp_host, smtp_port, smtp_security, smtp_username,
       smtp_password_encrypted, send_delay_ms, batch_size, max_connections,
       dkim_domain, dkim_selector, dkim_private_key_encrypted, circuit_state,
       connect_timeout_seconds, command_timeout_seconds, data_timeout_seconds,
       bounce_domain, relay_provider, auth_type, oauth_token_url, oauth_client_id,
       oauth_client_secret_encrypted, oauth_refresh_token_encrypted, allow_plaintext_login,
       gmail_subject_email, gmail_key_encrypted, postal_address
FROM mailroom.sender_accounts
WHERE (status IN ('active', 'warming_up')
       OR (status = 'paused_limit_reached' AND limit_reached_on < (now() AT TIME ZONE 'UTC')::date))
  -- an open circuit is left alone until its backoff has passed, then one worker probes it
  AND (circuit_state = 'closed' OR circuit_retry_at <= now())
ORDER BY id
"""

# A refresh token the OAuth2 endpoint rotated replaces the one it was given, and nothing an operator
# stored since (or a key rotation re-encrypted): then the stored one stays, and is used next time.
SAVE_ROTATED_GRANT = """
UPDATE mailroom.sender_accounts SET oauth_refresh_token_encrypted = %(new)s
WHERE id = %(id)s AND auth_type = 'oauth2' AND oauth_refresh_token_encrypted = %(old)s
RETURNING oauth_refresh_token_encrypted
"""

OPEN_CIRCUIT = "SELECT mailroom.open_circuit(%s, %s, %s, %s)"
TAKE_PROBE = "SELECT mailroom.take_probe(%s, %s)"
CLOSE_CIRCUIT = "SELECT mailroom.close_circuit(%s)"

# The day is the one reserve_quota counts on (now() is the statement's transaction time in both).
RESERVE = "SELECT mailroom.reserve_quota(%s, %s) AS granted, (now() AT TIME ZONE 'UTC')::date AS day"
RELEASE_QUOTA = "SELECT mailroom.release_quota(%s, %s, %s)"

# Take the next send slot of a paced account; returns how many seconds to wait for it (0: now).
# The row lock orders every worker's sends, so together they keep one send per send_delay_ms.
TAKE_SEND_SLOT = """
INSERT INTO mailroom.sender_pacing AS p (sender_account_id, next_send_at)
VALUES (%(sender)s, clock_timestamp() + make_interval(secs => %(delay)s))
ON CONFLICT (sender_account_id) DO UPDATE
SET next_send_at = greatest(p.next_send_at, clock_timestamp()) + make_interval(secs => %(delay)s)
RETURNING greatest(0, extract(epoch FROM p.next_send_at - clock_timestamp())::float8 - %(delay)s)
"""
