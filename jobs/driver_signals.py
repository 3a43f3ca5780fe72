"""How a job's driver takes signals: SIGTERM stops it as Ctrl-C does, and `isrwatch submit` can find it.

A process supervisor stops a job with SIGTERM; Python's default would end the driver at once, mid micro-batch.
Raised as KeyboardInterrupt instead, it reaches the job's wait on its query, which stops the query between
micro-batches (its checkpoint consistent, a restart resumes). Under `isrwatch submit` the driver is a child of
spark-submit's JVM: it writes its process id where ISRWATCH_DRIVER_PIDFILE says, so the signal can reach it.
"""

from __future__ import annotations

import os
import signal


def install() -> None:
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    pidfile = os.environ.get("ISRWATCH_DRIVER_PIDFILE")
    if pidfile:
        with open(pidfile, "w") as f:
            f.write(f"{os.getpid()}\n")
