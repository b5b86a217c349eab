"""What tracing costs the worker: delivery throughput with tracing off (A/B against older code) and on.

    python -m bench.tracing [N] [ROUNDS] [--base DIR] [--code DIR]

Each round runs, in a fresh process each and in turn (interleaved, so a noisy host's drift falls on
every variant alike), a draining worker over N queued emails against one local SMTP sink:

  base   the code in DIR (e.g. `git archive <commit> | tar -x -C DIR`: the commit before tracing),
         tracing off; left out without --base
  off    this code (or the code in --code DIR), tracing off (the default: no OTEL_* variable set)
  on     this code, the OpenTelemetry SDK on (a batch processor, as deployed, into an exporter that
         drops the spans), every email carrying a stored traceparent (its spans have a parent)

The rate is sent emails over the span of their attempts in send_logs (start-up is not delivery); the
CPU is the worker process's user and system time over the emails it sent (start-up included, the
same for every variant). Prints each run, then each variant's medians and the spread of its runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import psycopg

from bench.common import add_bench_sender, bulk_enqueue, database, reset, sink_process
from bench.throughput import delivery_rate

ROOT = Path(__file__).resolve().parents[1]
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

# Run in a fresh interpreter with the variant's code first on sys.path; only names both versions have.
_RUNNER = """
import asyncio, sys
from worker.core.config import Settings
from worker.core.crypto import generate_key
from worker.engine.delivery import Worker, WorkerOptions
url, mode, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
if mode == "on":
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    from worker.core import tracing

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    tracing.use_provider(provider)
settings = Settings(database_url=url, secret_key=generate_key())
asyncio.run(Worker(url, settings, WorkerOptions(concurrency=concurrency, drain=True)).run())
"""


def _prepare(url: str, port: int, n: int, traced: bool) -> None:
    reset(url)
    add_bench_sender(url, port)
    bulk_enqueue(url, n)
    if traced:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE mailroom.email_queue SET traceparent = %s, correlation_id = 'bench-' || id",
                (TRACEPARENT,),
            )
    with psycopg.connect(url, autocommit=True) as conn:
        # Every variant starts from the same table state (the update above leaves dead rows behind).
        conn.execute("VACUUM ANALYZE mailroom.email_queue")


def _run(url: str, code: Path, mode: str, concurrency: int) -> tuple[float, float]:
    """Emails/s, and the worker process's CPU time (user + system) per sent email in microseconds: on a
    shared host the rate moves with the neighbours' load, the CPU an email costs much less."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "MAILROOM_TRACING"}
    env["PYTHONPATH"] = str(code)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-c", _RUNNER, url, mode, str(concurrency)],
        env=env,
        cwd=code,
        check=True,
        timeout=900,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rate, sent = delivery_rate(url)
    return rate, cpu / max(sent, 1) * 1e6


def main() -> None:
    """Interleave the variants for ROUNDS rounds and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", nargs="?", type=int, default=10_000)
    parser.add_argument("rounds", nargs="?", type=int, default=5)
    parser.add_argument("--base", type=Path, help="a checkout of the code to compare with (tracing off)")
    parser.add_argument(
        "--code", type=Path, default=ROOT, help="the code to measure (default: this checkout)"
    )
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    variants = [("base", args.base, "off")] if args.base else []
    variants += [("off", args.code, "off"), ("on", args.code, "on")]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    cpus: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    with database() as url, sink_process() as (port, kind):
        print(f"sink: {kind}; {args.n} emails a run; {args.rounds} rounds; concurrency {args.concurrency}")
        for round_ in range(args.rounds):
            for name, code, mode in variants:
                _prepare(url, port, args.n, traced=mode == "on")
                rate, cpu = _run(url, code, mode, args.concurrency)
                rates[name].append(rate)
                cpus[name].append(cpu)
                print(
                    f"round {round_ + 1} {name:>4}: {rate:8,.0f} emails/s, {cpu:6,.0f} us CPU an email",
                    flush=True,
                )
    for label, figures in (("emails/s", rates), ("us of worker CPU an email", cpus)):
        reference = statistics.median(figures["off"])
        print(f"-- {label}")
        for name, found in figures.items():
            median = statistics.median(found)
            spread = (max(found) - min(found)) / median if median else 0.0
            print(
                f"{name:>4}: median {median:8,.0f}, runs {min(found):,.0f}..{max(found):,.0f}"
                f" (spread {spread:.0%}), {median / reference - 1:+.1%} against off"
            )


if __name__ == "__main__":
    main()
