"""What a DMARC report costs to read: `python -m bench.dmarc_cost [REPEATS]`.

Three figures, each in processes of its own on a throwaway embedded PostgreSQL (or
MAILROOM_DATABASE_URL, whose DMARC tables and quarantine it empties):

1. a stranger's report of 50,000 identical records (a gzip of about 85 KB, 19 MB of XML) given to
   `take_report`, the one way in for `mailroom dmarc ingest` and the receiver (with the file's limits):
   CPU and wall seconds, and the process's peak RSS against its RSS once it is imported and connected;
   and the whole `mailroom dmarc ingest` process (Python's start, imports and schema check included);
2. the same for an accepted report of 10,000 records from as many addresses, parsed and stored;
3. the bounce receiver (`mailroom bounces receive`, its own process) while six such strangers' reports
   and six of our own domain's at the mailed cap (5,000 records) arrive at dmarc@ at once: how long an
   ordinary DSN, sent from another address every quarter second, waits for its answer (against the
   same DSN with no flood), and the receiver's peak RSS.

Memory is read from /proc (VmRSS, VmHWM): the bench runs on Linux.

The median of REPEATS runs (3 by default) is shown for 1 and 2. Before this bench's change the first
cost 23 s of CPU and 348 MB, and a DSN sent during six such reports went unanswered for 60 s while the
receiver grew from 41 MiB to 1.2 GiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

# The child process imports only what taking a report needs: the fixtures and the embedded server are
# imported by the parent, inside the functions that use them.
STRANGER = "stranger.example"
DSN_TO = "nobody@example.net"
BOUNCE_DOMAIN = "bounces.example"  # tests.producers.bounces.corpus.BOUNCE_DOMAIN


def peak_rss_mib(pid: int | str = "self") -> tuple[float, float]:
    """A process's resident memory and its peak, in MiB (Linux: /proc/PID/status VmRSS and VmHWM, which,
    unlike ru_maxrss, start again at exec rather than carry the forking parent's)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            found[name] = int(value.split()[0]) / 1024
    return found["VmRSS"], found["VmHWM"]


def child(path: str) -> None:
    """In a process of its own: take in the report at `path` once, and print what it cost as JSON."""
    from worker.producers.dmarc import ReportRefused
    from worker.producers.dmarc.intake import take_report

    data = Path(path).read_bytes()
    url = os.environ["MAILROOM_DATABASE_URL"]
    with psycopg.connect(url, autocommit=True) as conn:
        rss_before, _ = peak_rss_mib()
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        try:
            verdict = take_report(conn, data, "cli").summary()
        except ReportRefused as exc:
            verdict = f"refused: {exc}"
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        _, peak = peak_rss_mib()
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    print(
        json.dumps(
            {"cpu": cpu, "wall": wall, "rss_before": rss_before, "rss_peak": peak, "verdict": verdict[:100]}
        )
    )


def _child_run(url: str, path: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.dmarc_cost", "--child", str(path)],
        env={**os.environ, "MAILROOM_DATABASE_URL": url},
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def _cli_run(url: str, path: Path) -> tuple[float, float, int]:
    """`mailroom dmarc ingest` as a whole process: wall seconds, CPU seconds, exit status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli.main", "dmarc", "ingest", str(path)],
        env={**os.environ, "MAILROOM_DATABASE_URL": url},
        capture_output=True,
        check=False,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.returncode


def _empty(url: str) -> None:
    """No report, refusal or quarantined message (DELETE, not TRUNCATE: the triggers keep the sizes)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM mailroom.dmarc_reports")
        conn.execute("DELETE FROM mailroom.dmarc_refusals")
        conn.execute("DELETE FROM mailroom.bounce_quarantine")


def ingest_costs(url: str, work: Path, repeats: int) -> list[str]:
    """Lines for figures 1 and 2."""
    from tests.producers.dmarc_helpers import big_report, gzipped

    cases = (
        ("refused: a stranger's 50,000 records", "refused.xml.gz", big_report(50_000, domain=STRANGER)),
        ("accepted: 10,000 records, stored", "accepted.xml.gz", big_report(10_000, distinct=True)),
    )
    lines = [
        f"{'report':<40}{'CPU s':>7}{'wall s':>8}{'RSS MiB':>9}{'peak MiB':>10}{'CLI CPU s':>11}{'CLI wall s':>12}"
        "  verdict"
    ]
    for title, name, xml in cases:
        path = work / name
        path.write_bytes(gzipped(xml))
        runs = []
        for _ in range(repeats):
            _empty(url)
            runs.append(_child_run(url, path))
        clis = []
        for _ in range(repeats):
            _empty(url)
            clis.append(_cli_run(url, path))

        def median(key: str, runs: list[dict[str, Any]] = runs) -> float:
            return float(statistics.median(r[key] for r in runs))

        cli_wall, cli_cpu = statistics.median(c[0] for c in clis), statistics.median(c[1] for c in clis)
        lines.append(
            f"{title:<40}{median('cpu'):>7.3f}{median('wall'):>8.3f}{median('rss_before'):>9.1f}"
            f"{median('rss_peak'):>10.1f}{cli_cpu:>11.2f}{cli_wall:>12.2f}  {runs[-1]['verdict'][:60]}"
        )
    return lines


@contextlib.contextmanager
def receiver(url: str, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """`mailroom bounces receive` on `port`, once it says it is listening."""
    from tests.producers.bounces.corpus import FIXTURE_SECRET

    env = {**os.environ, "MAILROOM_DATABASE_URL": url, "MAILROOM_SECRET_KEY": FIXTURE_SECRET}
    argv = [sys.executable, "-m", "worker.cli.main", "bounces", "receive"]
    # A generous rate per client: the DSNs come every quarter second, and the rate limit is not measured here.
    argv += ["--listen", f"127.0.0.1:{port}", "--domain", BOUNCE_DOMAIN, "--rate", "6000", "--burst", "1000"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert b"receiving for" in line, line
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def _send(port: int, raw: bytes, to: str, source: str = "127.0.0.1") -> tuple[int, float]:
    import aiosmtplib

    start = time.perf_counter()
    async with aiosmtplib.SMTP(
        hostname="127.0.0.1", port=port, timeout=300, source_address=(source, 0)
    ) as smtp:
        try:
            await smtp.sendmail("", [to], raw)
            code = 250
        except aiosmtplib.SMTPResponseException as exc:
            code = exc.code
    return code, time.perf_counter() - start


async def _dsns_during(
    port: int, dsn: tuple[bytes, str], flood: list[bytes]
) -> tuple[list[float], list[int], float]:
    """DSN latencies every quarter second from 127.0.0.2 while `flood` goes to dmarc@ from 127.0.0.1."""
    start = time.perf_counter()
    tasks = [asyncio.create_task(_send(port, raw, f"dmarc@{BOUNCE_DOMAIN}")) for raw in flood]
    latencies = []
    while not all(t.done() for t in tasks):
        code, seconds = await _send(port, dsn[0], dsn[1], "127.0.0.2")
        assert code == 250, code
        latencies.append(seconds)
        await asyncio.sleep(0.25)
    codes = [code for code, _ in await asyncio.gather(*tasks)]
    return latencies, codes, time.perf_counter() - start


def flood_cost(url: str) -> list[str]:
    """Lines for figure 3."""
    from bench.common import free_port
    from tests.producers.bounces import corpus
    from tests.producers.dmarc_helpers import big_report, mailed
    from worker.core.return_path import return_path

    _empty(url)
    email = corpus.sent_email(url, DSN_TO)
    key = corpus.FIXTURE_KEY
    dsn_to = return_path(email["id"], DSN_TO, BOUNCE_DOMAIN, "bounces", key)
    dsn = corpus.readdress(corpus.load("postfix-unknown-user.eml"), email["id"], DSN_TO, key)
    strangers = [mailed(big_report(50_000, domain=STRANGER, report_id=f"s{i}"), f"s{i}") for i in range(6)]
    ours = [mailed(big_report(5_000, report_id=f"o{i}", distinct=True), f"o{i}") for i in range(6)]
    port = free_port()
    with receiver(url, port) as proc:
        quiet = [asyncio.run(_send(port, dsn, dsn_to, "127.0.0.2"))[1] for _ in range(5)]
        rss, _ = peak_rss_mib(proc.pid)
        latencies, codes, seconds = asyncio.run(_dsns_during(port, (dsn, dsn_to), strangers + ours))
        after, peak = peak_rss_mib(proc.pid)
    return [
        f"DSN answered, no flood: median {statistics.median(quiet):.3f} s",
        f"DSN answered during the flood ({len(latencies)} DSNs over {seconds:.1f} s): median"
        f" {statistics.median(latencies):.3f} s, slowest {max(latencies):.3f} s",
        f"flood replies: {codes.count(250)} x 250, {codes.count(451)} x 451 (the lane full: the MTA retries)",
        f"receiver RSS: {rss:.0f} MiB before the flood, peak {peak:.0f} MiB, {after:.0f} MiB after",
    ]


def main() -> int:
    """Print the three figures."""
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
        return 0
    from bench.common import database
    from tests.producers.dmarc_helpers import add_sender

    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    with database() as url, tempfile.TemporaryDirectory(prefix="mailroom-dmarc-") as work:
        add_sender(url)
        print(
            f"DMARC report cost (median of {repeats}; CPU and peak RSS of a process that takes in one report)"
        )
        for line in ingest_costs(url, Path(work), repeats):
            print(line)
        print()
        print("bounce receiver: 6 strangers' 50,000-record reports and 6 of ours at 5,000 records, at once")
        for line in flood_cost(url):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
