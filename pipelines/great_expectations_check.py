"""Validate a micro-batch with its table's Great Expectations suite.

GE's verdict and per-expectation unexpected counts go to `silver.dq_runs`; the validate job also
checks them against the row-level routing (pipelines/expectations.py), so the two can never disagree
silently. Two engines: `pandas` collects the batch to the driver through Arrow (fast for the small
batches of a live stream; GE's Spark engine runs a Spark job per metric, about a second per batch),
and `spark` validates where the data is (for batches too large for the driver).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from schemas.table import TableDef

ENGINES = ("pandas", "spark")


@dataclass(frozen=True)
class GeOutcome:
    success: bool
    evaluated: int
    successful: int
    unexpected: dict[str, int]  # expectation label -> unexpected rows (only labels with some)


class SuiteValidator:
    """One ephemeral GE data context per process, one suite per table, built on first use."""

    def __init__(self, engine: str) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.engine = engine
        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        source = (self.context.data_sources.add_pandas(name="batches") if engine == "pandas"
                  else self.context.data_sources.add_spark(name="batches"))
        self.batch_definition = source.add_dataframe_asset(name="micro_batch").add_batch_definition_whole_dataframe(
            "whole")
        self.suites: dict[str, Any] = {}
        # Streaming queries call foreachBatch from several threads; a GE context is not thread-safe.
        self.lock = threading.Lock()

    def validate(self, td: TableDef, df: DataFrame) -> GeOutcome:
        # GE cannot serialise timestamps into its results: compare them as epoch microseconds.
        df = df.select(*(F.unix_micros(F.col(f.name)).alias(f.name) if isinstance(f.dataType, TimestampType)
                         else F.col(f.name) for f in df.schema))
        frame: Any = df.toPandas() if self.engine == "pandas" else df
        with self.lock:
            return self._validate(td, frame)

    def _validate(self, td: TableDef, frame: Any) -> GeOutcome:
        from schemas.suites import expectation_suite

        if td.qualified_name not in self.suites:
            self.suites[td.qualified_name] = expectation_suite(td)
        batch = self.batch_definition.get_batch(batch_parameters={"dataframe": frame})
        result = batch.validate(self.suites[td.qualified_name], result_format="BASIC")
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
                         int(stats["successful_expectations"]), unexpected)
