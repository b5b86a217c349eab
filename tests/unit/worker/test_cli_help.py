"""`mailroom --help` and every command's help read as written for people: what it does, exit status,
examples; the top level loads no command module; earlier spellings still run."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import worker.cli
from console.cli import ENTRIES
from worker.cli.commands import ENTRIES as WORKER_ENTRIES
from worker.cli.main import main
from worker.cli.reference import commands, help_pages

PAGES = dict(help_pages(ENTRIES))
ENTRIES_ALL = {**WORKER_ENTRIES, **ENTRIES}
CLI = Path(worker.cli.__file__).parent


def _runs_something(path: tuple[str, ...]) -> bool:
    ctx = dict(commands(ENTRIES))[path]
    return not hasattr(ctx.command, "commands") or bool(getattr(ctx.command, "invoke_without_command", False))


def test_the_walk_reaches_every_action() -> None:
    paths = {" ".join(path) for path in PAGES}
    assert {
        "",
        "senders add",
        "senders edit",
        "senders remove",
        "db backup",
        "docs verify",
        "console",
    } <= paths
    assert {"keys generate", "orders ingest"} <= paths
    assert len(paths) > 60


@pytest.mark.parametrize("path", list(PAGES), ids=[" ".join(p) or "mailroom" for p in PAGES])
def test_each_command_has_a_description_with_examples_and_its_exit_status(path: tuple[str, ...]) -> None:
    ctx = dict(commands(ENTRIES))[path]
    text = ctx.command.help or ""
    lines = text.splitlines()
    assert text.strip() and ctx.command.callback is not None
    assert text.strip() != (ctx.command.callback.__doc__ or "").strip(), "help is written for people"
    assert all(len(line) <= 100 for line in PAGES[path].splitlines()), "help must fit a terminal"
    heading = next(i for i, line in enumerate(lines) if line in ("Example:", "Examples:"))
    examples = [line for line in lines[heading + 1 :] if line.startswith("  ")]
    assert any("mailroom" in line for line in examples)
    if path:
        assert any(f"mailroom {' '.join(path)}" in line for line in examples), "an example runs it"
    if _runs_something(path) or not path:
        assert "exit status" in text.lower()
    assert not re.search(r"\breference 0\d", text), "no internal reference numbers in help"


def test_help_prints_the_description_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["senders", "remove", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Usage: mailroom senders remove")
    assert "Examples:\n  mailroom senders remove" in out


def test_the_top_level_lists_every_command_by_section_but_not_the_old_spellings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"], extra=ENTRIES) == 0
    out = capsys.readouterr().out
    listed = set(re.findall(r"^  ([a-z]+)  ", out, flags=re.M))
    assert listed == {name for name, entry in ENTRIES_ALL.items() if not entry.alias_of}
    assert "Send and deliver:" in out and "Administer:" in out


def test_an_old_spelling_runs_the_new_command_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keygen"]) == 0
    out, err = capsys.readouterr()
    assert len(out.strip()) == 44  # a Fernet key, as `keys generate` prints it
    assert "`mailroom keygen` is now `mailroom keys generate`" in err


def test_each_listed_summary_is_the_commands_own_line() -> None:
    """The top level prints summaries from the table without loading the commands: they are theirs."""
    for path, ctx in commands(ENTRIES):
        if len(path) == 1:
            assert ctx.command.short_help == ENTRIES_ALL[path[0]].summary


def test_mailroom_help_loads_no_command_module_and_no_database_driver() -> None:
    code = (
        "import sys; from console.cli import main; main(['--help']);"
        "print(sorted(m for m in sys.modules if m.startswith(('worker.cli.commands.', 'psycopg', 'worker.core.'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    # console.cli borrows the demo's options from dev.py; nothing else is loaded to print the list.
    assert loaded == ["worker.cli.commands.dev"]


def test_no_command_module_uses_argparse() -> None:
    for path in CLI.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert "argparse" not in imported, path.name
