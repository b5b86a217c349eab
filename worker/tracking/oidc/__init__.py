"""Optional OpenID Connect login for the signing page: authorization code flow with PKCE (S256), state and nonce.

The signing page asks `required` whether a signer must log in, `current_identity` who the signer is,
and answers `login_redirect` when no session proves the link's address. `add_routes` serves
`/oidc/login`, `/oidc/callback` and `/oidc/logout` on the public server. The protocol is Authlib's and
joserfc's (`worker.tracking.oidc.provider`); sessions and their rules are `worker.tracking.oidc.sessions`.
"""

from __future__ import annotations

from worker.tracking.oidc.flow import (
    Identity,
    add_routes,
    configured,
    current_identity,
    login_redirect,
    required,
    safe_return_path,
)

__all__ = [
    "Identity",
    "add_routes",
    "configured",
    "current_identity",
    "login_redirect",
    "required",
    "safe_return_path",
]
