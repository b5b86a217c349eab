"""The signing page over real HTTP and the real database: sign from a link, and every refusal."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from console.queries import DOCUMENTS
from tests.cli import run
from tests.tracking import scalar
from tests.tracking.signing_helpers import (
    CHECKSUM,
    NEW_CHECKSUM,
    browser,
    form_fields,
    make_document,
    open_and_sign,
    signature_rows,
    signing_server,
    token_for,
)
from worker.core.config import Settings
from worker.core.rate_limit import RateLimiter
from worker.core.signing_desk import LinkState, Proof
from worker.producers.documents.desk import DocumentDesk
from worker.producers.documents.reminders import send_reminders
from worker.producers.documents.signatures import verify_chain

ADA = "ada@example.com"
BOB = "bob@example.com"
TWO = (("ada@example.com", "Ada Lovelace", "en"), ("bob@example.com", "Bob Babbage", "fr"))
BROWSER = {"User-Agent": "Phone/1.0 (test)", "Referer": "https://mail.example.com/inbox"}


def _count(db_url: str, table: str) -> int:
    query = sql.SQL("SELECT count(*) FROM mailroom.{}").format(sql.Identifier(table))
    with psycopg.connect(db_url) as conn:
        row = conn.execute(query).fetchone()
    return int(row[0]) if row else 0


def _console_signed(db_url: str) -> dict[str, tuple[int, int]]:
    """What the console's documents figure shows: expected and signed per document."""
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        rows = conn.execute(DOCUMENTS, {"limit": 10, "pattern": None}, prepare=False).fetchall()
    return {r["doc_id"]: (int(r["expected"]), int(r["signed"])) for r in rows}


async def test_a_signer_signs_from_the_link_and_everything_follows(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings, signers=TWO)
    token = token_for(db_url, settings, "policy", ADA)
    listener = await psycopg.AsyncConnection.connect(db_url, autocommit=True)
    await listener.execute("LISTEN mailroom_changes")
    assert _console_signed(db_url) == {"policy": (2, 0)}
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}"), headers=BROWSER) as page:
            text = await page.text()
            assert page.status == 200
            assert "Security policy" in text and "Ada Lovelace" in text and ADA in text
            assert 'href="https://docs.example.com/policy.pdf"' in text
            assert f"SHA-256: {CHECKSUM}" in text
            assert 'name="viewport"' in text and "<script" not in text
            assert 'type="checkbox" name="consent"' in text
            cookie = page.headers["Set-Cookie"]
            assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/s/" in cookie
        resp, confirmation = await open_and_sign(http, server, token, **BROWSER)
    assert resp.status == 200, confirmation
    assert "You signed “Security policy”" in confirmation
    [row] = signature_rows(db_url)
    assert row["signer_email"] == ADA and row["seq"] == 1
    assert row["user_sub"] == f"email:{ADA}"
    assert row["referer"] == "https://mail.example.com/inbox"
    assert row["ip"] == "127.0.0.1" and row["user_agent"] == "Phone/1.0 (test)"
    assert f"#{row['id']}" in confirmation and row["payload_hash"] in confirmation
    with psycopg.connect(db_url) as conn:
        assert verify_chain(conn, "policy", settings=settings).ok  # signed by docs sign's code: chain intact
    # The receipt, queued for the signer in the same transaction.
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as conn:
        receipt = conn.execute(
            "SELECT recipient_email AS to_email, template, status, text_body, reference_type, reference_id"
            " FROM mailroom.email_queue WHERE template = 'signature_receipt'"
        ).fetchone()
    assert receipt is not None and receipt["to_email"] == ADA and receipt["status"] == "pending"
    assert receipt["reference_type"] == "signature" and receipt["reference_id"] == str(row["id"])
    assert f"#{row['id']}" in receipt["text_body"] and row["payload_hash"] in receipt["text_body"]
    # Live: the console's figure moved, and the listening console was told.
    assert _console_signed(db_url) == {"policy": (2, 1)}
    tables = set()
    async with asyncio.timeout(5):
        async for note in listener.notifies():
            tables.add(json.loads(note.payload)["table"])
            if "signatures" in tables:
                break
    await listener.close()
    # The next reminder run skips her and reminds Bob only.
    with psycopg.connect(db_url) as conn:
        result = send_reminders(conn, "policy", interval=timedelta(0), settings=settings)
        reminded = conn.execute("SELECT recipient_email FROM mailroom.reminder_logs").fetchall()
    assert result.queued == 1 and reminded == [(BOB,)]


async def test_reminders_carry_each_signers_own_working_link(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings, signers=TWO)
    with psycopg.connect(db_url) as conn:
        send_reminders(conn, "policy", interval=timedelta(0), settings=settings)
    with psycopg.connect(db_url) as conn:
        bodies: dict[str, str] = dict(
            conn.execute("SELECT recipient_email, text_body FROM mailroom.email_queue").fetchall()
        )
        html_bodies = [r[0] for r in conn.execute("SELECT html_body FROM mailroom.email_queue").fetchall()]
    links = {
        email: re.findall(r"http://localhost:8025(/s/[0-9a-z.]+)", body) for email, body in bodies.items()
    }
    assert len(links[ADA]) == 1 and len(links[BOB]) == 1 and links[ADA] != links[BOB]
    assert all('href="http://localhost:8025/s/' in body for body in html_bodies)
    async with signing_server(db_url, settings) as server, browser() as http:
        for email, [path] in links.items():
            async with http.get(server.make_url(path)) as page:
                assert page.status == 200 and email in await page.text()
    assert "Lisez-le et signez-le ici" in bodies[BOB]  # in the signer's locale


async def test_get_changes_nothing(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    before = (_count(db_url, "signatures"), _count(db_url, "email_queue"), _count(db_url, "audit_log"))
    async with signing_server(db_url, settings) as server, browser() as http:
        for _ in range(3):
            async with http.get(server.make_url(f"/s/{token}")) as page:
                assert page.status == 200
        async with http.head(server.make_url(f"/s/{token}")) as head:
            assert head.status == 200
    assert (
        _count(db_url, "signatures"),
        _count(db_url, "email_queue"),
        _count(db_url, "audit_log"),
    ) == before


async def test_pages_carry_a_strict_content_security_policy(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        for path in (f"/s/{token}", "/s/not-a-token"):
            async with http.get(server.make_url(path)) as page:
                text = await page.text()
                csp = page.headers["Content-Security-Policy"]
                nonce = re.search(r"'nonce-([A-Za-z0-9_-]+)'", csp)
                assert nonce is not None and f'<style nonce="{nonce.group(1)}">' in text
                assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
                assert "form-action 'self'" in csp and "unsafe-inline" not in csp
                assert page.headers["X-Frame-Options"] == "DENY"
                assert page.headers["Referrer-Policy"] == "no-referrer"
                assert "no-store" in page.headers["Cache-Control"]
                assert not re.search(r"(src|href)=\"https?://(?!docs\.example\.com)", text)  # no third party


async def test_expired_link_is_refused_with_a_page_that_says_so(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    later = datetime.now(UTC) + timedelta(days=2)  # the link was valid for a day
    async with (
        signing_server(db_url, settings, clock=lambda: later) as server,
        browser() as http,
    ):
        async with http.get(server.make_url(f"/s/{token}")) as page:
            assert page.status == 410 and "This link has expired" in await page.text()
        async with http.post(server.make_url(f"/s/{token}"), data={"consent": "yes"}) as post:
            assert post.status == 410
    assert signature_rows(db_url) == []


async def test_expiry_passing_between_page_and_post_signs_nothing(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    now = [datetime.now(UTC)]
    async with (
        signing_server(db_url, settings, clock=lambda: now[0]) as server,
        browser() as http,
    ):
        async with http.get(server.make_url(f"/s/{token}")) as page:
            fields = form_fields(await page.text())
        now[0] += timedelta(days=1, seconds=1)
        async with http.post(server.make_url(f"/s/{token}"), data={**fields, "consent": "yes"}) as post:
            assert post.status == 410
    assert signature_rows(db_url) == []


def _flip_one_bit(token: str, position: int) -> str:
    """The token with one bit of one character changed (still a well-formed lower-case token)."""
    alphabet = (
        "abcdefghijklmnopqrstuvwxyz234567"
        if position > token.index(".")
        else "0123456789abcdefghijklmnopqrstuvwxyz"
    )
    char = token[position]
    flipped = alphabet[alphabet.index(char) ^ 1] if alphabet.index(char) ^ 1 < len(alphabet) else alphabet[0]
    return token[:position] + flipped + token[position + 1 :]


async def test_tampered_links_are_not_valid_and_sign_nothing(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    far = token_for(db_url, settings, "policy", ADA, datetime.now(UTC) + timedelta(days=365))
    signer, _, tag, _ = token.split(".")
    forged_expiry = f"{signer}.{far.split('.')[1]}.{tag}.{token.split('.')[3]}"
    tampered = [_flip_one_bit(token, i) for i in (0, len(token) - 1, token.rindex(".") + 3)]
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            fields = form_fields(await page.text())
        for bad in [*tampered, forged_expiry, token.upper(), token + "a", "x" * 500, "%00", "1.2.3.4"]:
            async with http.get(server.make_url(f"/s/{bad}")) as resp:
                text = await resp.text()
                assert resp.status == 404, bad
                assert "This link is not valid" in text and ADA not in text and "Security policy" not in text
            async with http.post(server.make_url(f"/s/{bad}"), data={**fields, "consent": "yes"}) as post:
                assert post.status == 404
    assert signature_rows(db_url) == []


async def test_a_link_names_one_signer_of_one_document(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings, signers=TWO)
    make_document(db_url, settings, "nda", title="NDA", signers=(("carol@example.com", "Carol", "en"),))
    ada = token_for(db_url, settings, "policy", ADA)
    carol = token_for(db_url, settings, "nda", "carol@example.com")
    bob_id = scalar(db_url, "SELECT id FROM mailroom.expected_signers WHERE email = %s", BOB)
    unknown_id = 10**6
    # Carol's MAC on Ada's and Bob's rows, and on a signer id nobody has: all the same "not valid" page.
    rest = carol.split(".", 1)[1]
    swapped = [f"{int(bob_id):x}.{rest}", f"{ada.split('.')[0]}.{rest}", f"{unknown_id:x}.{rest}"]
    other_key = token_for(db_url, Settings(secret_key="another secret key entirely"), "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        bodies = []
        for bad in [*swapped, other_key]:
            async with http.get(server.make_url(f"/s/{bad}")) as resp:
                assert resp.status == 404
                bodies.append(re.sub(r"nonce-?[\"=]?[A-Za-z0-9_\"-]+", "", await resp.text()))
        assert len(set(bodies)) == 1  # no oracle: whether the signer id exists never shows
        resp, _ = await open_and_sign(http, server, carol)
        assert resp.status == 200
    assert [r["signer_email"] for r in signature_rows(db_url, "nda")] == ["carol@example.com"]
    assert signature_rows(db_url, "policy") == []


async def test_superseded_by_a_new_checksum(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            fields = form_fields(await page.text())
        with psycopg.connect(db_url) as conn:
            conn.execute(
                "UPDATE mailroom.documents SET checksum = %s WHERE doc_id = 'policy'", (NEW_CHECKSUM,)
            )
        async with http.post(server.make_url(f"/s/{token}"), data={**fields, "consent": "yes"}) as post:
            text = await post.text()
            assert post.status == 410 and "The document has changed" in text
        async with http.get(server.make_url(f"/s/{token}")) as again:
            assert again.status == 410
        fresh = token_for(db_url, settings, "policy", ADA)  # a link made now names the new checksum
        resp, _ = await open_and_sign(http, server, fresh)
        assert resp.status == 200
    [row] = signature_rows(db_url)
    assert NEW_CHECKSUM in str(
        scalar(db_url, "SELECT payload FROM mailroom.signatures WHERE id = %s", row["id"])
    )


async def test_a_used_link_says_signed_and_a_second_post_is_refused(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            fields = form_fields(await page.text())
        body = {**fields, "consent": "yes"}
        # Two presses at once: one signature, one "already signed".
        first, second = await asyncio.gather(
            http.post(server.make_url(f"/s/{token}"), data=body),
            http.post(server.make_url(f"/s/{token}"), data=body),
        )
        assert sorted([first.status, second.status]) == [200, 409]
        first.release()
        second.release()
        async with http.get(server.make_url(f"/s/{token}")) as used:
            text = await used.text()
            assert used.status == 200 and "Already signed" in text and 'name="consent"' not in text
    assert len(signature_rows(db_url)) == 1
    assert _count(db_url, "email_queue") == 1  # one receipt


async def test_csrf_token_missing_wrong_or_without_its_cookie_signs_nothing(
    db_url: str, settings: Settings
) -> None:
    make_document(db_url, settings, signers=TWO)
    ada = token_for(db_url, settings, "policy", ADA)
    bob = token_for(db_url, settings, "policy", BOB)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{bob}")) as page:
            bobs_csrf = form_fields(await page.text())["csrf"]
        async with http.get(server.make_url(f"/s/{ada}")) as page:
            fields = form_fields(await page.text())
        for data in (
            {"consent": "yes"},
            {"consent": "yes", "csrf": ""},
            {"consent": "yes", "csrf": bobs_csrf},  # another link's form, same browser
            {"consent": "yes", "csrf": fields["csrf"][:-1] + ("a" if fields["csrf"][-1] != "a" else "b")},
        ):
            async with http.post(server.make_url(f"/s/{ada}"), data=data) as post:
                assert post.status == 403 and "Please reload the page" in await post.text()
        # The right token from another browser (no cookie: what a cross-site form would send).
        async with browser() as stranger:
            post = await stranger.post(server.make_url(f"/s/{ada}"), data={**fields, "consent": "yes"})
            assert post.status == 403
            post.release()
        # Not a form at all.
        async with http.post(server.make_url(f"/s/{ada}"), json={**fields, "consent": "yes"}) as post:
            assert post.status == 403
    assert signature_rows(db_url) == []


async def test_consent_box_not_ticked_signs_nothing(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            fields = form_fields(await page.text())
        for consent in ({}, {"consent": "no"}, {"consent": ""}):
            async with http.post(server.make_url(f"/s/{token}"), data={**fields, **consent}) as post:
                assert post.status == 400 and "Tick the box to sign" in await post.text()
    assert signature_rows(db_url) == []


async def test_attacker_text_is_escaped(db_url: str, settings: Settings) -> None:
    title = '<script>alert("t")</script> & "quotes"'
    name = "<img src=x onerror=alert(1)>"
    make_document(db_url, settings, title=title, signers=(("eve@example.com", name, "en"),))
    token = token_for(db_url, settings, "policy", "eve@example.com")
    async with signing_server(db_url, settings) as server, browser() as http:
        headers = {"Referer": '"><script>alert(2)</script>', "Accept-Language": "<b>, *;q=0.5"}
        async with http.get(server.make_url(f"/s/{token}"), headers=headers) as page:
            text = await page.text()
        resp, confirmation = await open_and_sign(http, server, token, **headers)
        assert resp.status == 200
    for body in (text, confirmation):
        assert "<script" not in body and "<img" not in body and "<b>" not in body
        assert "&lt;script&gt;" in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    assert "&#34;&gt;&lt;script&gt;alert(2)" in text  # the referer in its hidden field, escaped
    [row] = signature_rows(db_url)
    assert row["referer"] == '"><script>alert(2)</script>'  # stored as sent, escaped where shown


async def test_rate_limit_per_client(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    limiter = RateLimiter(per_minute=1, burst=3, clock=lambda: 0.0)
    async with signing_server(db_url, settings, limiter=limiter) as server, browser() as http:
        statuses = []
        for _ in range(5):
            async with http.get(server.make_url(f"/s/{token}")) as page:
                statuses.append(page.status)
                retry = page.headers.get("Retry-After")
        async with http.post(server.make_url(f"/s/{token}"), data={"consent": "yes"}) as post:
            assert post.status == 429
    assert statuses == [200, 200, 200, 429, 429] and retry == "60"


async def test_oversized_body_is_refused(db_url: str, settings: Settings) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            fields = form_fields(await page.text())
        data = {**fields, "consent": "yes", "referer": "r" * 20_000}
        async with http.post(server.make_url(f"/s/{token}"), data=data) as post:
            assert post.status == 413
    assert signature_rows(db_url) == []


@pytest.mark.parametrize(
    ("accept", "locale", "expected"),
    [
        ("fr-CH, fr;q=0.9, en;q=0.8", "en", "Signer « Security policy »"),
        (None, "de", "„Security policy“ unterschreiben"),
        ("ja, es;q=0.5", "it", "Firmar «Security policy»"),
        ("ja", "it", "Firma «Security policy»"),
        ("xx" * 400, "fr", "Signer « Security policy »"),
    ],
)
async def test_page_speaks_the_browsers_or_the_signers_language(
    db_url: str, settings: Settings, accept: str | None, locale: str, expected: str
) -> None:
    make_document(db_url, settings, signers=((ADA, "Ada", locale),))
    token = token_for(db_url, settings, "policy", ADA)
    headers = {"Accept-Language": accept} if accept else {}
    async with (
        signing_server(db_url, settings) as server,
        browser() as http,
        http.get(server.make_url(f"/s/{token}"), headers=headers) as page,
    ):
        assert expected in await page.text()


async def test_a_document_requiring_login_is_not_signed_by_the_link_alone(
    db_url: str, settings: Settings
) -> None:
    make_document(db_url, settings, require_login=True)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            text = await page.text()
            assert page.status == 200 and "Sign in to sign" in text and 'name="consent"' not in text
            assert f'href="{token}/login"' in text
        async with http.post(server.make_url(f"/s/{token}"), data={"consent": "yes"}) as post:
            assert post.status == 403
    # Even called directly, the desk refuses a link-only proof for such a document.
    desk = DocumentDesk(db_url, settings)
    proof = Proof(user_sub=f"email:{ADA}", referer=None, ip_address="192.0.2.1", user_agent=None)
    outcome = await asyncio.to_thread(desk.sign, token, proof)
    assert not outcome.signed_now and outcome.view.state is LinkState.VALID
    assert signature_rows(db_url) == []


def test_docs_links_prints_each_signers_working_link(
    db_url: str, settings: Settings, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    make_document(db_url, settings, signers=TWO)
    code, out, _ = run(capsys, "docs", "links", "policy", "--json")
    assert code == 0
    rows: list[dict[str, Any]] = json.loads(out)
    assert [r["email"] for r in rows] == [ADA, BOB]
    assert all(r["url"].startswith("http://localhost:8025/s/") and r["signed_at"] is None for r in rows)
    desk = DocumentDesk(db_url, Settings(secret_key=cli_env["MAILROOM_SECRET_KEY"]))
    views = [desk.view(r["url"].rsplit("/", 1)[1]) for r in rows]
    assert [(v.state, v.signer_email) for v in views] == [(LinkState.VALID, ADA), (LinkState.VALID, BOB)]
    code, out, _ = run(capsys, "docs", "links", "policy")
    assert code == 0 and "valid until" in out and out.count("/s/") == 2
    code, _, err = run(capsys, "docs", "links", "nope")
    assert code == 2 and "nope" in err


async def test_the_login_path_of_a_document_without_login_goes_back_to_its_page(
    db_url: str, settings: Settings
) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}/login"), allow_redirects=False) as resp:
            assert resp.status == 303 and resp.headers["Location"] == f"/s/{token}"
        bad = token[:-1] + ("y" if token.endswith("x") else "x")
        async with http.get(server.make_url(f"/s/{bad}/login"), allow_redirects=False) as resp:
            assert resp.status == 404  # an altered link goes nowhere, to no issuer


async def test_the_cookie_follows_a_https_base_url_with_a_path_prefix(
    db_url: str, settings: Settings
) -> None:
    behind_proxy = replace(settings, base_url="https://sign.example.org/mail/")
    make_document(db_url, behind_proxy)
    token = token_for(db_url, behind_proxy, "policy", ADA)
    async with (
        signing_server(db_url, behind_proxy) as server,
        browser() as http,
        http.get(server.make_url(f"/s/{token}")) as page,
    ):
        cookie = page.headers["Set-Cookie"]
        text = await page.text()
    assert "Path=/mail/s/" in cookie and "Secure" in cookie and "SameSite=Strict" in cookie
    assert f'action="{token}"' in text  # relative: /mail/s/TOKEN as the browser sees it


async def test_docs_add_require_login_makes_the_link_alone_not_enough(
    db_url: str, settings: Settings, cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "docs", "add", "minutes", "--checksum", CHECKSUM, "--require-login")
    assert code == 0 and out.strip().endswith("; signers must log in to sign")
    assert run(capsys, "docs", "expect", "minutes", ADA)[0] == 0
    assert scalar(db_url, "SELECT require_login FROM mailroom.documents WHERE doc_id = 'minutes'") is True
    token = token_for(db_url, settings, "minutes", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            text = await page.text()
            assert "Sign in to sign" in text and 'name="consent"' not in text
        async with http.post(server.make_url(f"/s/{token}"), data={"consent": "yes"}) as post:
            assert post.status == 403
    assert signature_rows(db_url) == []
