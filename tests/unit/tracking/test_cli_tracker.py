"""The tracking commands explain themselves."""

from __future__ import annotations

import pytest

from worker.cli.main import main


@pytest.mark.parametrize("argv", [["tracker"], ["campaigns"], ["campaigns", "stats"], ["senders", "add"]])
def test_new_commands_explain_themselves(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert f"Usage: mailroom {' '.join(argv)}" in out
    if argv == ["tracker"]:
        assert "never unsubscribes" in out and "--port" in out
    if argv == ["campaigns"]:
        assert "reference" not in out and "campaign_id" in out and "stats" in out
    if argv == ["senders", "add"]:
        assert "--dkim-key-file" in out
