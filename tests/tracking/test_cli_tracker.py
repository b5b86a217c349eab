"""`mailroom tracker` as the installed console script, and the help of the new commands."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.e2e
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
