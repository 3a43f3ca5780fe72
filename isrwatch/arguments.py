"""Command-line argument types shared by isrwatch's commands: a bad value is argparse's usage error, naming it."""

from __future__ import annotations

import argparse

from foundation.object_store import UnsupportedLakehouse, check_root


def lakehouse_root(value: str) -> str:
    """A `--lakehouse` the writers and readers can all reach (foundation/object_store.check_root)."""
    try:
        return check_root(value)
    except UnsupportedLakehouse as e:
        raise argparse.ArgumentTypeError(str(e)) from None
