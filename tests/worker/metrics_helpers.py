"""Helpers of the metrics tests: scrape a listener, read its figures, wait for the queue by NOTIFY."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families


def get(url: str) -> tuple[int, str, str]:
    """GET `url`: status, content type, body (an error status is an answer too)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 -- a local test server
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def post(url: str, body: bytes) -> int:
    """POST `body` to `url`: the status."""
    request = urllib.request.Request(url, data=body, method="POST")  # noqa: S310 -- a local test server
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 -- a local test server
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def probe(url: str) -> tuple[int, dict[str, Any]]:
    """GET a health endpoint: its status and JSON body."""
    status, content_type, body = get(url)
    assert content_type == "application/json", (status, content_type, body)
    return status, json.loads(body)


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a scrape, parsed by prometheus-client's own parser."""
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples named `name` whose labels include `labels` (0 when there is none)."""
    return sum(v for n, lab, v in samples(text) if n == name and labels.items() <= lab.items())


def names(text: str) -> set[str]:
    """The sample names of a scrape."""
    return {n for n, _, _ in samples(text)}


def wait_until(db_url: str, query: str, expected: object, timeout: float = 60.0) -> object:
    """Run `query` after each NOTIFY on the queue's channel until it returns `expected` (or time runs out)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as listen, psycopg.connect(db_url, autocommit=True) as conn:
        listen.execute("LISTEN mailroom_queue")
        while True:
            row = conn.execute(query).fetchone()
            got = row[0] if row else None
            if got == expected or time.monotonic() > deadline:
                return got
            # Woken by the queue's NOTIFY (the bound only guards against a missed one).
            for _ in listen.notifies(timeout=1.0, stop_after=1):
                pass


@dataclass
class Running:
    """A `mailroom` subprocess whose output (stdout and stderr) is read by a thread (several processes share it)."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    seen: threading.Condition = field(default_factory=threading.Condition)

    def read(self) -> None:
        """Collect the output until the pipe closes."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.seen:
                self.lines.append(line)
                self.seen.notify_all()
        self.proc.stdout.close()
        with self.seen:
            self.lines.append("")  # end of output
            self.seen.notify_all()

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit status once it and its output are done."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        with self.seen:  # the end of output: every line read
            assert self.seen.wait_for(lambda: "" in self.lines, timeout=timeout)
        return code

    def wait_for(self, pattern: str, timeout: float = 60.0) -> re.Match[str]:
        """The first output line matching `pattern` (AssertionError with the output when none comes)."""
        regex = re.compile(pattern)
        with self.seen:
            found = self.seen.wait_for(
                lambda: any(x and regex.search(x) for x in self.lines) or "" in self.lines, timeout=timeout
            )
            for line in self.lines:
                if line and (match := regex.search(line)):
                    return match
        raise AssertionError(
            f"no line matching {pattern!r} (waited: {found}):\n{''.join(self.lines)[-3000:]}"
        )

    @property
    def output(self) -> str:
        """Everything read so far."""
        with self.seen:
            return "".join(self.lines)


def start(args: list[str], env: dict[str, str]) -> Running:
    """Start `mailroom ARGS` with its output read in a thread."""
    script = Path(sys.executable).with_name("mailroom")
    proc = subprocess.Popen(
        [str(script), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    running = Running(proc)
    threading.Thread(target=running.read, daemon=True).start()
    return running


APT_PROMETHEUS = "apt-get install -y prometheus"


def promtool() -> str:
    """The promtool program; the test fails without it under CI, else skips with the apt-get line."""
    import os
    import shutil

    import pytest

    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"promtool is not installed: {APT_PROMETHEUS}")
        pytest.skip(f"promtool is not installed: {APT_PROMETHEUS}")
    return found


def family_names(text: str) -> set[str]:
    """The metric families of a scrape (shown even before their first sample), with a counter's _total."""
    found = set()
    for family in text_string_to_metric_families(text):
        found.add(family.name + "_total" if family.type == "counter" else family.name)
    return found
