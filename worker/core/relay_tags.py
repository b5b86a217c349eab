"""Tags a relay hands back in its event webhooks, so a bounce it reports names the email it is about.

Postmark returns `X-PM-Metadata-<key>` headers as the event's `Metadata`; SendGrid returns the
`unique_args` of its `X-SMTPAPI` header as fields of each event. Both relays remove these headers
before they deliver, so they are never in a DKIM signature's h= list (see `worker.core.dkim`).
"""

from __future__ import annotations

import json
from dataclasses import replace

from worker.core.message import Envelope

EMAIL_ID_KEY = "mailroom_email_id"


def relay_tag(provider: str, email_id: int) -> bytes:
    """The header line that tags an email for `provider` (postmark or sendgrid)."""
    if provider == "postmark":
        return f"X-PM-Metadata-{EMAIL_ID_KEY}: {int(email_id)}\r\n".encode("ascii")
    if provider == "sendgrid":
        args = json.dumps({"unique_args": {EMAIL_ID_KEY: str(int(email_id))}}, separators=(",", ":"))
        return f"X-SMTPAPI: {args}\r\n".encode("ascii")
    raise ValueError(f"unknown relay provider {provider!r}")


def tag_for_relay(envelope: Envelope, provider: str, email_id: int) -> Envelope:
    """The message with the relay's tag as its first header (before any DKIM signature is added)."""
    return replace(envelope, content=relay_tag(provider, email_id) + envelope.content)
