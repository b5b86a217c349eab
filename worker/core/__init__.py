"""Shared core: configuration, database access, schema, validation, message building, enqueue (the bottom layer)."""
