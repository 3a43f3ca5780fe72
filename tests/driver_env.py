"""The environment of a Spark driver that a test starts as a process of its own (a job, `isrwatch submit`,
`isrwatch pipeline run`, `isrwatch sql`)."""

from __future__ import annotations

import os
import sys

# C1 only: such a driver lives under a minute, and C2's compilations cost it more than they return. Measured here,
# idle, a `pipeline run --jobs posture,slo,alerts` over the silver lake: 45-48 s with the JDK's tiered compilation,
# 34-36 s with C1 alone. The worker's own session lives the whole run and goes the other way
# (tests/pipeline/test_validate.py and tests/alerts/test_posture_slo_jobs.py: 196 s tiered, 220 s C1 alone), so it
# is left as it is.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1"


def driver_env(**extra: str) -> dict[str, str]:
    """This process's environment for a short-lived driver: this venv's Python on both sides, C1 only
    (SPARK_SUBMIT_OPTS, which spark-submit puts on the driver's command line), then `extra`."""
    opts = " ".join(o for o in (os.environ.get("SPARK_SUBMIT_OPTS"), SHORT_LIVED_JVM) if o)
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_SUBMIT_OPTS": opts, **extra}
