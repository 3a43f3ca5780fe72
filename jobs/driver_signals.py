"""How a job's driver takes signals: SIGTERM stops it as Ctrl-C does, and `isrwatch submit` can find it.

A process supervisor stops a job with SIGTERM; Python's default would end the driver at once, mid micro-batch.
Here the first SIGTERM or SIGINT only asks for a stop (`stop_requested`): the job's wait on its query sees it,
lets the running micro-batch finish and stops the query (jobs/streaming.py `await_query`), so its checkpoint is
consistent and a restart resumes at the next batch. Raising KeyboardInterrupt instead would break the py4j call
the main thread is in, and with it the connection a foreachBatch callback may be using; pyspark's own SIGINT
handler would cancel every running Spark job. A second signal raises KeyboardInterrupt: stop at once.
`installed()` replaces pyspark's handler while it lasts (enter it after the session is built) and puts the
handlers it replaced back at its end (a pipeline run inside a longer-lived process, a test's, leaves none behind).
Under `isrwatch submit` the driver is a child of spark-submit's JVM: it writes its process id where
ISRWATCH_DRIVER_PIDFILE says, so the signal can reach it.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

stop_requested = threading.Event()


def _request_stop(signum: int, _frame: FrameType | None) -> None:
    if stop_requested.is_set():
        raise KeyboardInterrupt
    stop_requested.set()


@contextmanager
def installed() -> Iterator[None]:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for s in before:
        signal.signal(s, _request_stop)
    pidfile = os.environ.get("ISRWATCH_DRIVER_PIDFILE")
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
        stop_requested.clear()
