"""Fixtures of the worker tests."""

from __future__ import annotations

import socket
from dataclasses import replace

import pytest

from worker.core.config import Settings


@pytest.fixture
def fast(settings: Settings) -> Settings:
    """Short retries, leases and circuit backoff so faults play out in seconds."""
    return replace(
        settings,
        retry_base_seconds=0.01,
        retry_cap_seconds=0.05,
        lease_seconds=2.0,
        circuit_base_seconds=0.2,
        circuit_cap_seconds=0.4,
        # Far longer than a loopback answer takes on a busy host; a test of a stall sets its own.
        smtp_connect_timeout=10.0,
        smtp_command_timeout=10.0,
        smtp_data_timeout=10.0,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def dead_port() -> int:
    """A loopback port where nothing listens (connection refused), until a test starts a sink on it."""
    return _free_port()
