"""`mailroom webhooks test`: one signed event of type webhook.test, POSTed now through the checks of
the worker's POSTs (the resolver that refuses non-public addresses, no redirects, the timeout)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from worker.core.config import Settings
from worker.core.crypto import SecretBox
from worker.hooks import addresses, signing
from worker.hooks.dispatch import post


async def post_test(
    endpoint: int, row: Mapping[str, Any], box: SecretBox, settings: Settings
) -> tuple[int | None, str | None]:
    """POST the test event to the endpoint of `row` (url, secret_encrypted, allow_private)."""
    key = signing.secret_bytes(box.decrypt(bytes(row["secret_encrypted"])))
    body = json.dumps(
        {
            "type": "webhook.test",
            "timestamp": datetime.now(UTC).isoformat(),
            "data": {"endpoint_id": endpoint},
        },
        separators=(",", ":"),
    ).encode()
    allow_private = bool(row["allow_private"])
    async with addresses.client_session(allow_private) as session:
        return await post(
            session, row["url"], key, uuid.uuid4(), body, settings.webhook_timeout_seconds,
            allow_private=allow_private,
        )  # fmt: skip
