"""Mailroom's headless engine: configuration, database access, the queue, delivery, producers and the CLI."""

__version__ = "0.1.0"
