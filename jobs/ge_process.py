"""Great Expectations in a child process, for the checks that run behind live batches (jobs/dq_behind.py).

GE's pandas engine spends ~0.5 s of pure Python per table and run. In a thread of the driver it holds the GIL that
long, and every micro-batch running meanwhile (its py4j calls, its Arrow conversions) waits for it: a live batch
took 60 % longer. A spawned child has its own interpreter; only the tables' rows (Arrow) and the outcomes cross.

The child ignores SIGINT and SIGTERM: Ctrl-C in a terminal (or a supervisor signalling the process group) reaches
every process of the group, and the job stops itself cleanly, closing this child after its last check; a child
interrupted mid-check would have made a clean stop a failed run. It ends with its parent all the same (its call
queue closes).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.spawn
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

import pyarrow as pa

from pipelines.great_expectations_check import GeOutcome, SuiteValidator, arrow_to_ge_frame
from schemas.bronze import BRONZE_BY_NAME

_validator: SuiteValidator | None = None


def _suite_validator() -> SuiteValidator:
    global _validator
    if _validator is None:
        _validator = SuiteValidator(engines=("pandas",))  # no Spark session here
    return _validator


def _outcomes(tables: dict[str, pa.Table]) -> dict[str, GeOutcome]:
    try:
        ge = _suite_validator()
        return {name: ge.validate_frame(BRONZE_BY_NAME[name], arrow_to_ge_frame(rows)) for name, rows in tables.items()}
    except Exception as e:  # as text: some exceptions (pyspark's) cannot be unpickled in the parent
        raise RuntimeError(f"{type(e).__name__}: {e}") from None


def _start_child() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A child of a parent started as `python -m <package>` (pytest without xdist) keeps the main module of spawn's
    # `python -c`, with neither a spec nor a file; PySpark's Connect package, which GE imports, takes such a main for a
    # doctest run and exits the process. The child's main is spawn's own module: say so.
    main = sys.modules["__main__"]
    if main.__spec__ is None and not hasattr(main, "__file__"):
        main.__file__ = multiprocessing.spawn.__file__


class GeProcess:
    """One child process; GE is imported there as soon as it starts, so the first check does not wait for it."""

    def __init__(self) -> None:
        self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_start_child)
        self.pool.submit(_suite_validator)

    def outcomes(self, tables: dict[str, pa.Table]) -> dict[str, GeOutcome]:
        """Each bronze table's rows (name -> rows with their context) -> GE's outcome on them."""
        return self.pool.submit(_outcomes, tables).result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
