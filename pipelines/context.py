"""Context columns some expectations compare against (see schemas/expectations.py).

Each function takes the batch and the reference data as DataFrames and adds `ctx_*` columns with
left joins, so a row whose reference is missing keeps null context (and fails its not-null check)
instead of disappearing.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from schemas.expectations import (
    CTX_BATCH_END_TS,
    CTX_PREVIOUS_COUNT,
    CTX_RUN_START_TS,
    CTX_TOPIC_KNOWN,
    CTX_TOPIC_PARTITIONS,
)

METER_KEY = ("run_id", "broker_id", "mbean", "process_start_ts")


def with_run_window(batch: DataFrame, runs: DataFrame) -> DataFrame:
    """ctx_run_start_ts: the run's start; ctx_batch_end_ts: the end of the row's emulator batch."""
    starts = runs.groupBy("run_id").agg(F.min("start_ts").alias(CTX_RUN_START_TS))
    ends = runs.groupBy("run_id", "batch_id").agg(F.max("end_ts").alias(CTX_BATCH_END_TS))
    return (batch.join(F.broadcast(starts), "run_id", "left")
            .join(F.broadcast(ends), ["run_id", "batch_id"], "left"))


def with_topic(batch: DataFrame, topic_configs: DataFrame) -> DataFrame:
    """ctx_topic_partitions: the topic's partition count; ctx_topic_known: false if the topic is unknown."""
    counts = topic_configs.groupBy("run_id", "topic").agg(F.max("partitions").alias(CTX_TOPIC_PARTITIONS))
    joined = batch.join(F.broadcast(counts), ["run_id", "topic"], "left")
    return joined.withColumn(CTX_TOPIC_KNOWN, F.col("topic").isNull() | F.col(CTX_TOPIC_PARTITIONS).isNotNull())


def with_previous_count(batch: DataFrame, history: DataFrame) -> DataFrame:
    """ctx_previous_count: the count the same meter of the same broker process reported just before.

    `history` holds earlier validated rows (silver) strictly older than the batch; rows of the batch
    are compared with their predecessor in the batch or, for the first one, in the history.
    """
    marker = "__in_batch"
    past = history.select(*METER_KEY, "ts", "count").withColumn(marker, F.lit(False))
    current = batch.withColumn(marker, F.lit(True))
    both = current.unionByName(past, allowMissingColumns=True)
    previous = F.lag("count").over(Window.partitionBy(*METER_KEY).orderBy("ts"))
    return both.withColumn(CTX_PREVIOUS_COUNT, previous).where(F.col(marker)).drop(marker)


class LastCounts:
    """The latest validated count of every meter, kept on the driver between micro-batches.

    Reading the previous counts back from silver costs a Delta snapshot and a scan per micro-batch;
    the validate job instead loads them from silver once (its first batch after a start, so a replayed
    batch sees exactly what silver holds) and then folds in each batch's valid meter rows. Entries older
    than the look-back are dropped, so the memory is bounded by the number of live broker processes
    times meters. A row older than a meter's newest known count is compared with nothing (not with an
    older silver row): meters arrive in order from one emulator or exporter.
    """

    def __init__(self, lookback_us: int) -> None:
        if lookback_us <= 0:
            raise ValueError(f"lookback_us must be > 0, got {lookback_us}")
        self.lookback_us = lookback_us
        self.loaded = False
        self.latest: dict[tuple[Any, ...], tuple[int, int]] = {}  # meter key -> (ts in epoch µs, count)

    def fold(self, rows: Any) -> None:
        """Fold in valid meter rows: a pandas frame with METER_KEY, `ts` and `process_start_ts` as epoch µs."""
        rows = rows.dropna(subset=["count"])  # a meter row without a count has nothing to compare
        if len(rows) == 0:
            return
        newest = rows.sort_values("ts").drop_duplicates(list(METER_KEY), keep="last")
        for key, ts, count in zip(newest[list(METER_KEY)].itertuples(index=False, name=None),
                                  newest["ts"], newest["count"], strict=True):
            key = tuple(k.item() if hasattr(k, "item") else k for k in key)  # NumPy scalars -> Python values
            known = self.latest.get(key)
            if known is None or int(ts) >= known[0]:
                self.latest[key] = (int(ts), int(count))
        horizon = max(ts for ts, _ in self.latest.values()) - self.lookback_us
        self.latest = {k: v for k, v in self.latest.items() if v[0] >= horizon}

    def history(self, spark: SparkSession, before_us: int) -> DataFrame:
        """The known counts strictly before `before_us` and within the look-back, as silver-like rows."""
        since = before_us - self.lookback_us
        rows = [(*k, ts, count) for k, (ts, count) in self.latest.items() if since <= ts < before_us]
        schema = "run_id string, broker_id int, mbean string, process_start_us long, ts_us long, count long"
        return (spark.createDataFrame(rows, schema)
                .select("run_id", "broker_id", "mbean",
                        F.timestamp_micros("process_start_us").alias("process_start_ts"),
                        F.timestamp_micros("ts_us").alias("ts"), "count"))


def newest_meter_counts(rows: DataFrame) -> DataFrame:
    """The newest count per meter among `rows`, timestamps as epoch µs (what `LastCounts.fold` takes)."""
    newest = F.max_by(F.struct("ts", "count"), "ts")
    return (rows.where((F.col("kind") == "meter") & F.col("count").isNotNull())
            .groupBy(*METER_KEY).agg(newest.alias("n"))
            .select("run_id", "broker_id", "mbean", F.unix_micros("process_start_ts").alias("process_start_ts"),
                    F.unix_micros("n.ts").alias("ts"), F.col("n.count").alias("count")))
