"""Log lines: JSON lines carry the event's fields, addresses in free text are masked."""

from __future__ import annotations

import json
import logging

from worker.core.logs import JsonFormatter


def test_json_log_lines_carry_the_event_fields_beside_the_message() -> None:
    record = logging.LogRecord("mailroom.worker", logging.WARNING, __file__, 1, "email %s failed", (7,), None)
    record.fields = {"event": "attempt_failed", "email_id": 7, "code": 450, "message": "not this one"}
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "email 7 failed"  # an event field never replaces the line's own keys
    assert (line["level"], line["logger"], line["event"], line["email_id"], line["code"]) == (
        "warning",
        "mailroom.worker",
        "attempt_failed",
        7,
        450,
    )
    assert line["time"].endswith("+00:00")


def test_addresses_inside_free_text_are_masked_and_the_rest_kept() -> None:
    from worker.core.masking import mask_addresses_in

    assert (
        mask_addresses_in("550 5.1.1 <ada@example.com>: rejected; cc bob.smith+x@mail.example.org")
        == "550 5.1.1 <ad***@example.com>: rejected; cc bob***@mail.example.org"
    )
    assert mask_addresses_in("no address @ here, nor a@b") == "no address @ here, nor a@b"
    assert mask_addresses_in("") == ""
