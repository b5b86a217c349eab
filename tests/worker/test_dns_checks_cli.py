"""`mailroom senders check`, `senders add`, `senders list`, `health` and the worker's maintenance with the DNS
checks, against the real database and a DNS server in the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.cli import not_on_terminal, run
from tests.worker.dns_helpers import Zone, ZoneResolver, closed_port, dns_server, good_zone, rsa_pem
from worker.core.config import Settings
from worker.core.dkim import dns_record
from worker.ops.dns_checks.lookups import fresh_answers

DOMAIN = "shop-mail.net"


@pytest.fixture(scope="module")
def pem() -> bytes:
    return rsa_pem()


@pytest.fixture
def key_file(tmp_path: Path, pem: bytes) -> Path:
    path = tmp_path / "dkim.pem"
    path.write_bytes(pem)
    return path


@pytest.fixture
def zone(pem: bytes) -> Zone:
    return good_zone(DOMAIN, dns_record(pem))


@pytest.fixture
def dns(zone: Zone, cli_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[ZoneResolver]:
    """The zone served, and MAILROOM_DNS_SERVERS pointing at it."""
    fresh_answers()
    with dns_server(zone) as (server, address):
        monkeypatch.setenv("MAILROOM_DNS_SERVERS", address)
        yield server


def add(capsys: pytest.CaptureFixture[str], key_file: Path, port: int, *more: str) -> tuple[int, str, str]:
    return run(
        capsys, "senders", "add", "relay", "--from", f"noreply@{DOMAIN}", "--host", "127.0.0.1",
        "--port", str(port), "--security", "none", "--dkim-domain", DOMAIN, "--dkim-selector", "s1",
        "--dkim-key-file", str(key_file), *more,
    )  # fmt: skip


def stored(conn: psycopg.Connection[Any]) -> dict[str, str]:
    rows = conn.execute("SELECT code, severity FROM mailroom.sender_dns_findings ORDER BY id").fetchall()
    return {r["code"]: r["severity"] for r in rows}


def test_add_warns_about_dns_and_still_adds(
    dns: ZoneResolver, zone: Zone, key_file: Path, conn: psycopg.Connection[Any], smtp_sink: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    not_on_terminal(monkeypatch)
    del zone[f"_dmarc.{DOMAIN}"]
    code, out, err = add(capsys, key_file, smtp_sink.port)
    assert code == 0 and "added sender account relay" in out
    assert "warning: DNS dmarc_missing:" in err and "warning: DNS relay_no_tls:" in err
    assert stored(conn)["dmarc_missing"] == "warning" and stored(conn)["dkim_match"] == "ok"


def test_add_with_no_dns_check_asks_nothing(
    dns: ZoneResolver, key_file: Path, conn: psycopg.Connection[Any], smtp_sink: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    not_on_terminal(monkeypatch)
    code, _, err = add(capsys, key_file, smtp_sink.port, "--no-dns-check")
    assert code == 0 and "DNS" not in err
    assert dns.queries == [] and stored(conn) == {}


def test_add_with_dns_down_warns_once_and_adds(
    cli_env: dict[str, str], key_file: Path, conn: psycopg.Connection[Any], smtp_sink: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    not_on_terminal(monkeypatch)
    fresh_answers()
    monkeypatch.setenv("MAILROOM_DNS_SERVERS", closed_port())
    monkeypatch.setenv("MAILROOM_DNS_TIMEOUT_SECONDS", "0.3")
    code, _, err = add(capsys, key_file, smtp_sink.port)
    assert code == 0
    assert err.count("warning: DNS dns_unreachable") == 1
    assert conn.execute("SELECT count(*) AS n FROM mailroom.sender_accounts").fetchone() == {"n": 1}


def test_check_finds_a_wrong_dkim_key_and_health_fails_until_it_is_fixed(
    dns: ZoneResolver, zone: Zone, key_file: Path, conn: psycopg.Connection[Any], smtp_sink: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    not_on_terminal(monkeypatch)
    assert add(capsys, key_file, smtp_sink.port, "--no-dns-check")[0] == 0
    good = zone[f"s1._domainkey.{DOMAIN}"]["TXT"]
    zone[f"s1._domainkey.{DOMAIN}"]["TXT"] = [dns_record(rsa_pem())]
    code, out, _ = run(capsys, "senders", "check", "relay", "--no-relay")
    assert code == 1
    assert out.startswith("relay: problem: dkim_mismatch")
    assert "  PROBLEM dkim_mismatch: the DKIM key at s1._domainkey.shop-mail.net" in out
    code, out, _ = run(capsys, "health", "--json")
    report = json.loads(out)
    assert code != 0 and any("dkim_mismatch" in r for r in report["reasons"])
    code, out, _ = run(capsys, "senders", "list")
    assert "  DNS problem: dkim_mismatch (mailroom senders check relay)" in out
    code, out, _ = run(capsys, "senders", "list", "--json")
    assert json.loads(out)[0]["dns"] == "problem: dkim_mismatch"

    zone[f"s1._domainkey.{DOMAIN}"]["TXT"] = good
    code, out, _ = run(capsys, "senders", "check", "--json", "--no-relay")
    assert code == 0
    [check] = json.loads(out)
    assert check["standing"] == "ok" and check["sender"] == "relay"
    assert {f["code"] for f in check["findings"]} >= {"spf_relay_authorised", "dkim_match", "mx_present"}
    assert "dkim_mismatch" not in stored(conn)  # the new check replaced the old one's rows
    code, out, _ = run(capsys, "health", "--json")
    assert not any("DNS" in line or "dkim" in line for line in json.loads(out)["reasons"])


def test_a_dns_warning_is_a_health_warning_not_a_failure(
    dns: ZoneResolver, zone: Zone, key_file: Path, smtp_sink: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    not_on_terminal(monkeypatch)
    zone[DOMAIN].pop("MX")
    assert add(capsys, key_file, smtp_sink.port)[0] == 0
    code, out, _ = run(capsys, "health", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"]
    assert any("mx_missing" in w for w in report["warnings"])


def test_check_of_an_unknown_sender_exits_1(dns: ZoneResolver, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "senders", "check", "nobody")
    assert code == 1 and "no sender account named nobody" in err


def test_removing_a_sender_removes_its_findings(
    dns: ZoneResolver, key_file: Path, conn: psycopg.Connection[Any], smtp_sink: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    not_on_terminal(monkeypatch)
    assert add(capsys, key_file, smtp_sink.port)[0] == 0
    assert stored(conn)
    assert run(capsys, "senders", "remove", "relay", "--yes")[0] == 0
    assert stored(conn) == {}


async def test_maintenance_checks_every_sender(
    dns: ZoneResolver, zone: Zone, key_file: Path, db_url: str, settings: Settings,
    conn: psycopg.Connection[Any], smtp_sink: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from worker.ops.maintenance import PRODUCER

    not_on_terminal(monkeypatch)
    assert add(capsys, key_file, smtp_sink.port, "--no-dns-check")[0] == 0
    zone[f"_dmarc.{DOMAIN}"]["TXT"] = ["v=DMARC1; p=none"]
    settings = replace(settings, database_url=None, dns_servers=(dns_address(monkeypatch),))
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        assert await PRODUCER.run_once(aconn, settings) == 0
    found = stored(conn)
    assert found["dmarc_policy_none"] == "info" and found["relay_no_tls"] == "warning"


def dns_address(monkeypatch: pytest.MonkeyPatch) -> str:
    import os

    return os.environ["MAILROOM_DNS_SERVERS"]


# The worker's own producer round, in a process of its own as `mailroom worker` runs it: which modules
# it loaded, once the round (maintenance due) is over.
_ROUND = """
import asyncio, json, sys
import psycopg
from worker.core.config import Settings
from worker.ops.maintenance import PRODUCER

async def main():
    async with await psycopg.AsyncConnection.connect(sys.argv[1], autocommit=True) as conn:
        await PRODUCER.run_once(conn, Settings.from_env())

asyncio.run(main())
print(json.dumps(sorted(m for m in ("checkdmarc", "worker.ops.retention", "worker.ops.dns_checks") if m in sys.modules)))
"""


def test_maintenance_runs_in_a_process_of_its_own_and_the_worker_loads_none_of_it(
    dns: ZoneResolver, zone: Zone, key_file: Path, db_url: str, cli_env: dict[str, str],
    conn: psycopg.Connection[Any], smtp_sink: Any, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """In a thread, the DNS check's imports (checkdmarc: about a second of CPU) held the worker's
    interpreter lock while delivery ran beside it."""
    not_on_terminal(monkeypatch)
    assert add(capsys, key_file, smtp_sink.port, "--no-dns-check")[0] == 0
    zone[f"_dmarc.{DOMAIN}"]["TXT"] = ["v=DMARC1; p=none"]
    env = {**cli_env, "MAILROOM_DNS_SERVERS": dns_address(monkeypatch)}
    done = subprocess.run(
        [sys.executable, "-c", _ROUND, db_url], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []  # the worker's process loaded none of maintenance
    found = stored(conn)  # and the run happened: every sender checked, the findings stored
    assert found["dmarc_policy_none"] == "info" and found["relay_no_tls"] == "warning"
    assert conn.execute(
        "SELECT last_run_at IS NOT NULL AS ran FROM mailroom.jobs WHERE name = 'retention'"
    ).fetchone() == {"ran": True}


def test_the_maintenance_process_logs_as_the_worker_does_on_its_standard_error(
    dns: ZoneResolver, zone: Zone, key_file: Path, cli_env: dict[str, str], smtp_sink: Any,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    not_on_terminal(monkeypatch)
    assert add(capsys, key_file, smtp_sink.port, "--no-dns-check")[0] == 0
    env = {**cli_env, "MAILROOM_DNS_SERVERS": dns_address(monkeypatch), "MAILROOM_LOG_FORMAT": "json"}
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli.main", "worker", "--drain"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # nothing of the child's answer leaks
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    [warning] = [line for line in lines if line["logger"] == "worker.ops.maintenance"]
    assert warning["level"] == "warning"
    assert warning["message"] == "sender relay DNS warning: relay_no_tls (mailroom senders check relay)"


async def test_a_maintenance_process_that_fails_is_the_rounds_error(settings: Settings) -> None:
    from datetime import UTC, datetime

    from worker.ops.maintenance_child import run_in_child

    # A server that is not there: the child fails to connect, says why on its standard error, exits 1.
    nowhere = f"postgresql://mailroom@{closed_port()}/mailroom?connect_timeout=2"
    with pytest.raises(RuntimeError, match="the maintenance process exited with status 1"):
        await run_in_child(nowhere, settings, datetime.now(UTC))


def _children(name: str) -> list[int]:
    """The pids of this process's children whose command line names `name`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if ppid == os.getpid() and name.encode() in cmdline:
            found.append(int(entry.name))
    return found


async def test_a_cancelled_run_stops_its_child_which_a_ctrl_c_at_the_terminal_does_not_reach(
    settings: Settings,
) -> None:
    import asyncio
    import socket
    from datetime import UTC, datetime

    from worker.ops.maintenance_child import run_in_child

    loop = asyncio.get_running_loop()
    # A "server" that takes the connection and never answers: the child waits in its connect.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        silent.setblocking(False)
        url = f"postgresql://mailroom@127.0.0.1:{silent.getsockname()[1]}/mailroom?connect_timeout=120"
        run = asyncio.create_task(run_in_child(url, settings, datetime.now(UTC)))
        reached, _ = await asyncio.wait_for(loop.sock_accept(silent), 60)
        with reached:
            [child] = _children("worker.ops.maintenance_child")
            # Its own session and process group: the terminal's SIGINT goes to the worker's group only.
            assert os.getsid(child) == child and os.getpgid(child) != os.getpgrp()
            run.cancel()  # the worker stopping
            with pytest.raises(asyncio.CancelledError):
                await run
            assert _children("worker.ops.maintenance_child") == []  # stopped and reaped
            reached.setblocking(False)

            async def until_closed() -> None:  # past what the child sent (its startup message): the end
                while await loop.sock_recv(reached, 4096):
                    pass

            await asyncio.wait_for(until_closed(), 10)
