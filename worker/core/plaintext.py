"""When a sender account may log in over a connection without TLS: the one rule the CLI and the worker share."""

from __future__ import annotations

# The loopback interface by name: a login there never crosses a network. Names, not resolved
# addresses, so the rule reads the same in the CLI, in the database row and in the worker.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")

PLAINTEXT_LOGIN_REFUSED = (
    "a login without TLS to {host} would send the password or token readable by anyone on the network "
    "path: use --security starttls or tls, or allow it knowingly with --allow-plaintext-login"
)


def login_in_clear(host: str, security: str, username: str | None) -> bool:
    """Whether an account with these settings would log in with its secret unencrypted on a network."""
    return security == "none" and bool(username) and host not in LOOPBACK_HOSTS
