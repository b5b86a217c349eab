"""The bounce receiver's counting point: each report it takes in, by kind and outcome (`worker.core.metrics`)."""

from __future__ import annotations

from worker.core import metrics
from worker.producers.bounces.intake import Outcome
from worker.producers.bounces.receiver import Processor


def counted(process: Processor) -> Processor:
    """`process`, counting each message's outcome under each kind of report it applied (`none`: no report
    applied, e.g. quarantined or ignored; `error`: processing raised)."""

    def run(raw: bytes, recipients: list[str], client: str) -> Outcome:
        try:
            outcome = process(raw, recipients, client)
        except Exception:
            metrics.count_report("none", "error")
            raise
        for kind in sorted({str(a.kind) for a in outcome.applied} or {"none"}):
            metrics.count_report(kind, outcome.verdict)
        return outcome

    return run
