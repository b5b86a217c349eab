"""The errors an application meets when it enqueues, under their public names."""

from __future__ import annotations

from worker.core.config import ConfigError
from worker.core.validation import ValidationError

__all__ = ["BatchValidationError", "ConfigError", "ValidationError"]


class BatchValidationError(ValidationError):
    """One request of an `enqueue_many` call was refused; nothing of the call was written.

    `index` is the request's position in the sequence given (from 0); `field` and `message`
    are what `enqueue` would have raised for that request alone.
    """

    __module__ = "mailroom"

    def __init__(self, index: int, field: str, message: str) -> None:
        super().__init__(field, message)
        self.index = index
        self.args = (f"requests[{index}]: {field}: {message}",)

    def __reduce__(self) -> tuple[type[BatchValidationError], tuple[int, str, str]]:
        # The arguments `__init__` takes, not `args`: so the error survives pickling (multiprocessing, logging).
        return (type(self), (self.index, self.field, self.message))
