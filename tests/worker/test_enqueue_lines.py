"""`mailroom enqueue` never loses good lines: every bad line gets its own error line, the rest are stored once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest


def _line(i: int) -> bytes:
    return json.dumps({"to": f"u{i}@example.com", "subject": f"Hello {i}", "text": "body"}).encode() + b"\n"


@pytest.mark.e2e
def test_a_batch_with_bad_lines_stores_every_good_line_once_and_reports_each_bad_one(
    db_url: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    bad = {
        100: b'{"to": "a@example.com", "subject": "caf\xe9 \xff", "text": "x"}\n',  # invalid UTF-8
        200: b"[" * 100_000 + b"]" * 100_000 + b"\n",  # too deep
        300: b'{"to": "a@example.com", "to": "b@example.com", "subject": "s", "text": "t"}\n',
        400: b'"just a string"\n',
        500: b'{"to": "a@example.com", "subject": "s"}\n',  # no body
    }
    lines = [bad.get(n) or _line(n) for n in range(1, 2006)]
    path = tmp_path / "mail.jsonl"
    path.write_bytes(b"".join(lines))
    script = Path(sys.executable).with_name("mailroom")
    done = subprocess.run(
        [str(script), "enqueue", str(path), "--batch-size", "300"], env=cli_env, capture_output=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert b"Traceback" not in done.stderr
    results = [json.loads(r) for r in done.stdout.splitlines()]
    assert [r["line"] for r in results] == list(range(1, 2006))  # one result per line, in order
    errors = {r["line"]: r["error"] for r in results if "error" in r}
    assert sorted(errors) == sorted(bad)
    assert "not valid UTF-8" in errors[100] and "nested too deeply" in errors[200]
    assert "given twice" in errors[300] and "JSON object" in errors[400]
    with psycopg.connect(db_url) as conn:
        stored = conn.execute(
            "SELECT count(*), count(DISTINCT recipient_email) FROM mailroom.email_queue"
        ).fetchone()
    assert stored == (2000, 2000)


@pytest.mark.e2e
def test_invalid_utf8_on_standard_input_is_that_lines_error(cli_env: dict[str, str]) -> None:
    script = Path(sys.executable).with_name("mailroom")
    data = _line(1) + b'{"to": "x@example.com", "subject": "\xff", "text": "t"}\n' + _line(3)
    done = subprocess.run(
        [str(script), "enqueue", "-"], env=cli_env, input=data, capture_output=True, timeout=120, check=False
    )
    results = [json.loads(r) for r in done.stdout.splitlines()]
    assert done.returncode == 1 and b"Traceback" not in done.stderr
    assert ["id" in r for r in results] == [True, False, True]
    assert "not valid UTF-8" in results[1]["error"]
