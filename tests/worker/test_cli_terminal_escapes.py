"""Text an attacker wrote (a bounce's diagnostic, an envelope address, a message) never reaches the terminal raw."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.worker.helpers import enqueue_many
from worker.cli.main import main
from worker.core.terminal import printable, printable_lines

RETITLE = "\x1b]0;pwned\x07"  # sets the terminal's title (and, on some, worse)
WIPE = "\x1b[2J"  # clears the screen
FLIP = "\u202e"  # right-to-left override: the rest of the line reads backwards
HOSTILE = f"smtp; 550 {RETITLE}{WIPE}{FLIP}gro.elpmaxe@nimda\x9b31m\x7f"
FORBIDDEN = ("\x1b", "\x07", "\x9b", "\x7f", "\u202e")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out + err


def _clean(text: str) -> None:
    assert not [c for c in FORBIDDEN if c in text]


def test_printable_escapes_controls_c1_and_bidi_and_leaves_the_rest() -> None:
    assert (
        printable("550 \x1b[2J\x07 über\u202e\u2066\t\n\r")
        == "550 \\x1b[2J\\x07 über\\u202e\\u2066\\x09\\x0a\\x0d"
    )
    assert printable_lines("a\x1b\r\nb\n") == "a\\x1b\\x0d\nb\n"
    assert printable("\x85\x9f\xa0é") == "\\x85\\x9f\xa0é"  # C1 escaped, NBSP and letters kept


def test_bounces_list_prints_an_attackers_diagnostic_with_its_escapes_shown_not_obeyed(
    capsys: pytest.CaptureFixture[str], cli_env: dict[str, str], db_url: str
) -> None:
    (email_id,) = enqueue_many(db_url, 1)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO mailroom.bounce_events (email_id, recipient, kind, status, diagnostic, source,"
            " raw_size, dedupe_key) VALUES (%s, %s, 'hard', %s, %s, 'dsn', 10, 'k1')",
            (email_id, "ada@example.com", f"5.1.1{RETITLE}", HOSTILE),
        )
    code, out = _run(capsys, "bounces", "list")
    assert code == 0
    _clean(out)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202e" in out  # shown, visibly, for the operator to see


def test_bounces_quarantine_lists_an_attackers_envelope_recipient_escaped(
    capsys: pytest.CaptureFixture[str], cli_env: dict[str, str], tmp_path: Path
) -> None:
    message = tmp_path / "junk.eml"
    message.write_bytes(f"Subject: {RETITLE}\r\n\r\n{WIPE}not a report\r\n".encode())
    recipient = f"bounces+{RETITLE}@{WIPE}example.org"
    code, _ = _run(capsys, "bounces", "ingest", str(message), "--envelope-recipient", recipient)
    assert code == 0
    code, out = _run(capsys, "bounces", "quarantine")
    assert code == 0 and "example.org" in out
    _clean(out)


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> bytes:
    """Run the CLI with its standard output on a pseudo-terminal; what the terminal received."""
    leader, follower = pty.openpty()
    with subprocess.Popen(argv, env=env, stdout=follower, stderr=subprocess.PIPE) as cli:
        os.close(follower)
        received = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the writer is gone
                break
            if not chunk:
                break
            received += chunk
        assert cli.wait(timeout=60) == 0
    os.close(leader)
    return received


@pytest.mark.e2e
def test_bounces_quarantine_show_escapes_on_a_terminal_and_keeps_the_bytes_in_a_pipe(
    capsys: pytest.CaptureFixture[str], cli_env: dict[str, Any], tmp_path: Path
) -> None:
    raw = f"Subject: hi\r\n\r\n{RETITLE}{WIPE}not a report\r\n".encode()
    message = tmp_path / "junk.eml"
    message.write_bytes(raw)
    assert _run(capsys, "bounces", "ingest", str(message))[0] == 0
    argv = [sys.executable, "-m", "worker.cli.main", "bounces", "quarantine", "--show", "1"]
    shown = _on_a_terminal(argv, cli_env)
    assert b"\x1b" not in shown and b"\x07" not in shown and b"\\x1b]0;pwned\\x07" in shown
    piped = subprocess.run(argv, env=cli_env, capture_output=True, check=True).stdout
    assert piped == raw  # `--show ID > message.eml` still saves the message as it came


def test_docs_status_prints_a_documents_title_and_a_signers_name_escaped(
    capsys: pytest.CaptureFixture[str], cli_env: dict[str, str], db_url: str
) -> None:
    from worker.core.config import Settings
    from worker.producers.documents.records import add_document, expect_signer

    settings = Settings(database_url=db_url, secret_key=cli_env["MAILROOM_SECRET_KEY"])
    with psycopg.connect(db_url) as conn:
        add_document(conn, "policy", title=f"Policy{FLIP}fdp.exe", url="https://example.com/p.pdf")
        expect_signer(conn, "policy", "ada@example.com", name=f"Ada{FLIP}gpj.exe", settings=settings)
        conn.commit()
    code, out = _run(capsys, "docs", "status", "policy")
    assert code == 0 and "Policy\\u202efdp.exe" in out and "Ada\\u202egpj.exe" in out
    _clean(out)
