"""Which producers `mailroom worker` runs beside delivery: the command line assembles them, the engine runs them."""

from __future__ import annotations

from worker.engine.producer import Producer


def worker_producers() -> list[Producer]:
    """Every producer a worker runs when asked to (`--no-producers` runs none), in a fixed order."""
    from worker.hooks import producer as webhooks
    from worker.ops import maintenance
    from worker.producers import birthdays, lifecycle, rendering
    from worker.producers.bounces import digest

    return [
        rendering.PRODUCER,
        birthdays.PRODUCER,
        lifecycle.PRODUCER,
        maintenance.PRODUCER,
        digest.PRODUCER,
        webhooks.producer(),
    ]
