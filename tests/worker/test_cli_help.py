"""`mailroom --help` and every command's help read as written for people: what it does, exit status, examples."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
from collections.abc import Iterator

import pytest

import worker.cli.commands
from worker.cli.main import build_parser, main


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, bool]]:
    """Every parser under `parser` with its command path and whether it runs something (a leaf)."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    yield path, parser, not groups
    for group in groups:
        for name, child in group.choices.items():
            yield from _commands(child, (*path, name))


def _docstrings() -> set[str]:
    """The docstrings of every function in the command modules: help must not be one of them."""
    found: set[str] = set()
    for info in pkgutil.iter_modules(worker.cli.commands.__path__):
        module = importlib.import_module(f"worker.cli.commands.{info.name}")
        for _, function in inspect.getmembers(module, inspect.isfunction):
            if function.__doc__:
                found.add(function.__doc__.strip())
    return found


COMMANDS = list(_commands(build_parser()))


def test_the_walk_reaches_every_action() -> None:
    paths = {" ".join(path) for path, _, _ in COMMANDS}
    assert {"", "senders add", "senders edit", "senders remove", "db backup", "docs verify"} <= paths
    assert len(paths) > 60


@pytest.mark.parametrize(
    ("path", "parser", "leaf"), COMMANDS, ids=[" ".join(p) or "mailroom" for p, _, _ in COMMANDS]
)
def test_each_command_has_a_description_with_examples_and_its_exit_status(
    path: tuple[str, ...], parser: argparse.ArgumentParser, leaf: bool
) -> None:
    text = parser.description or ""
    lines = text.splitlines()
    formatter = parser.formatter_class
    assert isinstance(formatter, type) and issubclass(formatter, argparse.RawDescriptionHelpFormatter)
    assert text.strip() and text.strip() not in _docstrings()
    assert all(len(line) <= 100 for line in lines), "lines as written must fit a terminal"
    heading = next(i for i, line in enumerate(lines) if line in ("Example:", "Examples:"))
    examples = [line for line in lines[heading + 1 :] if line.startswith("  ")]
    assert any("mailroom" in line for line in examples)
    if path:
        assert any(f"mailroom {' '.join(path)}" in line for line in examples), "an example runs it"
    if leaf or not path:
        assert "exit status" in text.lower()


def test_help_prints_the_description_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["senders", "remove", "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert "Examples:\n  mailroom senders remove" in out
