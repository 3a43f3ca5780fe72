"""Command-line argument types shared by isrwatch's commands: a bad value is argparse's usage error, naming it."""

from __future__ import annotations

import argparse

from foundation.durations import duration_ms
from foundation.object_store import UnsupportedLakehouse, check_root


def lakehouse_root(value: str) -> str:
    """A `--lakehouse` the writers and readers can all reach (foundation/object_store.check_root)."""
    try:
        return check_root(value)
    except UnsupportedLakehouse as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def duration_ms_argument(value: str) -> int:
    """A positive duration written with its unit (foundation/durations.py), in milliseconds."""
    try:
        ms = duration_ms(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive duration, got {value!r}")
    return ms


def seconds_argument(value: str) -> float:
    """`duration_ms_argument` in seconds."""
    return duration_ms_argument(value) / 1000
