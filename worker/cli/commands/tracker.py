"""`mailroom tracker`: the HTTP endpoint for open pixels, click redirects and one-click unsubscribe."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import urlsplit

from worker.cli.argtypes import whole_number
from worker.core.config import Settings

DESCRIPTION = """\
Serve the tracking endpoint: GET /o/TOKEN.gif records an open, GET /c/TOKEN records a click and
redirects to the destination stored for that link, POST /u/TOKEN (RFC 8058 one-click) unsubscribes
at once, GET /u/TOKEN shows a confirmation page and never unsubscribes. Unknown tokens change
nothing. Emails carry links under MAILROOM_BASE_URL: put the tracker behind that public (https)
address. Bounce and complaint webhooks: POST /webhooks/bounces (MAILROOM_WEBHOOK_SECRET signs it),
/webhooks/postmark (MAILROOM_POSTMARK_WEBHOOK_USER and _PASSWORD), /webhooks/sendgrid
(MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY) and /webhooks/ses (MAILROOM_SES_TOPIC_ARNS); one that is
not configured answers 404. A client network (an IPv4 address or IPv6 /64) holding
--max-connections-per-client connections is answered 503 at connect (behind a reverse proxy every
connection comes from the proxy: pass 0 and let the proxy cap them); a connection without a
complete request for MAILROOM_TRACKER_IDLE_TIMEOUT_SECONDS (15: slow headers, idle keep-alive) is
closed, and a request not done in MAILROOM_TRACKER_REQUEST_TIMEOUT_SECONDS (30, its body
included) is answered 408. Runs until SIGTERM or Ctrl-C; exit status 0 then, 2 when the port is
in use.

Examples:
  mailroom tracker --port 8025
  MAILROOM_BASE_URL=https://t.example.com mailroom tracker --host 0.0.0.0 --port 8080"""


def cmd_tracker(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the tracker until SIGTERM/SIGINT."""
    import asyncio
    from dataclasses import replace

    from worker.core.db import database_url
    from worker.core.return_path import optional_bounce_key
    from worker.producers.bounces.events import event_sink
    from worker.tracking.server import run_tracker

    port = args.port if args.port is not None else (urlsplit(settings.base_url).port or 8025)
    if args.max_connections_per_client is not None:
        settings = replace(settings, tracker_max_connections_per_client=args.max_connections_per_client)
    print(f"tracker on http://{args.host}:{port}, public base URL {settings.base_url}", flush=True)
    sink = event_sink(optional_bounce_key(settings))
    asyncio.run(run_tracker(database_url(settings), settings, args.host, port, sink))
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
    parser.add_argument(
        "--max-connections-per-client",
        type=whole_number,
        metavar="N",
        help="connections one client network may hold, 0 for no cap"
        " (default MAILROOM_TRACKER_MAX_CONNECTIONS_PER_CLIENT, else 100)",
    )
    parser.set_defaults(handler=cmd_tracker)
