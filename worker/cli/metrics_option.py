"""The rule every `--metrics-listen` follows: the monitoring listener never shares the public port."""

from __future__ import annotations

import errno
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from worker.cli.framework import HostPort

if TYPE_CHECKING:
    from worker.core.config import Settings
    from worker.ops.metrics_server import MetricsServer

# Addresses that listen on every interface: they overlap any host on the same port.
_ANY = ("", "0.0.0.0", "::")  # noqa: S104 -- compared with, never bound


def metrics_listen_option(example_port: int) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """`--metrics-listen HOST:PORT`, passed as `metrics_listen` (None: off); port 0 lets the system choose
    (tests). `example_port` is the command's usual one, shown when a value is malformed."""
    return click.option(
        "--metrics-listen",
        type=HostPort(port_required=True, lowest_port=0, example=f"127.0.0.1:{example_port}"),
        help="serve Prometheus metrics, /healthz and /readyz on this address (default: not at all)",
    )


def refuse_public_port(metrics: tuple[str, int], host: str, port: int) -> None:
    """Refuse (exit 2) a metrics address that is the public HOST:PORT, or overlaps it."""
    m_host, m_port = metrics
    if m_port == port and m_port != 0 and (m_host == host or m_host in _ANY or host in _ANY):
        raise click.BadParameter(
            f"{m_host}:{m_port} is the public address; metrics and health are served on a port of their own",
            param_hint="'--metrics-listen'",
        )


def start_listener(listen: tuple[str, int], serve: Callable[[str, int], MetricsServer]) -> MetricsServer:
    """`serve(host, port)`; an address in use is a usage error (exit 2) naming --metrics-listen, whose it is."""
    try:
        return serve(*listen)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        host, port = listen
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        raise click.BadParameter(
            f"{where} is already in use; choose another address", param_hint="'--metrics-listen'"
        ) from None


def serve_metrics(
    listen: tuple[str, int] | None,
    public: tuple[str, int],
    url: str,
    settings: Settings,
    role: str,
) -> MetricsServer | None:
    """With --metrics-listen: refuse the public address, start the listener and say where it is."""
    if listen is None:
        return None
    refuse_public_port(listen, *public)
    from worker.ops.metrics_server import serve_here

    server = start_listener(listen, lambda host, port: serve_here(host, port, url, settings, role))
    click.echo(f"{role}: metrics on {listen[0]}:{server.port}")
    return server
