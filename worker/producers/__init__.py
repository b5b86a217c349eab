"""Producers: each turns another system's state into email, whole in its own module or subpackage.

`lifecycle` (activation and recovery tokens), `birthdays` (events due in each person's zone),
`inbox` (order events, de-duplicated) and `documents` (signatures, reminders). Each module that
runs inside `mailroom worker` defines a `PRODUCER` (`worker.engine.producer.Producer`).
"""
