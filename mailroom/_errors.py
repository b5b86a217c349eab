"""The errors an application meets when it enqueues, under their public names."""

from __future__ import annotations

from worker.core.config import ConfigError
from worker.core.validation import BatchValidationError, ValidationError

__all__ = ["BatchValidationError", "ConfigError", "ValidationError"]
