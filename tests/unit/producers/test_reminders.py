"""The reminder template renders in every locale."""

from __future__ import annotations

import pytest

from worker.core.templates import catalog_from_rows


@pytest.mark.parametrize("locale", ["en", "fr", "es", "de", "it"])
def test_reminder_template_renders_in_every_locale(locale: str) -> None:
    data = {"name": "Ada", "title": "Policy", "doc_id": "policy", "url": "", "description": ""}
    rendered = catalog_from_rows([], "en").render("signature_reminder", locale, data)
    assert rendered.locale == locale
    assert "Policy" in rendered.subject and "Ada" in (rendered.text_body or "")
    assert "href" not in (rendered.html_body or "")  # no link without a URL
