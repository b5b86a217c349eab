"""`mailroom tracker` as the installed console script, and the help of the new commands."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from worker.cli.main import main


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_tracker_command_serves_until_sigterm(cli_env: dict[str, str]) -> None:
    port = _free_port()
    script = Path(sys.executable).with_name("mailroom")
    env = {**cli_env, "MAILROOM_BASE_URL": f"http://127.0.0.1:{port}"}
    with subprocess.Popen(
        [str(script), "tracker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stderr is not None
            seen = []
            for (
                line
            ) in process.stderr:  # the port comes from MAILROOM_BASE_URL; wait for the server to say so
                seen.append(line)
                if "tracker listening" in line:
                    break
            assert f"http://127.0.0.1:{port}" in "".join(seen)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
                assert resp.status == 200 and resp.read() == b"ok\n"
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/o/nothing.gif", timeout=10) as resp:
                assert resp.headers["Content-Type"] == "image/gif"
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
    assert process.returncode == 0


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
