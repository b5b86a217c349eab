"""The delivery path through a real PgBouncer in transaction-pooling mode (Debian package `pgbouncer`).

    python -m bench.pgbouncer [N]

Starts a throwaway embedded PostgreSQL, migrates it directly (migrations take a session-level
advisory lock: run `mailroom db upgrade` against PostgreSQL itself), then puts PgBouncer in front
of it with `pool_mode = transaction` and a pool of 4 server connections, and runs what an
application and a worker do through it: enqueue N emails with the Python API, and a draining
`mailroom worker` with MAILROOM_DATABASE_URL pointing at PgBouncer and
MAILROOM_LISTEN_DATABASE_URL at PostgreSQL directly. It checks that every email was sent and that
PgBouncer logged no error, and prints the rate. Exits 1 on any failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench.common import add_bench_sender, database, free_port, sink_process
from worker.core.config import Settings
from worker.core.outbox import EmailRequest, enqueue

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def start_pgbouncer(direct: str, work: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """PgBouncer in transaction mode in front of `direct`; its process, its URL and its log."""
    info = conninfo_to_dict(direct)
    port, log = free_port(), work / "pgbouncer.log"
    ini = work / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"* = host={info['host']} port={info.get('port', 5432)} user={info['user']}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {work / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\n"
        f"logfile = {log}\npidfile = {work / 'pgbouncer.pid'}\n"
    )
    (work / "users.txt").write_text(f'"{info["user"]}" ""\n')
    owner = Path(str(info["host"])).stat().st_uid  # the server's socket directory: run as its owner
    user = subprocess.run(
        ["id", "-nu", str(owner)], capture_output=True, text=True, check=True
    ).stdout.strip()
    shutil.chown(work, user)
    for path in work.iterdir():
        shutil.chown(path, user)
    proc = subprocess.Popen(
        [PGBOUNCER, "-u", user, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    url = f"postgresql://{info['user']}@127.0.0.1:{port}/{info['dbname']}"
    deadline = time.monotonic() + 10
    while True:
        try:
            with psycopg.connect(url, connect_timeout=1) as conn:
                conn.execute("SELECT 1")
            return proc, url, log
        except psycopg.OperationalError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise SystemExit(
                    f"pgbouncer did not start: {proc.stderr.read().decode() if proc.stderr else ''}"
                ) from None
            time.sleep(0.1)


def main() -> int:
    """Run the check; print what happened."""
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    work = Path(tempfile.mkdtemp(prefix="mailroom-pgbouncer-"))
    with database() as direct, sink_process() as (port, kind):
        proc, pooled, log = start_pgbouncer(direct, work)
        try:
            add_bench_sender(direct, port)
            settings = Settings(database_url=pooled)
            with psycopg.connect(pooled, prepare_threshold=None) as conn:
                for i in range(n):
                    with conn.transaction():
                        enqueue(
                            conn,
                            EmailRequest(to=f"p{i}@example.com", subject=f"Pooled {i}", text="hi"),
                            settings=settings,
                        )
            env = {
                **os.environ,
                "MAILROOM_DATABASE_URL": pooled,
                "MAILROOM_LISTEN_DATABASE_URL": direct,
                "MAILROOM_TRANSACTION_POOLER": "true",
            }
            started = time.perf_counter()
            done = subprocess.run(
                [str(Path(sys.executable).with_name("mailroom")), "worker", "--drain", "--no-producers", "--concurrency", "4"],
                env=env, capture_output=True, text=True, check=False, timeout=int(os.environ.get("BENCH_TIMEOUT", "600")),
            )  # fmt: skip
            elapsed = time.perf_counter() - started
            with psycopg.connect(direct) as conn:
                rows = conn.execute(
                    "SELECT status, count(*) FROM mailroom.email_queue GROUP BY status"
                ).fetchall()
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        errors = [line for line in log.read_text().splitlines() if " ERROR " in line or "WARNING" in line]
        statuses = {str(s): int(c) for s, c in rows}
        print(f"sink: {kind}; pgbouncer: transaction pooling, 4 server connections")
        print(
            f"worker exit {done.returncode}; statuses {statuses}; {n / elapsed:,.0f} emails/s through PgBouncer"
        )
        print(f"pgbouncer errors/warnings: {len(errors)}" + "".join(f"\n  {e}" for e in errors[:5]))
        if done.returncode != 0:
            print(done.stderr[-3000:])
        ok = done.returncode == 0 and statuses == {"sent": n} and not errors
        print("OK" if ok else "FAILED")
    shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
