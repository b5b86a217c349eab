"""`mailroom tracker` serves the bounce webhooks with the secrets it reads from the environment."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.producers.bounces.corpus import sent_email
from tests.tracking.webhook_helpers import SECRET, dumps, signed_headers, state
from worker.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 -- a local http URL
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 -- same
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_settings_read_the_webhook_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAILROOM_WEBHOOK_SECRET", "s3cret")
    monkeypatch.setenv("MAILROOM_POSTMARK_WEBHOOK_USER", "pm")
    monkeypatch.setenv("MAILROOM_POSTMARK_WEBHOOK_PASSWORD", "pw")
    monkeypatch.setenv("MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY", "MFkw")
    monkeypatch.setenv("MAILROOM_SES_TOPIC_ARNS", "arn:aws:sns:eu-west-1:1:a, arn:aws:sns:eu-west-1:1:b")
    settings = Settings.from_env()
    assert (settings.webhook_secret, settings.postmark_webhook_user, settings.postmark_webhook_password) == (
        "s3cret",
        "pm",
        "pw",
    )
    assert settings.sendgrid_webhook_public_key == "MFkw"
    assert settings.ses_topic_arns == ("arn:aws:sns:eu-west-1:1:a", "arn:aws:sns:eu-west-1:1:b")


@pytest.mark.e2e
def test_the_tracker_command_applies_a_signed_webhook_and_hides_unconfigured_ones(
    cli_env: dict[str, str], db_url: str
) -> None:
    email = sent_email(db_url, "gone@example.net")
    port = _free_port()
    env = {**cli_env, "MAILROOM_BASE_URL": f"http://127.0.0.1:{port}", "MAILROOM_WEBHOOK_SECRET": SECRET}
    argv = [sys.executable, "-m", "worker.cli.main", "tracker"]
    with subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert process.stderr is not None
            for line in process.stderr:
                if "tracker listening" in line:
                    break
            body = dumps({"recipient": "gone@example.net", "type": "hard", "email_id": email["id"]})
            base = f"http://127.0.0.1:{port}/webhooks"
            status, answer = _post(f"{base}/bounces", body, signed_headers(body))
            unconfigured = _post(f"{base}/postmark", b"{}", {"Content-Type": "application/json"})[0]
        finally:
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
    assert (status, json.loads(answer)) == (202, {"accepted": 1})
    assert unconfigured == 404
    assert state(db_url, email["id"])["status"] == "bounced"
