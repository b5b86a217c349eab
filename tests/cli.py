"""Run the `mailroom` command line in-process, and play the operator's terminal (or its absence)."""

from __future__ import annotations

import getpass
import io
import sys

import pytest

from worker.cli.main import main


def run(
    capsys: pytest.CaptureFixture[str],
    *argv: str,
    stdin: str | None = None,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> tuple[int, str, str]:
    """Run `mailroom ARGV` in this process (reading `stdin` when given): exit status, standard output, error."""
    if stdin is not None:
        assert monkeypatch is not None, "feeding standard input needs the monkeypatch fixture"
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def on_terminal(monkeypatch: pytest.MonkeyPatch, answers: str, password: str = "") -> None:
    """Standard input is a terminal on which the operator types `answers` (and `password` when asked)."""
    stdin = io.StringIO(answers)
    monkeypatch.setattr(stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(getpass, "getpass", lambda prompt="": password)


def not_on_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Standard input is not a terminal (a pipe, a cron job): nothing can be asked."""
    stdin = io.StringIO("")
    monkeypatch.setattr(stdin, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(sys, "stdin", stdin)
