"""The rule every `--metrics-listen` follows: the monitoring listener never shares the public port."""

from __future__ import annotations

import click

# Addresses that listen on every interface: they overlap any host on the same port.
_ANY = ("", "0.0.0.0", "::")  # noqa: S104 -- compared with, never bound


def refuse_public_port(metrics: tuple[str, int], host: str, port: int) -> None:
    """Refuse (exit 2) a metrics address that is the public HOST:PORT, or overlaps it."""
    m_host, m_port = metrics
    if m_port == port and m_port != 0 and (m_host == host or m_host in _ANY or host in _ANY):
        raise click.BadParameter(
            f"{m_host}:{m_port} is the public address; metrics and health are served on a port of their own",
            param_hint="'--metrics-listen'",
        )
