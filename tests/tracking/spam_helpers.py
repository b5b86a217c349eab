"""Running Debian's SpamAssassin with local rules only (`spamassassin -t -L`) on a message."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

APT = "apt-get install -y spamassassin"
_STATUS = re.compile(rb"^X-Spam-Status: (?:Yes|No), score=(-?[0-9.]+)", re.MULTILINE)
_TESTS = re.compile(rb"tests=([^\r\n]*(?:\r?\n[ \t]+[^\r\n]*)*)")


def spamassassin() -> str:
    """The spamassassin program; the test fails without it under CI, else skips with the apt-get line."""
    found = shutil.which("spamassassin")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"spamassassin is not installed: {APT}")
        pytest.skip(f"spamassassin is not installed: {APT}")
    return found


def score(content: bytes) -> tuple[float, str]:
    """SpamAssassin's score of the message (local rules, no network) and the rules that fired."""
    done = subprocess.run(
        [spamassassin(), "-t", "-L"], input=content, capture_output=True, timeout=120, check=False
    )
    found = _STATUS.search(done.stdout)
    assert found is not None, done.stderr.decode("utf-8", "replace")[-2000:]
    tests = _TESTS.search(done.stdout, found.end())
    rules = re.sub(rb"\s+", b"", tests.group(1)).decode("ascii", "replace") if tests else ""
    return float(found.group(1)), rules


def scores(contents: list[bytes]) -> list[tuple[float, str]]:
    """`score` of each message, in order, from one SpamAssassin run over them all as an mbox.

    SpamAssassin takes a second or two to load its rules: once for every message, not once each. It
    writes the messages back in an order of its own, so each answer is matched by its Message-ID."""
    import mailbox
    import tempfile
    from pathlib import Path

    ids = [_message_id(content) for content in contents]
    assert len(set(ids)) == len(ids), "each message needs a Message-ID of its own"
    with tempfile.TemporaryDirectory(prefix="mailroom-spam-") as tmp:
        path = Path(tmp) / "messages.mbox"
        box = mailbox.mbox(path)
        for content in contents:
            box.add(mailbox.mboxMessage(content))
        box.flush()
        box.close()
        done = subprocess.run(
            [spamassassin(), "-t", "-L", "--mbox", str(path)], capture_output=True, timeout=300, check=False
        )
    found: dict[bytes, tuple[float, str]] = {}
    for message in re.split(rb"^From .*\r?\n", done.stdout, flags=re.MULTILINE)[1:]:
        status = _STATUS.search(message)
        assert status is not None, done.stderr.decode("utf-8", "replace")[-2000:]
        tests = _TESTS.search(message, status.end())
        rules = re.sub(rb"\s+", b"", tests.group(1)).decode("ascii", "replace") if tests else ""
        found[_message_id(message)] = (float(status.group(1)), rules)
    assert sorted(found) == sorted(ids), done.stderr.decode("utf-8", "replace")[-2000:]
    return [found[i] for i in ids]


def _message_id(content: bytes) -> bytes:
    found = re.search(rb"^Message-ID:\s*(<[^>\r\n]+>)", content, re.MULTILINE | re.IGNORECASE)
    assert found is not None, "a message without a Message-ID"
    return found.group(1)
