"""The threat model names, for each door, the test that plays its attacker: each named test exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "threat-model.md"
# `tests/x/test_y.py::test_name`, then `::test_other` for more tests of the same file.
_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)?::(test_\w+)`")


def _references() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for line in DOC.read_text(encoding="utf-8").splitlines():
        current: str | None = None
        for match in _REFERENCE.finditer(line):
            current = match.group(1) or current
            assert current is not None, f"{match.group(0)} names no file before it: {line[:80]}"
            found.append((current, match.group(2)))
    return found


def test_every_test_the_threat_model_names_exists() -> None:
    references = _references()
    assert len(references) > 40
    missing = [
        f"{path}::{name}"
        for path, name in references
        if not re.search(rf"^(async )?def {name}\(", (ROOT / path).read_text(encoding="utf-8"), re.MULTILINE)
    ]
    assert missing == []


def test_every_door_of_the_design_has_a_row() -> None:
    text = DOC.read_text(encoding="utf-8")
    for door in ("bounce receiver", "bounces ingest", "mailbox", "/webhooks/ses", "/webhooks/postmark",
                 "/u/<token>", "/c/<token>", "read-only role", "idempotency keys", "audit trail",
                 "db backup", "console", "SMTP login"):  # fmt: skip
        assert door in text, door
