"""MkDocs hook: the reference pages, generated from the code at build time so they cannot drift.

`on_files` adds four pages under `reference/`: every command's `--help`, every `MAILROOM_*` setting
with its default (from `worker.core.config.DECLARED`), every package and module with the summary
of its docstring, and the public names of `import mailroom` with their signatures and docstrings.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import pkgutil
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from worker.core.config import DECLARED, Setting

PACKAGES = ("mailroom", "worker", "console", "migrations")


def _fenced(text: str) -> str:
    """Text shown exactly as written, in a fence longer than any run of backticks inside it."""
    fence = "`" * max(3, max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence}text\n{text.rstrip()}\n{fence}\n"


def _cell(text: str) -> str:
    """A Markdown table cell: pipes escaped, on one line."""
    return " ".join(text.split()).replace("|", "\\|")


def commands_page() -> str:
    """Every `mailroom` command's `--help`, one section per command, as the command prints it."""
    from console.cli import help_pages

    parts = [
        "# Command line\n",
        "Generated from the commands themselves at build time: each section is exactly what "
        "`mailroom ... --help` prints.\n",
    ]
    for path, text in help_pages():
        parts.append(f"## {' '.join(('mailroom', *path))}\n")
        parts.append(_fenced(text))
    return "\n".join(parts)


def _default(setting: Setting) -> str:
    """A setting's default as a reader wants it: the declaration's wording, else the value."""
    if setting.shown is not None:
        return str(setting.shown)
    value = setting.default
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def settings_page() -> str:
    """Every `MAILROOM_*` variable with its default and meaning, from the settings' declaration."""
    rows = []
    for s in DECLARED:
        bound = f" (at least {s.minimum:g})" if s.minimum else ""
        rows.append(f"| `{s.env}` | {_cell(_default(s))} | {_cell(s.meaning)}{bound} |")
    return "\n".join(
        [
            "# Settings\n",
            "Mailroom reads its settings from the environment; an unset or empty variable takes the "
            "default. Generated at build time from `worker.core.config.DECLARED`, the one place each "
            "setting is declared. A malformed value stops the command with exit status 2 and one line "
            "naming the variable.\n",
            "| variable | default | meaning |",
            "| --- | --- | --- |",
            *rows,
            "",
        ]
    )


def _modules(package: str) -> Iterator[tuple[str, Path]]:
    """Every package and module under `package`, with its source file, found without importing them."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise RuntimeError(f"package {package!r} is not importable")
    yield package, Path(spec.origin)
    todo = [(package, Path(spec.origin).parent)]
    while todo:
        prefix, folder = todo.pop(0)
        for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda i: i.name):
            name = f"{prefix}.{info.name}"
            if info.ispkg:
                yield name, folder / info.name / "__init__.py"
                todo.append((name, folder / info.name))
            else:
                yield name, folder / f"{info.name}.py"


def _summary(source: Path) -> str:
    """The first paragraph of a module's docstring (its summary), read from its source on one line."""
    docstring = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8")))
    return " ".join(docstring.split("\n\n")[0].split()) if docstring else ""


def layout_page() -> str:
    """Every package and module of Mailroom with the first line of its docstring."""
    parts = [
        "# Layout\n",
        "Generated at build time by walking the packages, so no module is left out. The worker's "
        "rooms import downwards only (`cli` → `producers`, `tracking`, `ops` → `engine` → `core`), "
        "which import-linter checks in the test command.\n",
    ]
    for package in PACKAGES:
        parts.append(f"## `{package}`\n")
        parts.append("| module | what it is |")
        parts.append("| --- | --- |")
        parts += [f"| `{name}` | {_cell(_summary(path))} |" for name, path in _modules(package)]
        parts.append("")
    return "\n".join(parts)


class _Annotation:
    """An annotation written as a string, shown without quotes."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _signature(obj: Any) -> str:
    """The call signature as the source writes it; a class's without its `-> None`."""
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return ""

    def unquoted(annotation: Any) -> Any:
        return _Annotation(annotation) if isinstance(annotation, str) else annotation

    parameters = [p.replace(annotation=unquoted(p.annotation)) for p in signature.parameters.values()]
    returns = inspect.Signature.empty if inspect.isclass(obj) else unquoted(signature.return_annotation)
    text = str(signature.replace(parameters=parameters, return_annotation=returns))
    if len(text) <= 100:
        return text
    # One parameter a line, as a formatter would write a long definition.
    tail = "" if returns is inspect.Signature.empty else f" -> {returns!r}"
    kinds = [p.kind for p in parameters]
    # The bare `*` before the first keyword-only parameter, unless `*args` stands there.
    star = (
        None
        if inspect.Parameter.VAR_POSITIONAL in kinds
        else next((i for i, kind in enumerate(kinds) if kind is inspect.Parameter.KEYWORD_ONLY), None)
    )
    lines = []
    for i, parameter in enumerate(parameters):
        lines += ["*"] if i == star else []
        lines.append(str(parameter))
        if kinds[i] is inspect.Parameter.POSITIONAL_ONLY and kinds[i + 1 : i + 2] != [kinds[i]]:
            lines.append("/")
    return "(\n" + "".join(f"    {line},\n" for line in lines) + ")" + tail


def api_page() -> str:
    """The public names of `import mailroom`: each one's signature and docstring."""
    import mailroom

    parts = [
        "# Python API reference\n",
        "Generated at build time from `mailroom.__all__`: the stable face of Mailroom for "
        "applications. See [the Python API guide](../python-api.md) for how to use it.\n",
    ]
    for name in getattr(mailroom, "__all__", ()):
        obj = getattr(mailroom, name)
        kind = "class" if inspect.isclass(obj) else "def"
        parts.append(f"## `mailroom.{name}`\n")
        parts.append(f"```python\n{kind} {name}{_signature(obj)}\n```\n")
        parts.append(_fenced(inspect.getdoc(obj) or ""))
    return "\n".join(parts)


PAGES: dict[str, Callable[[], str]] = {
    "reference/commands.md": commands_page,
    "reference/settings.md": settings_page,
    "reference/layout.md": layout_page,
    "reference/python-api.md": api_page,
}


def on_files(files: Files, /, *, config: MkDocsConfig) -> Files:
    """Add the generated reference pages to the site's files."""
    for uri, build in PAGES.items():
        files.append(File.generated(config, uri, content=build()))
    return files
