"""The signing page (`worker/tracking/signing.py`) over real HTTP against what a client can put on the
wire: a body streamed in chunks with no length announced, a link with a trailing newline."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest

from tests.tracking.signing_helpers import (
    browser,
    form_fields,
    make_document,
    signature_rows,
    signing_server,
    token_for,
)
from worker.core.config import Settings
from worker.tracking.signing import MAX_BODY

ADA = "ada@example.com"
FORM = "application/x-www-form-urlencoded"


async def _chunks(body: bytes, size: int = 4096) -> AsyncIterator[bytes]:
    """`body` streamed: aiohttp sends it chunked (Transfer-Encoding: chunked, no Content-Length)."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def _without_nonce(page: str) -> str:
    return re.sub(r'nonce="[^"]*"', 'nonce=""', page)


def _urlencoded(fields: dict[str, str]) -> bytes:
    return urlencode(fields).encode()


def _multipart(fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = "mailroom-test-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in fields.items()
    ]
    return ("".join(parts) + f"--{boundary}--\r\n").encode(), f"multipart/form-data; boundary={boundary}"


def _encoded(fields: dict[str, str], encoding: str) -> tuple[bytes, dict[str, str]]:
    body, content_type = _multipart(fields) if encoding == "multipart" else (_urlencoded(fields), FORM)
    return body, {"Content-Type": content_type}


@pytest.mark.parametrize("encoding", ["urlencoded", "multipart"])
async def test_a_chunked_body_past_the_cap_is_refused_413_and_signs_nothing(
    db_url: str, settings: Settings, encoding: str
) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}")) as page:
            fields = {**form_fields(await page.text()), "consent": "yes"}
        body, headers = _encoded({**fields, "referer": "r" * (60 * 1024)}, encoding)
        async with http.post(server.make_url(f"/s/{token}"), data=_chunks(body), headers=headers) as post:
            assert post.request_info.headers.get("Transfer-Encoding") == "chunked"
            assert "Content-Length" not in post.request_info.headers
            assert post.status == 413
        assert signature_rows(db_url) == []
        # The same form under the cap, chunked too, signs: the cap is on size, not on chunking.
        body, headers = _encoded(fields, encoding)
        assert len(body) < MAX_BODY
        async with http.post(server.make_url(f"/s/{token}"), data=_chunks(body, 16), headers=headers) as post:
            assert post.status == 200, await post.text()
    assert [row["signer_email"] for row in signature_rows(db_url)] == [ADA]


async def test_a_link_with_a_trailing_newline_is_not_valid_and_signs_nothing(
    db_url: str, settings: Settings
) -> None:
    make_document(db_url, settings)
    token = token_for(db_url, settings, "policy", ADA)
    async with signing_server(db_url, settings) as server, browser() as http:
        async with http.get(server.make_url(f"/s/{token}x")) as resp:
            not_valid = await resp.text()  # a link that is plainly not one: the page every such link gets
        async with http.get(server.make_url(f"/s/{token}%0A")) as resp:
            page = await resp.text()
            assert resp.status == 404
            assert "This link is not valid" in page and ADA not in page and "Security policy" not in page
            assert form_fields(page) == {}
        assert _without_nonce(page) == _without_nonce(not_valid)  # the very same page
        # The real link's form, posted to the newline link, signs nothing either.
        async with http.get(server.make_url(f"/s/{token}")) as resp:
            fields = {**form_fields(await resp.text()), "consent": "yes"}
        async with http.post(server.make_url(f"/s/{token}%0A"), data=fields) as post:
            assert post.status == 404
        async with http.get(server.make_url(f"/s/{token}%0A/login")) as resp:
            assert resp.status == 404
    assert signature_rows(db_url) == []
