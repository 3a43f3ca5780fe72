"""Context columns some expectations compare against (see schemas/expectations.py).

Each function takes the batch and the reference data as DataFrames and adds `ctx_*` columns with
left joins, so a row whose reference is missing keeps null context (and fails its not-null check)
instead of disappearing.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
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
