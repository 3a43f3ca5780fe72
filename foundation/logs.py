"""isrwatch's own log lines: one logger tree (`isrwatch.<part>`), written to stderr as plain lines.

A job's and a long-running command's status ("validate: one query over 8 tables …", "isrwatch pipeline: stopping")
is INFO; what went wrong is WARNING or ERROR. `configure` is called once by each entry point (the `isrwatch`
command, each job's main): INFO and up, or DEBUG with `verbose`. Records still propagate (a test's log capture sees
them); the root's own handler, which only `--verbose` installs, leaves them to this one. Third-party loggers (py4j,
Great Expectations) are quietened separately (foundation/spark.py `quiet_python_loggers`). Library code only logs,
never configures.
"""

from __future__ import annotations

import logging
import sys

ROOT = "isrwatch"


class _Stderr(logging.Handler):
    """Writes to whatever `sys.stderr` is at the time of the record (a test capturing it, a redirected stream), not
    the stream there was when the handler was made."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:  # a closed stream: as logging's own handlers do
            self.handleError(record)


def configure(verbose: bool = False) -> None:
    """isrwatch's log lines to stderr, as they are (no level or time prefix: they read as the command's output)."""
    root = logging.getLogger(ROOT)
    if not any(isinstance(h, _Stderr) for h in root.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def not_ours(record: logging.LogRecord) -> bool:
    """A filter for the root logger's handlers: isrwatch's lines are written by its own handler already."""
    return not record.name.startswith(ROOT + ".") and record.name != ROOT


def logger(part: str) -> logging.Logger:
    """The logger of one part of isrwatch, e.g. `logger("validate")`."""
    return logging.getLogger(f"{ROOT}.{part}")
