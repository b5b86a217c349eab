"""`mailroom tracker`: the HTTP endpoint for open pixels, click redirects and one-click unsubscribe."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlsplit

from worker.core.config import Settings

DESCRIPTION = """\
Serve the tracking endpoint: GET /o/TOKEN.gif records an open, GET /c/TOKEN records a click and
redirects to the destination stored for that link, POST /u/TOKEN (RFC 8058 one-click) unsubscribes
at once, GET /u/TOKEN shows a confirmation page and never unsubscribes. Unknown tokens change
nothing. Emails carry links under MAILROOM_BASE_URL: put the tracker behind that public (https)
address. Bounce and complaint webhooks: POST /webhooks/bounces (MAILROOM_WEBHOOK_SECRET signs it),
/webhooks/postmark (MAILROOM_POSTMARK_WEBHOOK_USER and _PASSWORD), /webhooks/sendgrid
(MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY) and /webhooks/ses (MAILROOM_SES_TOPIC_ARNS); one that is
not configured answers 404. Runs until SIGTERM or Ctrl-C; exit status 0 then, 2 when the port is
in use.

Examples:
  mailroom tracker --port 8025
  MAILROOM_BASE_URL=https://t.example.com mailroom tracker --host 0.0.0.0 --port 8080"""


def cmd_tracker(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the tracker until SIGTERM/SIGINT."""
    import asyncio

    from worker.core.db import database_url
    from worker.producers.bounces.events import apply_events
    from worker.tracking.server import run_tracker

    port = args.port if args.port is not None else (urlsplit(settings.base_url).port or 8025)
    print(f"tracker on http://{args.host}:{port}, public base URL {settings.base_url}", flush=True)
    asyncio.run(run_tracker(database_url(settings), settings, args.host, port, apply_events))
    return 0


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add `mailroom tracker`."""
    parser = sub.add_parser(
        "tracker",
        help="serve open pixels, click redirects and one-click unsubscribe over HTTP",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, help="port to listen on (default: the port of MAILROOM_BASE_URL, else 8025)"
    )
    parser.set_defaults(handler=cmd_tracker)
