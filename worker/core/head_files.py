"""Chain heads exported outside the database (`docs head`, `audit head`): reading their JSON back.

Both exports write `{"format": ..., "exported_at": ..., ...}`; a file that is not one of them is
refused with the same words, whichever chain it was meant for.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from worker.core.validation import ValidationError


def load_json_head(text: str, export_format: str, command: str) -> tuple[dict[str, Any], datetime | None]:
    """The exported JSON of `command` (checked for its `format`) and when it was exported."""
    refused = ValidationError("head", f"not a head file written by `{command}` ({export_format})")
    try:
        data = json.loads(text)
    except ValueError:
        raise refused from None
    if not isinstance(data, dict) or data.get("format") != export_format:
        raise refused
    try:
        exported_at = datetime.fromisoformat(data["exported_at"]) if data.get("exported_at") else None
    except (TypeError, ValueError):
        raise refused from None
    return data, exported_at
