"""`mailroom tracker`: the HTTP endpoint for open pixels, click redirects and one-click unsubscribe."""

from __future__ import annotations

from urllib.parse import urlsplit

import click

from worker.cli.framework import Command, Database, max_connections_option, with_database
from worker.cli.metrics_option import metrics_listen_option, serve_metrics

DESCRIPTION = """\
Serve the tracking endpoint: GET /o/TOKEN.gif records an open, GET /c/TOKEN records a click and
redirects to the destination stored for that link, POST /u/TOKEN (RFC 8058 one-click) unsubscribes
at once, GET /u/TOKEN shows a confirmation page and never unsubscribes. Unknown tokens change
nothing. Emails carry links under MAILROOM_BASE_URL: put the tracker behind that public (https)
address. Bounce and complaint webhooks: POST /webhooks/bounces (MAILROOM_WEBHOOK_SECRET signs it),
/webhooks/postmark (MAILROOM_POSTMARK_WEBHOOK_USER and _PASSWORD), /webhooks/sendgrid
(MAILROOM_SENDGRID_WEBHOOK_PUBLIC_KEY) and /webhooks/ses (MAILROOM_SES_TOPIC_ARNS); one that is
not configured answers 404. GET /s/TOKEN is a signer's page (`mailroom docs links`) and POST
/s/TOKEN signs with their consent. A client network (an IPv4 address or IPv6 /64) holding
--max-connections-per-client connections is answered 503 at connect (behind a reverse proxy every
connection comes from the proxy: pass 0 and let the proxy cap them); a connection without a
complete request for MAILROOM_TRACKER_IDLE_TIMEOUT_SECONDS (15: slow headers, idle keep-alive) is
closed, and a request not done in MAILROOM_TRACKER_REQUEST_TIMEOUT_SECONDS (30, its body
included) is answered 408. --metrics-listen serves Prometheus metrics, /healthz and /readyz on a
port of its own, never the public one. Runs until SIGTERM or Ctrl-C; exit status 0 then, 2 when the
port is in use or the metrics address is the public one.

Examples:
  mailroom tracker --port 8025
  mailroom tracker --port 8025 --metrics-listen 127.0.0.1:9465
  MAILROOM_BASE_URL=https://t.example.com mailroom tracker --host 0.0.0.0 --port 8080"""


@click.command(cls=Command, help=DESCRIPTION)
@click.option("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
@click.option(
    "--port", type=int, help="port to listen on (default: the port of MAILROOM_BASE_URL, else 8025)"
)
@max_connections_option("MAILROOM_TRACKER_MAX_CONNECTIONS_PER_CLIENT", 100)
@metrics_listen_option(9465)
@with_database
def tracker(
    db: Database,
    host: str,
    port: int | None,
    max_connections_per_client: int | None,
    metrics_listen: tuple[str, int] | None,
) -> int:
    """Serve the tracker until SIGTERM/SIGINT."""
    import asyncio
    from dataclasses import replace

    from worker.core.return_path import optional_bounce_key
    from worker.producers.bounces.events import event_sink
    from worker.producers.documents.desk import signing_desk
    from worker.tracking.server import run_tracker

    settings = db.settings
    port = port if port is not None else (urlsplit(settings.base_url).port or 8025)
    if max_connections_per_client is not None:
        settings = replace(settings, tracker_max_connections_per_client=max_connections_per_client)
    listener = serve_metrics(metrics_listen, (host, port), db.url, settings, "tracker")
    click.echo(f"tracker on http://{host}:{port}, public base URL {settings.base_url}")
    sink = event_sink(optional_bounce_key(settings))
    try:
        asyncio.run(run_tracker(db.url, settings, host, port, sink, signing_desk(db.url, settings)))
    finally:
        if listener is not None:
            listener.close()
    return 0
