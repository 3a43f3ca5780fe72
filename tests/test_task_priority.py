"""With a local master, Spark's tasks and the JIT compiler run behind the driver's threads (jvm/local-master,
foundation/spark.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.thread_priority import jvm_process, thread_nices


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/thread-self").exists(), reason="a thread's priority is set on Linux only")
def test_every_task_thread_and_the_jit_compiler_run_at_a_lower_priority_than_the_drivers_threads(spark: Any) -> None:
    assert spark.conf.get("spark.plugins") == "isrwatch.spark.ThroughputWorkAtLowPriority"
    spark.range(0, 1000, numPartitions=4).selectExpr("sum(id)").collect()  # tasks on every task thread there is
    threads = thread_nices(jvm_process(spark))
    base = next(nice for name, nice in threads if name == "java")  # the JVM's main thread
    tasks = [nice for name, nice in threads if name.startswith("Executor task")]
    assert tasks, sorted(threads)
    assert set(tasks) == {min(base + 10, 19)}
    compilers = [nice for name, nice in threads if name.startswith(("C1 CompilerThre", "C2 CompilerThre"))]
    assert len(compilers) >= 2, sorted(threads)  # one of each tier at least, all made at the JVM's start
    assert set(compilers) == {min(base + 10, 19)}
    assert base == os.getpriority(os.PRIO_PROCESS, 0)  # the driver's Python and the JVM's own threads stay as they were
