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
