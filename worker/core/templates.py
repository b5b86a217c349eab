"""Email templates: built-in files overridden by rows of `mailroom.templates`, rendered in a Jinja2 sandbox."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from worker.core.validation import ValidationError

BUILTIN_DIR = Path(__file__).parent / "templates"
# Pieces several templates show alike (an order's items in every locale), for `{% include "name" %}`.
PARTS_DIR = BUILTIN_DIR / "_parts"
_LOCALE = re.compile(r"^[a-z]{2}(-[A-Z]{2})?$")

_PARTS = jinja2.FileSystemLoader(PARTS_DIR, encoding="utf-8")
_TEXT_ENV = SandboxedEnvironment(
    loader=_PARTS, undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
)
_HTML_ENV = SandboxedEnvironment(
    loader=_PARTS, undefined=jinja2.StrictUndefined, autoescape=True, keep_trailing_newline=True
)


@dataclass(frozen=True)
class TemplateSource:
    """One template in one locale: Jinja2 sources for the subject and the bodies."""

    name: str
    locale: str
    subject: str
    text_body: str | None
    html_body: str | None


@dataclass(frozen=True)
class Rendered:
    """What a template produced for one email; this, not the template, is what gets sent."""

    subject: str
    text_body: str | None
    html_body: str | None
    locale: str


@cache
def builtin_templates() -> tuple[TemplateSource, ...]:
    """Load the templates shipped in `worker/templates/<name>/<locale>.{subject,txt,html}`."""
    found: list[TemplateSource] = []
    for subject_file in sorted(BUILTIN_DIR.glob("*/*.subject")):
        name, locale = subject_file.parent.name, subject_file.stem
        text_file, html_file = subject_file.with_suffix(".txt"), subject_file.with_suffix(".html")
        found.append(
            TemplateSource(
                name=name,
                locale=locale,
                subject=subject_file.read_text(encoding="utf-8").strip(),
                text_body=text_file.read_text(encoding="utf-8") if text_file.exists() else None,
                html_body=html_file.read_text(encoding="utf-8") if html_file.exists() else None,
            )
        )
    return tuple(found)


@lru_cache(maxsize=512)
def _compile(source: str, html: bool) -> jinja2.Template:
    env = _HTML_ENV if html else _TEXT_ENV
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValidationError("template", f"template does not compile: {exc}") from None


class TemplateCatalog:
    """The templates an enqueue can use; database rows win over built-in files of the same name and locale."""

    def __init__(self, sources: Iterable[TemplateSource], default_locale: str = "en") -> None:
        self.default_locale = default_locale
        self._by_key: dict[tuple[str, str], TemplateSource] = {}
        for source in sources:
            self._by_key[(source.name, source.locale)] = source
        self.names = frozenset(name for name, _ in self._by_key)
        self.locales = frozenset(locale for _, locale in self._by_key) | {default_locale}

    def resolve(self, name: str, locale: str | None) -> TemplateSource:
        """Find `name` in `locale`, falling back to its language, then to the default locale."""
        if name not in self.names:
            raise ValidationError("template", f"unknown template {name!r}")
        wanted = locale or self.default_locale
        if not _LOCALE.match(wanted):
            raise ValidationError("locale", f"{wanted!r} is not a locale like 'en' or 'fr-CA'")
        language = wanted.split("-")[0]
        if wanted not in self.locales and language not in self.locales:
            raise ValidationError(
                "locale", f"unknown locale {wanted!r}; known: {', '.join(sorted(self.locales))}"
            )
        for candidate in (wanted, language, self.default_locale):
            source = self._by_key.get((name, candidate))
            if source is not None:
                return source
        raise ValidationError(
            "locale", f"template {name!r} has no {wanted!r} or {self.default_locale!r} version"
        )

    def render(self, name: str, locale: str | None, data: Mapping[str, Any] | None) -> Rendered:
        """Render subject, text and HTML (autoescaped) with `data`; a missing variable is a clear error."""
        source = self.resolve(name, locale)
        context = dict(data or {})
        try:
            subject = _compile(source.subject, False).render(context).strip()
            text = _compile(source.text_body, False).render(context) if source.text_body else None
            html = _compile(source.html_body, True).render(context) if source.html_body else None
        except jinja2.UndefinedError as exc:
            raise ValidationError("data", f"template {name!r} needs {exc.message}") from None
        except jinja2.exceptions.SecurityError as exc:
            raise ValidationError("data", f"template {name!r} refused unsafe access: {exc}") from None
        except jinja2.TemplateNotFound as exc:
            raise ValidationError(
                "template", f"template {name!r} includes unknown part {exc.name!r}"
            ) from None
        return Rendered(subject=subject, text_body=text, html_body=html, locale=source.locale)


# Through the function an application role may call (it may not read the table): the one way to read them.
SELECT_TEMPLATES = "SELECT name, locale, subject, text_body, html_body FROM mailroom.enqueue_templates()"


def catalog_from_rows(rows: Iterable[Mapping[str, Any]], default_locale: str) -> TemplateCatalog:
    """Build the catalog from built-in templates plus `mailroom.templates` rows (which win)."""
    stored = [
        TemplateSource(
            name=row["name"],
            locale=row["locale"],
            subject=row["subject"],
            text_body=row["text_body"],
            html_body=row["html_body"],
        )
        for row in rows
    ]
    return TemplateCatalog([*builtin_templates(), *stored], default_locale)
