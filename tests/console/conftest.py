"""Console test fixtures: the fixed data set, and console apps on a frozen clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from console.app import MailroomConsole
from console.wiring import ProducerActions
from tests.console.seed import FROZEN_NOW, LABEL, seed
from worker.core.config import Settings


@pytest.fixture
def seeded_url(db_url: str) -> str:
    """This test's database with the fixed console data set."""
    seed(db_url)
    return db_url


@pytest.fixture
def make_console(settings: Settings) -> Callable[..., MailroomConsole]:
    """Build a console on a database, with the frozen clock and a fixed header label."""

    def build(url: str, **kwargs: Any) -> MailroomConsole:
        kwargs.setdefault("clock", lambda: FROZEN_NOW)
        kwargs.setdefault("label", LABEL)
        return MailroomConsole(url, settings, ProducerActions(), **kwargs)

    return build
