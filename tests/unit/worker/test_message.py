"""The message builder writes what a standard parser reads back as the stored content."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import default

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.core.message import build_message

BODY = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=300
)
NAME = st.one_of(
    st.none(), st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=40)
)


def _normal(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")


@settings(max_examples=300, deadline=None, derandomize=bool(os.environ.get("CI")))
@given(
    text=BODY,
    html=st.one_of(st.none(), BODY),
    name=NAME,
    subject=st.text(
        alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=120
    )
    .map(str.strip)
    .filter(bool),
)
def test_built_message_parses_back_to_the_stored_content(
    text: str, html: str | None, name: str | None, subject: str
) -> None:
    row = {
        "id": 7,
        "created_at": datetime(2026, 11, 21, tzinfo=UTC),
        "recipient_email": "user@example.com",
        "recipient_name": name or None,
        "subject": subject,
        "text_body": text,
        "html_body": html,
        "headers": {"X-Tag": "é" * 50},
    }
    envelope = build_message(row, "noreply@example.org", "Mailroom Ünïcode")
    assert all(len(line) <= 998 for line in envelope.content.split(b"\r\n"))
    parsed = BytesParser(policy=default).parsebytes(envelope.content)
    assert parsed["Subject"] == subject
    assert parsed["To"].addresses[0].addr_spec == "user@example.com"
    assert parsed["From"].addresses[0].display_name == "Mailroom Ünïcode"
    assert parsed["X-Tag"] == "é" * 50
    plain = parsed.get_body(preferencelist=("plain",))
    assert plain is not None
    assert _normal(plain.get_content()) == _normal(text)
    if html is not None:
        rich = parsed.get_body(preferencelist=("html",))
        assert rich is not None
        assert _normal(rich.get_content()) == _normal(html)
