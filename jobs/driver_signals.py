"""How a job's driver takes signals: SIGTERM stops it as Ctrl-C does, and `isrwatch submit` can find it.

A process supervisor stops a job with SIGTERM; Python's default would end the driver at once, mid micro-batch.
Here the first SIGTERM or SIGINT only asks for a stop (`stop_requested`): the job's wait on its query sees it,
lets the running micro-batch finish and stops the query (jobs/streaming.py `await_query`), so its checkpoint is
consistent and a restart resumes at the next batch. Raising KeyboardInterrupt instead would break the py4j call
the main thread is in, and with it the connection a foreachBatch callback may be using; pyspark's own SIGINT
handler would cancel every running Spark job. A second signal raises KeyboardInterrupt: stop at once.
`install` replaces pyspark's handler, so call it after the session is built. Under `isrwatch submit` the driver
is a child of spark-submit's JVM: it writes its process id where ISRWATCH_DRIVER_PIDFILE says, so the signal
can reach it.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType

stop_requested = threading.Event()


def _request_stop(signum: int, _frame: FrameType | None) -> None:
    if stop_requested.is_set():
        raise KeyboardInterrupt
    stop_requested.set()


def install() -> None:
    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    pidfile = os.environ.get("ISRWATCH_DRIVER_PIDFILE")
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")
