"""The template catalog's shared parts: what `{% include %}` finds, and what it refuses."""

from __future__ import annotations

import pytest

from worker.core.templates import TemplateCatalog, TemplateSource, builtin_templates
from worker.core.validation import ValidationError

ITEMS = [{"quantity": 2, "name": "Mug", "line_total": "10.00"}]


def test_order_templates_show_the_shared_items_table_in_every_locale() -> None:
    catalog = TemplateCatalog(builtin_templates())
    data = {"customer_name": "Ada", "order_number": "A-1", "total": "10.00 EUR", "items": ITEMS}
    for locale in ("en", "fr"):
        html = catalog.render("order_placed", locale, data).html_body
        assert html is not None
        assert "<tr><td>2 x</td><td>Mug</td><td>10.00</td></tr>" in html
        assert "</table>\n<p>" in html  # the part leaves the line break to the including line


def test_an_unknown_part_is_a_validation_error_naming_it() -> None:
    stored = TemplateSource("note", "en", "Hi", None, '{% include "no_such_part.html" %}')
    catalog = TemplateCatalog([stored])
    with pytest.raises(ValidationError, match=r"no_such_part\.html"):
        catalog.render("note", "en", {})
