"""Validate a micro-batch with its table's Great Expectations suite.

GE's verdict is the record of each run in `silver.dq_runs`. The rows are routed by pipelines/expectations.py, which
implements the same suite; GE is not asked to agree while the job runs (tests/pipeline/test_row_checks.py has GE
itself count what the check counts). GE validates where the rows are: its `pandas` engine a frame collected to the
driver through Arrow (live batches, up to `driver_max_rows` rows), its `spark` engine a DataFrame on the
executors (GE's Spark engine runs a Spark job per metric, seconds per batch).
"""

from __future__ import annotations

import importlib
import os
import threading
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from schemas.table import TableDef


def ge_ready(df: DataFrame) -> DataFrame:
    """GE cannot serialise timestamps into its results: give it timestamps as epoch microseconds."""
    return df.select(*(F.unix_micros(F.col(f.name)).alias(f.name) if isinstance(f.dataType, TimestampType)
                       else F.col(f.name) for f in df.schema))


def arrow_to_ge_frame(rows: pa.Table) -> Any:
    """`ge_ready` for rows already collected through Arrow: a pandas frame, timestamps as epoch µs."""
    columns = [pc.cast(c.cast(pa.timestamp("us", tz="UTC")), pa.int64()) if pa.types.is_timestamp(c.type) else c
               for c in rows.columns]
    return pa.table(columns, names=rows.column_names).to_pandas()


@dataclass(frozen=True)
class GeOutcome:
    success: bool
    evaluated: int
    successful: int
    unexpected: dict[str, int]  # expectation label -> unexpected rows (only labels with some)
    engine: str  # the GE execution engine that validated the batch


def import_in_background() -> None:
    """Start importing Great Expectations (~5 s of Python) on a thread, so a job overlaps it with the JVM's
    start-up; `SuiteValidator` then waits for that import (Python's import lock) instead of doing it."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    threading.Thread(target=importlib.import_module, args=("great_expectations",), name="import-great-expectations",
                     daemon=True).start()


class SuiteValidator:
    """One ephemeral GE data context per process with a pandas and a Spark data source, one suite per
    table, built on first use."""

    def __init__(self, engines: tuple[str, ...] = ("pandas", "spark")) -> None:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        add = {"pandas": lambda: self.context.data_sources.add_pandas(name="pandas_batches"),
               "spark": lambda: self.context.data_sources.add_spark(name="spark_batches")}
        sources: dict[str, Any] = {engine: add[engine]() for engine in engines}
        self.batch_definitions = {
            engine: source.add_dataframe_asset(name="micro_batch").add_batch_definition_whole_dataframe("whole")
            for engine, source in sources.items()
        }
        self.suites: dict[str, Any] = {}
        # Streaming queries call foreachBatch from several threads; a GE context is not thread-safe.
        self.lock = threading.Lock()

    def validate_frame(self, td: TableDef, frame: Any) -> GeOutcome:
        """Validate a pandas frame holding `ge_ready` columns (GE's pandas engine)."""
        with self.lock:
            return self._validate(td, "pandas", frame)

    def validate_dataframe(self, td: TableDef, df: DataFrame) -> GeOutcome:
        """Validate a Spark DataFrame where it is (GE's Spark engine)."""
        with self.lock:
            return self._validate(td, "spark", ge_ready(df))

    def _validate(self, td: TableDef, engine: str, frame: Any) -> GeOutcome:
        from schemas.suites import expectation_suite

        if td.qualified_name not in self.suites:
            self.suites[td.qualified_name] = expectation_suite(td)
        batch = self.batch_definitions[engine].get_batch(batch_parameters={"dataframe": frame})
        # Only the counts are used: no partial lists of unexpected values to compute.
        result = batch.validate(self.suites[td.qualified_name],
                                result_format={"result_format": "BASIC", "partial_unexpected_count": 0})
        unexpected: dict[str, int] = {}
        for r in result.results:
            if r.exception_info and r.exception_info.get("raised_exception"):
                raise RuntimeError(f"{td.qualified_name}: GE could not evaluate "
                                   f"{r.expectation_config.meta['label']}: {r.exception_info['exception_message']}")
            count = int(r.result.get("unexpected_count") or 0)
            if count:
                unexpected[r.expectation_config.meta["label"]] = count
        stats = result.statistics
        return GeOutcome(bool(result.success), int(stats["evaluated_expectations"]),
                         int(stats["successful_expectations"]), unexpected, engine)
