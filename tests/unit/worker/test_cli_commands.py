"""The command line without a database: every command has help, passwords are never flag values, keys are new and private."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli import run
from worker.cli.main import main


def test_password_is_never_a_flag_value(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["senders", "add", "s", "--from", "a@example.com", "--host", "h", "--password", "x"]
    assert main(argv) == 2
    assert "--password" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["db"],
        ["enqueue"],
        ["senders"],
        ["senders", "add"],
        ["stats"],
        ["retry"],
        ["cancel"],
        ["sink"],
        ["keygen"],
        ["demo"],
    ],
)
def test_every_command_has_help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--help"]) == 0
    assert "Usage: mailroom" in capsys.readouterr().out


def test_keygen_prints_a_usable_key(capsys: pytest.CaptureFixture[str]) -> None:
    from worker.core.crypto import SecretBox

    code, out, _ = run(capsys, "keygen")
    box = SecretBox(out.strip())
    assert code == 0 and box.decrypt(box.encrypt("x")) == "x"


def test_demo_key_file_is_private(tmp_path: Path) -> None:
    from worker.core.crypto import write_key_file

    path = tmp_path / "home" / "secret.key"
    key = write_key_file(path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert write_key_file(path) == key
