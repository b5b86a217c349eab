"""The receipt and the reminder's signing link render in every locale the reminder has."""

from __future__ import annotations

import pytest

from worker.core.templates import builtin_templates, catalog_from_rows

LOCALES = sorted(t.locale for t in builtin_templates() if t.name == "signature_reminder")


def test_the_receipt_has_every_locale_the_reminder_has() -> None:
    receipt = sorted(t.locale for t in builtin_templates() if t.name == "signature_receipt")
    assert receipt == LOCALES and len(LOCALES) == 5


@pytest.mark.parametrize("locale", LOCALES)
def test_receipt_names_the_signature_time_and_payload_hash(locale: str) -> None:
    data = {"name": "Ada <b>", "title": "Policy", "doc_id": "policy", "signature_id": 42,
            "signed_at": "2026-11-26T10:00:00.000000Z", "payload_hash": "f" * 64,
            "checksum": "a" * 64, "checksum_algorithm": "SHA-256"}  # fmt: skip
    rendered = catalog_from_rows([], "en").render("signature_receipt", locale, data)
    assert rendered.locale == locale and "Policy" in rendered.subject
    for body in (rendered.text_body or "", rendered.html_body or ""):
        assert (
            "#42" in body and "f" * 64 in body and "2026-11-26T10:00:00.000000Z" in body and "a" * 64 in body
        )
    assert "Ada &lt;b&gt;" in (rendered.html_body or "")


@pytest.mark.parametrize("locale", LOCALES)
def test_reminder_carries_the_signers_link_when_given(locale: str) -> None:
    data = {"name": "Ada", "title": "Policy", "doc_id": "policy", "url": "", "description": "",
            "signing_url": "https://t.example.com/s/1.abc.defghijk.mnopqrstuvwxyz234567abcdef"}  # fmt: skip
    rendered = catalog_from_rows([], "en").render("signature_reminder", locale, data)
    assert data["signing_url"] in (rendered.text_body or "")
    assert f'href="{data["signing_url"]}"' in (rendered.html_body or "")
    without = catalog_from_rows([], "en").render("signature_reminder", locale, {**data, "signing_url": ""})
    assert "/s/" not in (without.text_body or "") and "href" not in (without.html_body or "")
