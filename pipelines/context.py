"""Context columns some expectations compare against (see schemas/expectations.py).

Each function takes the batch and the reference data as DataFrames and adds `ctx_*` columns with
left joins, so a row whose reference is missing keeps null context (and fails its not-null check)
instead of disappearing.
"""

from __future__ import annotations

from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from schemas.expectations import (
    CTX_BATCH_END_TS,
    CTX_BROKERS_KNOWN,
    CTX_ELR_DISJOINT_FROM_ISR,
    CTX_ELR_SUBSET_OF_REPLICAS,
    CTX_HW_WITHIN_LEADER_LEO,
    CTX_ISR_SUBSET_OF_REPLICAS,
    CTX_LEADER_IN_ISR_OR_OFFLINE,
    CTX_LOG_START_WITHIN_HW,
    CTX_PREVIOUS_COUNT,
    CTX_PREVIOUS_HIGH_WATERMARK,
    CTX_PREVIOUS_LEADER_EPOCH,
    CTX_PREVIOUS_LOG_START_OFFSET,
    CTX_PREVIOUS_PARTITION_EPOCH,
    CTX_REPLICA_LEOS_ALIGNED,
    CTX_REPLICAS_DISTINCT,
    CTX_RUN_START_TS,
    CTX_TOPIC_KNOWN,
    CTX_TOPIC_PARTITIONS,
    BrokerRefs,
)

METER_KEY = ("run_id", "broker_id", "mbean", "process_start_ts")
PARTITION_KEY = ("run_id", "topic", "partition")
# What a partition_state row is compared with in the partition's previous snapshot.
STATE_VALUES = ("leader", "leader_epoch", "partition_epoch", "high_watermark", "log_start_offset")
OFFLINE = -1  # Kafka's leader id of a partition without a leader


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
    # A row without ts comes last, as on the driver (pipelines/driver_context.py): Spark sorts nulls first.
    previous = F.lag("count").over(Window.partitionBy(*METER_KEY).orderBy(F.col("ts").asc_nulls_last()))
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


def _null_bool() -> Column:
    return F.lit(None).cast("boolean")


def _guarded(inputs: list[Column], holds: Column) -> Column:
    """`holds`, or null when any input is null (its not-null expectation reports that row, once)."""
    return F.when(reduce(lambda a, b: a | b, [c.isNull() for c in inputs]), _null_bool()).otherwise(holds)


def broker_registry(runs: DataFrame) -> DataFrame:
    """Per run, the union of the broker and the controller ids its bronze.runs rows announce."""
    def ids(col: str) -> Column:
        return F.filter(F.array_distinct(F.flatten(F.collect_list(col))), lambda x: x.isNotNull())
    return runs.groupBy("run_id").agg(ids("broker_ids").alias("__broker_ids"),
                                      ids("controller_ids").alias("__controller_ids"))


def with_broker_registry(batch: DataFrame, runs: DataFrame, refs: BrokerRefs) -> DataFrame:
    """ctx_brokers_known: every broker id in `refs.columns` is one of the run's (null: the run is unknown).

    A negative scalar names no broker (Kafka's -1); a null element of a list is no known broker.
    """
    if not refs.columns:
        raise ValueError("refs.columns must not be empty")
    joined = batch.join(F.broadcast(broker_registry(runs)), "run_id", "left")
    ids = F.col("__broker_ids")
    if refs.controllers:
        ids = F.array_union(ids, F.col("__controller_ids"))
    types = dict(batch.dtypes)

    def known(name: str) -> Column:
        c = F.col(name)
        if types[name].startswith("array"):
            return F.forall(c, lambda x: x.isNotNull() & F.array_contains(ids, x))
        return F.when(c.isNull(), _null_bool()).when(c < 0, F.lit(True)).otherwise(F.array_contains(ids, c))

    every = reduce(lambda a, b: a & b, [known(c) for c in refs.columns])
    flag = F.when(F.col("__broker_ids").isNull(), _null_bool()).otherwise(every)
    return joined.withColumn(CTX_BROKERS_KNOWN, flag).drop("__broker_ids", "__controller_ids")


def leader_leo() -> Column:
    """The leader's entry of replica_leos (aligned with replicas; its first position); null when offline,
    when the leader is not among the replicas, or past the end of replica_leos."""
    position = F.array_position(F.col("replicas"), F.col("leader"))  # 1-based, 0: not there
    return F.get(F.col("replica_leos"), (position - 1).cast("int"))


def with_replication_invariants(batch: DataFrame) -> DataFrame:
    """Kafka's invariants within one partition snapshot, one boolean ctx_* column each (null when an input
    is null). Lists compare as sets whose null elements are a value of their own."""
    replicas, isr, elr, leos = (F.col(c) for c in ("replicas", "isr", "elr", "replica_leos"))
    leader, hw, log_start = F.col("leader"), F.col("high_watermark"), F.col("log_start_offset")

    def subset(a: Column, b: Column) -> Column:
        return _guarded([a, b], F.size(F.array_except(a, b)) == 0)

    def disjoint(a: Column, b: Column) -> Column:
        return _guarded([a, b], F.size(F.array_intersect(a, b)) == 0)

    offline = leader == OFFLINE
    return batch.withColumns({
        CTX_ISR_SUBSET_OF_REPLICAS: subset(isr, replicas),
        CTX_LEADER_IN_ISR_OR_OFFLINE: _guarded([leader, isr],
                                               offline | F.coalesce(F.array_contains(isr, leader), F.lit(False))),
        CTX_ELR_DISJOINT_FROM_ISR: disjoint(elr, isr),
        CTX_ELR_SUBSET_OF_REPLICAS: subset(elr, replicas),
        CTX_REPLICAS_DISTINCT: _guarded([replicas], F.size(F.array_distinct(replicas)) == F.size(replicas)),
        CTX_REPLICA_LEOS_ALIGNED: _guarded([replicas, leos], F.size(replicas) == F.size(leos)),
        # Offline: Kafka shows no high watermark (-1). Online: 0 <= HW <= the leader's LEO (followers may lag).
        CTX_HW_WITHIN_LEADER_LEO: _guarded([leader, hw], F.when(offline, hw == OFFLINE)
                                           .otherwise((hw >= 0) & (hw <= leader_leo()))),
        # Retention deletes only below the high watermark; an offline partition shows no log start.
        CTX_LOG_START_WITHIN_HW: _guarded([leader, hw, log_start],
                                          F.when(offline, _null_bool()).otherwise(log_start <= hw)),
    })


def with_previous_state(batch: DataFrame, history: DataFrame) -> DataFrame:
    """The partition's previous snapshot, where Kafka promises something about the pair:

    - ctx_previous_leader_epoch, ctx_previous_partition_epoch: the previous epochs (they never decrease);
    - ctx_previous_high_watermark: only under the same leader epoch, online both times: the previous HW,
      capped by the leader's LEO now (a leader's HW never decreases, unless its own log lost the records
      above it: power loss of an unflushed page cache, with the broker back before the controller fenced it);
    - ctx_previous_log_start_offset: under the same leader epoch, online both times (retention only moves it
      forward; a new leader has its own log start).

    The predecessor is the previous row of the (run, topic, partition) in the batch (by ts) or, for the
    first one, in `history` (earlier validated rows, strictly older than the batch).
    """
    marker = "__in_batch"
    past = history.select(*PARTITION_KEY, "ts", *STATE_VALUES).withColumn(marker, F.lit(False))
    both = batch.withColumn(marker, F.lit(True)).unionByName(past, allowMissingColumns=True)
    prev = F.col("__prev")
    same_epoch = ((prev["leader_epoch"] == F.col("leader_epoch")) & (prev["leader"] >= 0)
                  & (F.col("leader") >= 0))
    leo = leader_leo()
    return (both.withColumn("__prev", F.lag(F.struct(*STATE_VALUES)).over(
                Window.partitionBy(*PARTITION_KEY).orderBy(F.col("ts").asc_nulls_last())))
            .where(F.col(marker))
            .withColumns({
                CTX_PREVIOUS_LEADER_EPOCH: prev["leader_epoch"],
                CTX_PREVIOUS_PARTITION_EPOCH: prev["partition_epoch"],
                CTX_PREVIOUS_HIGH_WATERMARK: F.when(same_epoch & prev["high_watermark"].isNotNull() & leo.isNotNull(),
                                                    F.least(prev["high_watermark"], leo)),
                CTX_PREVIOUS_LOG_START_OFFSET: F.when(same_epoch, prev["log_start_offset"]),
            })
            .drop(marker, "__prev"))


class LastStates:
    """The latest validated snapshot of every partition, kept on the driver between micro-batches, as
    `LastCounts` keeps meters: loaded from silver on the first batch after a start, then folded in from each
    batch's valid rows; entries older than the look-back are dropped."""

    def __init__(self, lookback_us: int) -> None:
        if lookback_us <= 0:
            raise ValueError(f"lookback_us must be > 0, got {lookback_us}")
        self.lookback_us = lookback_us
        self.loaded = False
        self.latest: dict[tuple[Any, ...], tuple[int, tuple[Any, ...]]] = {}  # key -> (ts µs, STATE_VALUES)

    def fold(self, rows: Any) -> None:
        """Fold in valid rows: a pandas frame with PARTITION_KEY, `ts` (epoch µs) and STATE_VALUES."""
        if len(rows) == 0:
            return
        newest = rows.sort_values("ts").drop_duplicates(list(PARTITION_KEY), keep="last")
        for key, ts, values in zip(newest[list(PARTITION_KEY)].itertuples(index=False, name=None), newest["ts"],
                                   newest[list(STATE_VALUES)].itertuples(index=False, name=None), strict=True):
            key = tuple(_py(k) for k in key)
            known = self.latest.get(key)
            if known is None or int(ts) >= known[0]:
                self.latest[key] = (int(ts), tuple(_py(v) for v in values))
        horizon = max(ts for ts, _ in self.latest.values()) - self.lookback_us
        self.latest = {k: v for k, v in self.latest.items() if v[0] >= horizon}

    def before(self, before_us: int) -> dict[tuple[Any, ...], tuple[int, tuple[Any, ...]]]:
        """The known snapshots strictly before `before_us` and within the look-back."""
        since = before_us - self.lookback_us
        return {k: v for k, v in self.latest.items() if since <= v[0] < before_us}

    def history(self, spark: SparkSession, before_us: int) -> DataFrame:
        """`before` as silver-like rows."""
        rows = [(*k, ts, *values) for k, (ts, values) in self.before(before_us).items()]
        schema = ("run_id string, topic string, partition int, ts_us long, leader int, leader_epoch int, "
                  "partition_epoch int, high_watermark long, log_start_offset long")
        return (spark.createDataFrame(rows, schema)
                .select(*PARTITION_KEY, F.timestamp_micros("ts_us").alias("ts"), *STATE_VALUES))


def newest_partition_states(rows: DataFrame) -> DataFrame:
    """The newest snapshot per partition among `rows`, ts as epoch µs (what `LastStates.fold` takes)."""
    newest = F.max_by(F.struct("ts", *STATE_VALUES), "ts")
    return (rows.groupBy(*PARTITION_KEY).agg(newest.alias("n"))
            .select(*PARTITION_KEY, F.unix_micros("n.ts").alias("ts"),
                    *(F.col(f"n.{c}").alias(c) for c in STATE_VALUES)))


def _py(value: Any) -> Any:
    """NumPy scalars -> Python values; pandas' missing values -> None."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    return value.item() if hasattr(value, "item") else value
