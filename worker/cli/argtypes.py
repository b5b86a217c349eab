"""argparse types shared by the commands: a bad value is a usage error that says what was expected."""

from __future__ import annotations

import argparse


def positive_count(text: str) -> int:
    """argparse type: a whole number of 1 or more (a clear usage error otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


def whole_number(text: str) -> int:
    """argparse type: a whole number of 0 or more (0 often meaning "no cap")."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return value
