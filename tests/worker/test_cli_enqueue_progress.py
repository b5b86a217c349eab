"""`mailroom enqueue` draws a progress bar on a terminal, stays quiet when piped, and keeps stdout machine-readable."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from worker.cli.main import main
from worker.cli.progress import Progress


def mail_file(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "mail.jsonl"
    lines = [json.dumps({"to": f"u{i}@example.com", "subject": f"s{i}", "text": "b"}) for i in range(count)]
    path.write_text("\n".join(lines) + "\n")
    return path


def enqueue(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, terminal: bool, *argv: str
) -> tuple[int, str, str]:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    code = main(["enqueue", *argv, "--jobs", "1"])
    out, err = capsys.readouterr()
    return code, out, err


def test_on_a_terminal_a_bar_is_drawn_on_stderr_and_stdout_holds_only_results(
    cli_env: dict[str, str],
    conn: psycopg.Connection[Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    code, out, err = enqueue(capsys, monkeypatch, True, str(mail_file(tmp_path, 300)), "--batch-size", "50")
    assert code == 0
    assert [json.loads(line)["line"] for line in out.splitlines()] == list(range(1, 301))
    drawn = err.split("\r")
    assert len(drawn) >= 2 and "[" + "#" * 28 + "] 100%  300 lines" in drawn[-1]
    assert err.splitlines()[-1].startswith("enqueue: 300 accepted, 0 rejected in ")
    row = conn.execute("SELECT count(*) AS n FROM mailroom.email_queue").fetchone()
    assert row == {"n": 300}


def test_piped_it_writes_only_the_final_count(
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    code, out, err = enqueue(capsys, monkeypatch, False, str(mail_file(tmp_path, 120)), "--batch-size", "50")
    assert code == 0 and len(out.splitlines()) == 120
    assert "\r" not in err and err.splitlines() == [err.strip()]
    assert err.startswith("enqueue: 120 accepted, 0 rejected")


def test_progress_and_no_progress_override_what_the_terminal_suggests(
    cli_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    path = str(mail_file(tmp_path, 120))
    _, _, err = enqueue(capsys, monkeypatch, True, path, "--batch-size", "50", "--no-progress")
    assert "\r" not in err and "lines done" not in err
    _, out, err = enqueue(capsys, monkeypatch, False, path, "--batch-size", "50", "--progress")
    lines = err.splitlines()
    assert "\r" not in err and [line.split(" lines done")[0] for line in lines[:-1]] == [
        "enqueue: 50",
        "enqueue: 100",
        "enqueue: 120",
        "enqueue: 120",
    ]
    assert len(out.splitlines()) == 120


def test_the_bar_shows_share_and_time_left_and_redraws_at_most_ten_times_a_second() -> None:
    now = [0.0]
    stream = io.StringIO()
    progress = Progress(stream, "enqueue", 1000, bar=True, clock=lambda: now[0])
    now[0] = 2.0
    progress.update(100, 250)
    now[0] = 2.05
    progress.update(120, 300)  # too soon: not drawn
    now[0] = 4.0
    progress.update(200, 500)
    progress.finish(400)
    frames = stream.getvalue().split("\r")[1:]
    assert len(frames) == 3
    assert "25%" in frames[0] and "about 6s left" in frames[0]
    assert "50%" in frames[1] and "about 4s left" in frames[1] and "200 lines" in frames[1]
    assert "100%" in frames[2] and "left" not in frames[2] and frames[2].endswith("\n")
