"""OpenID Connect login over real HTTP against an issuer in the test process: the whole flow (discovery, PKCE,
state, nonce, ID token), every refusal an attacker or a broken issuer can cause, the session rules
(idle, theft by user agent or network, refresh-token rotation stored encrypted) and the clean-up."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from psycopg import errors, sql

from tests.fixtures_db import drop_roles, role_url
from tests.tracking.oidc_server import CLIENT_ID, CLIENT_SECRET, Issuer, running_issuer
from worker.core.config import Settings
from worker.core.crypto import secret_box
from worker.ops import roles
from worker.ops.retention import run_maintenance
from worker.tracking.oidc import current_identity, login_redirect, required, safe_return_path
from worker.tracking.oidc.flow import LOGIN
from worker.tracking.oidc.sessions import same_network
from worker.tracking.server import make_app

SIGNER = "ada@example.com"
BROWSER = "Mozilla/5.0 (Signer's phone)"


async def _signing_stub(request: web.Request) -> web.Response:
    """What the signing page does with login: who the session proves, else off to log in (with the hint)."""
    email = request.match_info["email"]
    identity = await current_identity(request, email)
    if identity is None:
        hint = None if request.query.get("hint") == "no" else email
        return login_redirect(request, request.path_qs, email=hint)
    return web.json_response({"sub": identity.user_sub, "email": identity.email})


@dataclass
class Clock:
    """The login's clock and the issuer's, moved by tests instead of sleeping."""

    offset: timedelta = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.offset


@dataclass
class World:
    """A running tracker with login, its issuer, a browser and the shared clock."""

    server: TestServer
    http: aiohttp.ClientSession
    idp: Issuer
    clock: Clock
    settings: Settings

    def url(self, path: str) -> str:
        return str(self.server.make_url(path))

    async def get(self, url: str, agent: str = BROWSER) -> aiohttp.ClientResponse:
        """GET without following redirects; a redirect to the public base URL comes back to the test server."""
        parts = urlsplit(url)
        if parts.netloc in ("localhost:8025", "sign.example.com"):
            url = self.url(parts.path + ("?" + parts.query if parts.query else ""))
        elif not parts.netloc:
            url = self.url(url)
        async with self.http.get(url, allow_redirects=False, headers={"User-Agent": agent}) as resp:
            await resp.read()
            return resp


@asynccontextmanager
async def world(
    db_url: str, settings: Settings, idp: Issuer | None = None, **changes: Any
) -> AsyncIterator[World]:
    idp = idp or Issuer()
    clock = Clock()
    idp.now = lambda: clock.now().timestamp()
    async with running_issuer(idp):
        configured = dataclasses.replace(
            settings,
            oidc_issuer=idp.issuer,
            oidc_client_id=CLIENT_ID,
            oidc_client_secret=CLIENT_SECRET,
            **changes,
        )
        app = make_app(db_url, configured, pool_size=4)
        app.router.add_get("/s/oidc-test/{email}", _signing_stub)
        app[LOGIN].now = clock.now
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            # Over https the cookies are Secure: this test server on plain http stands for the https origin.
            jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[str(server.make_url("/"))])
            async with aiohttp.ClientSession(cookie_jar=jar) as http:
                yield World(server, http, idp, clock, configured)
        finally:
            await server.close()


async def log_in(w: World, email: str = SIGNER, query: str = "") -> list[aiohttp.ClientResponse]:
    """Open the page, follow each redirect by hand through the issuer and back; return every answer."""
    answers = [await w.get(f"/s/oidc-test/{email}{query}")]
    for _ in range(6):
        if answers[-1].status not in (302, 303):
            break
        answers.append(await w.get(answers[-1].headers["Location"]))
    return answers


def _rows(
    db_url: str, query: str = "SELECT * FROM mailroom.oauth_sessions ORDER BY id"
) -> list[dict[str, Any]]:
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        return conn.execute(query).fetchall()


def _execute(db_url: str, query: str, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(db_url) as conn:
        conn.execute(query, params)


async def test_whole_flow_logs_in_with_pkce_state_and_nonce_and_the_session_proves_the_signer(
    db_url: str, settings: Settings
) -> None:
    async with world(db_url, settings) as w:
        answers = await log_in(w)
        assert [a.status for a in answers] == [303, 302, 302, 303, 200]
        assert answers[0].headers["Location"] == "/oidc/login"
        assert answers[3].headers["Location"] == f"/s/oidc-test/{SIGNER}"
        assert await answers[-1].json() == {"sub": "user-1234", "email": SIGNER}
        asked = w.idp.authorize_requests[0]
        assert asked["code_challenge_method"] == "S256" and len(asked["code_challenge"]) == 43
        assert (
            asked["login_hint"] == SIGNER and asked["redirect_uri"] == "http://localhost:8025/oidc/callback"
        )
        assert len(asked["state"]) >= 32 and len(asked["nonce"]) >= 32 and asked["state"] != asked["nonce"]
        spent = w.idp.token_requests[0]
        assert spent["grant_type"] == "authorization_code" and len(spent["code_verifier"]) >= 43
        assert "client_secret" not in spent  # sent as HTTP Basic, never in the body
        cookie = answers[3].cookies["mailroom_session"]
        assert cookie["httponly"] and cookie["samesite"] == "Lax" and cookie["path"] == "/"
        assert not cookie["secure"]  # MAILROOM_BASE_URL is http here
        # The session is used again without the issuer.
        again = await w.get(f"/s/oidc-test/{SIGNER.upper()}")
        assert again.status == 200 and len(w.idp.authorize_requests) == 1
    [row] = _rows(db_url)
    assert bytes(row["session_secret_hash"]) == hashlib.sha256(cookie.value.encode()).digest()
    assert (row["user_sub"], row["email"], row["user_agent"]) == ("user-1234", SIGNER, BROWSER)
    assert str(row["ip_address"]) == "127.0.0.1"
    [live] = w.idp.live_refresh_tokens
    stored = bytes(row["refresh_token_encrypted"])
    assert live.encode() not in stored and secret_box(settings).decrypt(stored) == live


async def test_over_https_the_session_cookie_is_secure_and_host_only(db_url: str, settings: Settings) -> None:
    async with world(db_url, settings, base_url="https://sign.example.com") as w:
        answers = await log_in(w)
        assert answers[0].cookies["__Host-mailroom_login"]["secure"]
        assert [a.status for a in answers] == [303, 302, 302, 303, 200]
        cookie = answers[3].cookies["__Host-mailroom_session"]
        assert cookie["secure"] and cookie["httponly"] and cookie["samesite"] == "Lax"
        assert w.idp.authorize_requests[0]["redirect_uri"] == "https://sign.example.com/oidc/callback"


async def test_an_id_token_for_another_address_is_refused_and_starts_no_session(
    db_url: str, settings: Settings
) -> None:
    async with world(db_url, settings, idp=Issuer(email="eve@example.com")) as w:
        answers = await log_in(w)
        assert answers[-1].status == 403
        assert "not the address this signing link was sent to" in await answers[-1].text()
        assert SIGNER not in await answers[-1].text()  # the expected address is never shown
        assert _rows(db_url) == []
        # Without the hint the login succeeds, but its session does not prove the link's address.
        answers = await log_in(w, query="?hint=no")
        assert [a.status for a in answers][:5] == [303, 302, 302, 303, 303]
        assert answers[4].headers["Location"] == "/oidc/login" and len(_rows(db_url)) == 1
        assert (await w.get(f"/s/oidc-test/{SIGNER}?hint=no")).headers["Location"] == "/oidc/login"
        assert (await w.get("/s/oidc-test/eve@example.com")).status == 200


@pytest.mark.parametrize("verified", [False, "true", None], ids=["false", "string", "absent"])
async def test_an_unverified_email_is_refused(db_url: str, settings: Settings, verified: Any) -> None:
    async with world(db_url, settings, idp=Issuer(email_verified=verified)) as w:
        answers = await log_in(w)
        assert answers[-1].status == 403 and "could not be confirmed" in await answers[-1].text()
    assert _rows(db_url) == []


@pytest.mark.parametrize(
    "override",
    [{"nonce": "not-the-login-nonce"}, {"iss": "https://evil.example"}, {"aud": "another-client"},
     {"aud": [CLIENT_ID, "another-client"]}, {"exp": 1_000_000}, {"at_hash": "AAAAAAAAAAAAAAAAAAAAAA"}],
    ids=["nonce", "issuer", "audience", "audience-without-azp", "expired", "at_hash"],
)  # fmt: skip
async def test_an_id_token_with_a_wrong_claim_is_refused(
    db_url: str, settings: Settings, override: dict[str, Any]
) -> None:
    async with world(db_url, settings, idp=Issuer(claims_override=override)) as w:
        answers = await log_in(w)
        assert answers[-1].status == 403
    assert _rows(db_url) == []


async def test_an_id_token_signed_by_another_key_is_refused(db_url: str, settings: Settings) -> None:
    async with world(db_url, settings, idp=Issuer(sign_with_other_key=True)) as w:
        answers = await log_in(w)
        assert answers[-1].status == 403
    assert _rows(db_url) == []


async def test_a_tampered_id_token_payload_is_refused(db_url: str, settings: Settings) -> None:
    idp = Issuer()
    signed = idp.id_token

    def tampered(nonce: str | None, access_token: str) -> str:
        import base64
        import json

        head, payload, signature = signed(nonce, access_token).split(".")
        claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
        claims["email"] = "mallory@example.com"
        forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
        return f"{head}.{forged}.{signature}"

    idp.id_token = tampered  # type: ignore[method-assign]
    async with world(db_url, settings, idp=idp) as w:
        answers = await log_in(w, email="mallory@example.com")
        assert answers[-1].status == 403
    assert _rows(db_url) == []


async def test_a_wrong_or_missing_state_and_a_replayed_callback_are_refused(
    db_url: str, settings: Settings
) -> None:
    async with world(db_url, settings) as w:
        first = await w.get(f"/s/oidc-test/{SIGNER}")
        to_issuer = await w.get(first.headers["Location"])
        back = await w.get(to_issuer.headers["Location"])
        callback = urlsplit(back.headers["Location"])
        query = parse_qs(callback.query)
        forged = await w.get(f"/oidc/callback?code={query['code'][0]}&state=forged-state-value")
        assert forged.status == 403
        no_state = await w.get(f"/oidc/callback?code={query['code'][0]}")
        assert no_state.status == 403
        assert _rows(db_url) == [] and w.idp.token_requests == []  # the code was never spent
        good = await w.get(back.headers["Location"])
        assert good.status == 303
        # The login cookie went with the first use: the same callback again is refused.
        replay = await w.get(back.headers["Location"])
        assert replay.status == 400
        # Another browser (no login cookie) with a stolen callback URL gets nothing.
        stolen = w.url(callback.path + "?" + callback.query)
        async with (
            aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as other,
            other.get(stolen, allow_redirects=False) as resp,
        ):
            assert resp.status == 400
    assert len(_rows(db_url)) == 1


async def test_a_forged_or_stale_login_cookie_is_refused(db_url: str, settings: Settings) -> None:
    async with world(db_url, settings) as w:
        first = await w.get(f"/s/oidc-test/{SIGNER}")
        to_issuer = await w.get(first.headers["Location"])
        back = await w.get(to_issuer.headers["Location"])
        w.clock.offset = timedelta(minutes=11)  # the login took too long
        assert (await w.get(back.headers["Location"])).status == 400
        w.clock.offset = timedelta(0)
        w.http.cookie_jar.clear()
        w.http.cookie_jar.update_cookies(
            {"mailroom_login": "gAAAAAforged"}, response_url=w.server.make_url("/")
        )
        assert (await w.get(back.headers["Location"])).status == 400
    assert _rows(db_url) == []


@pytest.mark.parametrize(
    "target",
    ["https://evil.example/s/x", "//evil.example/s/x", "/s//evil.example", "/\\evil.example", "/s/../oidc/logout",
     "/s/%2e%2e/%2e%2e/x", "/s/x%2f%2fevil", "/s/x%5cevil", "javascript:alert(1)", "/oidc/login", "/s/x\r\nX: y",
     "http:/s/x", "/s/" + "a" * 3000, ""],
)  # fmt: skip
async def test_a_login_never_returns_anywhere_but_a_signing_page(
    db_url: str, settings: Settings, target: str
) -> None:
    assert safe_return_path(target) is None
    async with world(db_url, settings) as w:
        resp = await w.http.get(w.url("/oidc/login"), params={"return_to": target}, allow_redirects=False)
        assert resp.status == 400
        assert "Location" not in resp.headers and w.idp.authorize_requests == []


def test_return_paths_on_a_signing_page_are_kept() -> None:
    assert safe_return_path("/s/abc-DEF_123.x") == "/s/abc-DEF_123.x"
    assert safe_return_path("/s/abc?lang=fr") == "/s/abc?lang=fr"


async def test_idle_session_is_deleted_and_the_signer_logs_in_again(db_url: str, settings: Settings) -> None:
    async with world(db_url, settings, idp=Issuer(expires_in=10**7)) as w:
        assert (await log_in(w))[-1].status == 200
        w.clock.offset = timedelta(days=36, hours=23)
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 200  # used: its 37 days start again
        w.clock.offset += timedelta(days=37)
        again = await w.get(f"/s/oidc-test/{SIGNER}")
        assert again.status == 303 and again.headers["Location"] == "/oidc/login"
        assert _rows(db_url) == []


async def test_another_user_agent_ends_the_session(db_url: str, settings: Settings) -> None:
    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        stolen = await w.get(f"/s/oidc-test/{SIGNER}", agent="curl/8.0")
        assert stolen.status == 303 and stolen.headers["Location"] == "/oidc/login"
        assert _rows(db_url) == []
        # The cookie is dead for its owner too: they log in again.
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 303


async def test_another_network_ends_the_session_but_the_same_one_does_not(
    db_url: str, settings: Settings
) -> None:
    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        _execute(db_url, "UPDATE mailroom.oauth_sessions SET ip_address = '127.0.0.200'")
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 200  # same /24
        _execute(db_url, "UPDATE mailroom.oauth_sessions SET ip_address = '127.0.1.1'")
        moved = await w.get(f"/s/oidc-test/{SIGNER}")
        assert moved.status == 303 and _rows(db_url) == []


def test_the_network_rule_is_a_24_for_ipv4_and_a_48_for_ipv6() -> None:
    assert same_network("192.0.2.1", "192.0.2.254")
    assert not same_network("192.0.2.1", "192.0.3.1")
    assert same_network("2001:db8:1::1", "2001:db8:1:ffff::2")
    assert not same_network("2001:db8:1::1", "2001:db8:2::1")
    assert same_network("::ffff:192.0.2.1", "192.0.2.9")  # IPv4-mapped counts as IPv4
    assert not same_network("192.0.2.1", "2001:db8::1")
    assert not same_network("192.0.2.1", None) and same_network(None, None)
    assert not same_network("192.0.2.1", "not an address")


@pytest.fixture
def reader(db_url: str, role_lock: None) -> Iterator[Callable[[], psycopg.Connection[Any]]]:
    role = "mr_oidc_reader"
    with psycopg.connect(db_url, autocommit=True) as conn:
        roles.grant(conn, "read-only", role, create=True, actor="tester")
    yield lambda: psycopg.connect(role_url(db_url, role))
    drop_roles(db_url, role)


async def test_refresh_rotates_the_refresh_token_stored_encrypted_and_hidden_from_readers(
    db_url: str, settings: Settings, reader: Callable[[], psycopg.Connection[Any]]
) -> None:
    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        [first] = w.idp.live_refresh_tokens
        w.clock.offset = timedelta(hours=1, seconds=1)  # the access token expired
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 200
        assert w.idp.token_requests[-1]["grant_type"] == "refresh_token"
        assert w.idp.token_requests[-1]["refresh_token"] == first
        [second] = w.idp.live_refresh_tokens
        assert second != first and first in w.idp.spent_refresh_tokens
        # Within the new access token's life, no refresh.
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 200
        assert len(w.idp.token_requests) == 2
    [row] = _rows(db_url)
    assert secret_box(settings).decrypt(bytes(row["refresh_token_encrypted"])) == second
    assert row["last_refreshed_at"] is not None
    with reader() as conn:
        assert conn.execute("SELECT user_sub, email FROM mailroom.oauth_sessions").fetchall() == [
            ("user-1234", SIGNER)
        ]
        for column in ("refresh_token_encrypted", "session_secret_hash"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(sql.SQL("SELECT {} FROM mailroom.oauth_sessions").format(sql.Identifier(column)))
            conn.rollback()


async def test_a_refused_refresh_or_no_refresh_token_ends_the_session(
    db_url: str, settings: Settings
) -> None:
    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        w.idp.refuse_refresh = True  # revoked at the issuer
        w.clock.offset = timedelta(hours=2)
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 303
        assert _rows(db_url) == []
    async with world(db_url, settings, idp=Issuer(give_refresh_token=False)) as w:
        assert (await log_in(w))[-1].status == 200
        assert _rows(db_url)[0]["refresh_token_encrypted"] is None
        w.clock.offset = timedelta(hours=2)
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 303
        assert _rows(db_url) == []


async def test_a_refreshed_id_token_about_another_subject_ends_the_session(
    db_url: str, settings: Settings
) -> None:
    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        w.idp.sub = "someone-else"
        w.clock.offset = timedelta(hours=2)
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 303
        assert _rows(db_url) == []


async def test_logout_deletes_the_session(db_url: str, settings: Settings) -> None:
    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        assert (await w.get("/oidc/logout")).status == 200 and len(_rows(db_url)) == 1  # GET changes nothing
        async with w.http.post(w.url("/oidc/logout")) as resp:
            assert resp.status == 200
        assert _rows(db_url) == []
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 303


async def test_an_issuer_whose_discovery_names_another_issuer_is_not_used(
    db_url: str, settings: Settings
) -> None:
    async with world(db_url, settings) as w:
        real = w.idp.issuer
        w.idp.issuer = "https://evil.example"
        resp = await w.get(f"/s/oidc-test/{SIGNER}")
        to_issuer = await w.get(resp.headers["Location"])
        assert to_issuer.status == 503 and "Location" not in to_issuer.headers
        w.idp.issuer = real
    assert _rows(db_url) == []


async def test_login_required_but_not_configured_is_a_clear_503(db_url: str, settings: Settings) -> None:
    assert required(settings, document_require_login=True)
    assert required(dataclasses.replace(settings, oidc_required=True), document_require_login=False)
    assert not required(settings, document_require_login=False)
    app = make_app(db_url, settings, pool_size=2)
    app.router.add_get("/s/oidc-test/{email}", _signing_stub)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(server.make_url(f"/s/oidc-test/{SIGNER}"), allow_redirects=False) as resp:
                assert resp.status == 503
                assert "Login is required but not configured" in await resp.text()
            async with http.get(server.make_url("/oidc/login?return_to=/s/x"), allow_redirects=False) as resp:
                assert resp.status == 503
    finally:
        await server.close()


async def test_maintenance_deletes_sessions_unused_for_37_days(db_url: str, settings: Settings) -> None:
    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        w.clock.offset = timedelta(days=20)
        w.http.cookie_jar.clear()
        assert (await log_in(w))[-1].status == 200
    assert len(_rows(db_url)) == 2
    now = datetime.now(UTC)
    with psycopg.connect(db_url, autocommit=True) as conn:
        report = run_maintenance(conn, settings, now=now + timedelta(days=37, minutes=1))
    [step] = [s for s in report.steps if s.name == "purge_oauth_sessions"]
    assert step.rows == 1
    [left] = _rows(db_url)
    assert left["updated_at"] > now + timedelta(days=19)


async def test_a_refresh_token_stored_under_a_rotated_key_ends_the_session(
    db_url: str, settings: Settings
) -> None:
    from worker.core.crypto import SecretBox, generate_key

    async with world(db_url, settings) as w:
        assert (await log_in(w))[-1].status == 200
        other = SecretBox(generate_key()).encrypt("a refresh token")
        _execute(db_url, "UPDATE mailroom.oauth_sessions SET refresh_token_encrypted = %s", (other,))
        w.clock.offset = timedelta(hours=2)
        assert (await w.get(f"/s/oidc-test/{SIGNER}")).status == 303
        assert _rows(db_url) == [] and len(w.idp.token_requests) == 1  # nothing sent to the issuer


async def test_a_client_starting_logins_without_end_is_held_back_before_the_issuer_is_asked(
    db_url: str, settings: Settings
) -> None:
    # Each login start is a request to the issuer: one client network has a budget (burst 10).
    async with world(db_url, settings) as w:
        answers = []
        for _ in range(14):
            resp = await w.http.get(
                w.url("/oidc/login"),
                params={"return_to": "/s/oidc-test/a@example.com"},
                allow_redirects=False,
            )
            answers.append(resp.status)
        assert answers[:10] == [302] * 10
        assert set(answers[10:]) == {429}
        assert resp.headers["Retry-After"] == "60"
        assert len(w.idp.authorize_requests) == 0  # the browser was never sent on: the issuer saw nothing yet


def test_addresses_match_by_letter_case_only_never_by_unicode_folding() -> None:
    from worker.tracking.oidc.flow import same_address

    assert same_address("Ada@Example.COM", "ada@example.com")
    assert not same_address("strasse@example.com", "straße@example.com")
    assert not same_address("\u212aate@example.com", "kate@example.com")  # a Kelvin sign is not a k
