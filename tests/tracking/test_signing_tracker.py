"""`mailroom tracker` serves the signing page of the links `mailroom docs links` prints."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.e2e
def test_the_tracker_command_serves_the_links_docs_links_prints(cli_env: dict[str, str]) -> None:
    port = _free_port()
    script = str(Path(sys.executable).with_name("mailroom"))
    env = {**cli_env, "MAILROOM_BASE_URL": f"http://127.0.0.1:{port}"}
    checksum = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    for argv in (
        ["docs", "add", "policy-2026", "--title", "Security policy", "--checksum", checksum],
        ["docs", "expect", "policy-2026", "ada@example.com", "--name", "Ada Lovelace"],
    ):
        subprocess.run([script, *argv], env=env, check=True, capture_output=True, timeout=60)
    printed = subprocess.run(
        [script, "docs", "links", "policy-2026", "--json"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    [link] = json.loads(printed.stdout)
    assert link["url"].startswith(f"http://127.0.0.1:{port}/s/")
    path = urlsplit(link["url"]).path
    altered = path[:-1] + ("b" if path.endswith("a") else "a")
    with subprocess.Popen(
        [script, "tracker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stderr is not None
            for line in process.stderr:
                if "tracker listening" in line:
                    break
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
                page = resp.read().decode("utf-8")
                assert resp.status == 200 and "default-src 'none'" in resp.headers["Content-Security-Policy"]
            assert "Ada Lovelace" in page and "ada@example.com" in page and checksum in page
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(f"http://127.0.0.1:{port}{altered}", timeout=10)
            refused.value.close()
            assert refused.value.code == 404
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
    assert process.returncode == 0
