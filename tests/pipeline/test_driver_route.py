"""Live batches are validated on the driver (pipelines/arrow_expectations.py, pipelines/driver_context.py):
the same flags, reasons and context as the Spark predicates and joins that route large batches."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from pipelines.arrow_expectations import evaluate, failures, spark_text
from pipelines.context import LastCounts, with_run_window, with_topic
from pipelines.context import with_previous_count as spark_previous_count
from pipelines.driver_context import RunWindows, TopicPartitions, with_previous_count
from pipelines.expectations import FAILURES, VALID, CompiledExpectations
from schemas.bronze import BROKER_METRICS, CLUSTER_EVENTS
from schemas.expectations import (
    CTX_BATCH_END_TS,
    CTX_BROKERS_KNOWN,
    CTX_PREVIOUS_COUNT,
    CTX_PREVIOUS_LEADER_EPOCH,
    CTX_RUN_START_TS,
    CTX_TOPIC_KNOWN,
    CTX_TOPIC_PARTITIONS,
)

T0 = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.UTC)
S = 1_000_000
TS = pa.timestamp("us", tz="UTC")


def _metric(**over: Any) -> dict[str, Any]:
    row = {"run_id": "r", "batch_id": 1, "ts": T0, "broker_id": 1, "mbean":
           "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions", "name": "UnderReplicatedPartitions",
           "kind": "gauge", "value": 0.0, "count": None, "rate": None, "process_start_ts": T0}
    row.update(over)
    return row


def _metrics_with_context(rows: list[dict[str, Any]]) -> pa.Table:
    schema = BROKER_METRICS.landing_schema
    base = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in rows], schema=schema)
    n = base.num_rows
    return (base.append_column(CTX_RUN_START_TS, pa.array([T0 - dt.timedelta(seconds=10)] * n, TS))
            .append_column(CTX_BATCH_END_TS, pa.array([T0 + dt.timedelta(seconds=1)] * n, TS))
            .append_column(CTX_PREVIOUS_COUNT, pa.array([r.get("_previous") for r in rows], pa.int64()))
            .append_column(CTX_BROKERS_KNOWN, pa.array([r.get("_known", True) for r in rows], pa.bool_())))


BAD_METRICS = [
    _metric(),                                                    # valid
    _metric(mbean=None),                                          # not null
    _metric(value=-5.0),                                          # between, offending -5.0
    _metric(value=12345678.5),                                    # valid, but Java prints it 1.23456785E7
    _metric(name="NotAKafkaMetric"),                              # in set
    _metric(kind=None),                                           # null: only not-null fails, not in-set
    _metric(kind="meter", count=93, _previous=100),               # counter went backwards
    _metric(kind="meter", count=100, _previous=None),             # no predecessor: the pair is skipped
    _metric(ts=T0 + dt.timedelta(days=365, microseconds=120)),    # after its batch's end
    _metric(ts=T0 - dt.timedelta(days=1)),                        # before its run's start
    _metric(broker_id=99, _known=False),                          # no such broker in the run's registry
]


def test_arrow_flags_and_reasons_equal_the_spark_predicates_row_for_row(spark: Any) -> None:
    rows = _metrics_with_context(BAD_METRICS)
    expectations = BROKER_METRICS.expectations
    verdict = evaluate(rows, expectations)
    compiled = CompiledExpectations(expectations)
    flagged = compiled.with_failure_flags(spark.createDataFrame(rows))
    spark_rows = flagged.withColumn(FAILURES, compiled.failures).toPandas()

    assert verdict.valid.tolist() == spark_rows[VALID].tolist()
    for flag, arrow_flag in zip(compiled.flags, verdict.flags, strict=True):
        assert arrow_flag.tolist() == spark_rows[flag].tolist(), flag
    which = pd.Index(range(len(BAD_METRICS)))[~verdict.valid].to_numpy()
    arrow_reasons = failures(rows, expectations, verdict, which)
    spark_reasons = [[dict(f) for f in spark_rows[FAILURES][i]] for i in which]
    assert arrow_reasons == spark_reasons
    # The readable values themselves, as an operator sees them in the quarantine.
    by_row = dict(zip(which.tolist(), arrow_reasons, strict=True))
    assert by_row[2] == [{"expectation": "between(0<=value)", "column": "value", "value": "-5.0"}]
    assert by_row[6][0]["value"] == "count=93, ctx_previous_count=100"
    assert [f["expectation"] for f in by_row[5]] == ["not_null(kind)"]
    assert 3 not in by_row and 7 not in by_row and 0 not in by_row
    assert by_row[10] == [{"expectation": "broker_ids_known", "column": CTX_BROKERS_KNOWN, "value": "false"}]
    assert by_row[8][0]["value"].startswith("ctx_batch_end_ts=2026-11-23 12:00:01, ts=2027-11-23 12:00:00.00012")
    assert verdict.counts(expectations) == dict(Counter(f["expectation"] for r in arrow_reasons for f in r))


def test_json_parseable_follows_json_loads_as_great_expectations_pandas_engine_does() -> None:
    spec = next(e for e in CLUSTER_EVENTS.expectations if e.type == "expect_column_values_to_be_json_parseable")
    rows = pa.table({"detail": ['{"a":1}', "{not json", None, "[1, 2]", ""]})
    verdict = evaluate(rows, (spec,))
    assert verdict.flags[0].tolist() == [False, True, False, False, True]


@pytest.mark.parametrize(("value", "text"), [
    (None, "null"), (True, "true"), (-5.0, "-5.0"), (0.001, "0.001"), (0.0001, "1.0E-4"), (1e7, "1.0E7"),
    (123.25, "123.25"), (42, "42"), ("x", "x"),
    (dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "2026-01-02 03:04:05"),
    (dt.datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=dt.UTC), "2026-01-02 03:04:05.12"),
])
def test_offending_values_print_as_spark_casts_them(value: Any, text: str) -> None:
    assert spark_text(value) == text


def _runs(*rows: tuple[str, int, int, int]) -> pa.Table:
    return pa.table({"run_id": [r[0] for r in rows], "batch_id": pa.array([r[1] for r in rows], pa.int64()),
                     "start_ts": pa.array([r[2] for r in rows], pa.int64()).cast(TS),
                     "end_ts": pa.array([r[3] for r in rows], pa.int64()).cast(TS)})


def test_run_windows_equal_the_spark_join_and_load_only_on_a_miss(spark: Any) -> None:
    loads: list[list[str]] = []
    stored = _runs(("r", 0, 0, 1 * S), ("r", 1, 0, 2 * S), ("q", 0, 5 * S, 6 * S))

    def loader(run_ids: Any) -> pa.Table:
        loads.append(list(run_ids))
        return stored.filter(pa.compute.is_in(stored.column("run_id"), pa.array(list(run_ids))))

    windows = RunWindows(loader)
    windows.fold(_runs(("r", 0, 0, 1 * S)))  # what the micro-batch itself carried
    batch = pa.table({"run_id": ["r", "r", "q", "nope", None], "batch_id": pa.array([0, 1, 0, 0, 3], pa.int64())})
    out = windows.add_columns(batch)
    assert loads == [["nope", "q", "r"]]  # one read for every key the driver lacked
    joined = with_run_window(spark.createDataFrame(batch), spark.createDataFrame(stored))
    expected = {(r["run_id"], r["batch_id"]): (r["s"], r["e"]) for r in joined.select(
        "run_id", "batch_id", F.unix_micros(CTX_RUN_START_TS).alias("s"), F.unix_micros(CTX_BATCH_END_TS).alias("e"),
    ).collect()}
    got = out.select(["run_id", "batch_id"]).to_pylist()
    micros = [out.column(c).cast(pa.int64()).to_pylist() for c in (CTX_RUN_START_TS, CTX_BATCH_END_TS)]
    assert [expected[(g["run_id"], g["batch_id"])] for g in got] == list(zip(*micros, strict=True))
    assert list(zip(*micros, strict=True)) == [(0, S), (0, 2 * S), (5 * S, 6 * S), (None, None), (None, None)]
    windows.add_columns(batch.slice(0, 3))
    assert len(loads) == 1  # known keys: no read


def test_run_windows_stay_bounded() -> None:
    windows = RunWindows(lambda _ids: _runs(), max_batches=3)
    windows.fold(_runs(*(("r", b, 0, b * S) for b in range(10))))
    assert sorted(windows.ends) == [("r", 7), ("r", 8), ("r", 9)]


def test_topic_partitions_mark_unknown_topics(spark: Any) -> None:
    configs = pa.table({"run_id": ["r", "r"], "topic": ["t", "t"], "partitions": pa.array([4, 4], pa.int32())})
    topics = TopicPartitions(lambda _ids: configs)
    batch = pa.table({"run_id": ["r", "r", "r"], "topic": ["t", "other", None]})
    out = topics.add_columns(batch).to_pylist()
    assert [(r[CTX_TOPIC_PARTITIONS], r[CTX_TOPIC_KNOWN]) for r in out] == [(4, True), (None, False), (None, True)]
    expected = with_topic(spark.createDataFrame(batch), spark.createDataFrame(configs))
    assert sorted((r["topic"] or "", r[CTX_TOPIC_KNOWN]) for r in expected.collect()) == \
        sorted((r["topic"] or "", r[CTX_TOPIC_KNOWN]) for r in out)


def test_previous_count_comes_from_the_batch_then_from_the_driver_history() -> None:
    mbean = "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec"
    last = LastCounts(lookback_us=60 * S)
    last.fold(pd.DataFrame([("r", 1, mbean, 0, 9 * S, 50), ("r", 2, mbean, 0, 1 * S, 7)],
                           columns=["run_id", "broker_id", "mbean", "process_start_ts", "ts", "count"]))
    # Out of order on purpose: the predecessor is by ts, not by position.
    rows = pa.table({"run_id": ["r", "r", "r", "r"], "broker_id": pa.array([1, 1, 2, 3], pa.int32()),
                     "mbean": [mbean] * 4,
                     "process_start_ts": pa.array([0, 0, 0, 0], pa.int64()).cast(TS),
                     "ts": pa.array([12 * S, 10 * S, 70 * S, 10 * S], pa.int64()).cast(TS),
                     "count": pa.array([60, 55, 9, 1], pa.int64())})
    out = with_previous_count(rows, last, min_ts_us=10 * S)
    # broker 1: 55 follows the history's 50, 60 follows 55; broker 2's history (1 s) is within 60 s of the
    # batch; broker 3 has none.
    assert out.column(CTX_PREVIOUS_COUNT).to_pylist() == [55, 50, 7, None]


def test_a_row_without_ts_precedes_nothing_on_either_route(spark: Any) -> None:
    """The previous count by ts, with a bad row that has none (it is quarantined, but it must not become the
    predecessor of the meter's first row on one route and not on the other)."""
    mbean = "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec"
    last = LastCounts(lookback_us=60 * S)
    last.fold(pd.DataFrame([("r", 1, mbean, 0, 9 * S, 50)],
                           columns=["run_id", "broker_id", "mbean", "process_start_ts", "ts", "count"]))
    rows = pa.table({"row": [0, 1, 2], "run_id": ["r"] * 3, "broker_id": pa.array([1, 1, 1], pa.int32()),
                     "mbean": [mbean] * 3, "process_start_ts": pa.array([0, 0, 0], pa.int64()).cast(TS),
                     "ts": pa.array([12 * S, None, 10 * S], pa.int64()).cast(TS),
                     "count": pa.array([60, 999, 55], pa.int64())})
    on_driver = with_previous_count(rows, last, min_ts_us=10 * S).column(CTX_PREVIOUS_COUNT).to_pylist()
    batch = spark.createDataFrame(rows.to_pandas())
    in_spark = {r["row"]: r[CTX_PREVIOUS_COUNT] for r in spark_previous_count(
        batch, last.history(spark, 10 * S)).select("row", CTX_PREVIOUS_COUNT).collect()}
    assert on_driver == [55, 60, 50]  # 55 follows the history's 50, 60 follows 55, the row without ts comes last
    assert [in_spark[i] for i in range(3)] == on_driver


def _state(**over: Any) -> dict[str, Any]:
    row = {"run_id": "r", "batch_id": 1, "ts": T0, "topic": "t", "partition": 0, "leader": 1, "leader_epoch": 3,
           "partition_epoch": 5, "replicas": [1, 2, 3], "isr": [1, 2, 3], "elr": [],
           "leader_recovery_state": "RECOVERED", "high_watermark": 100, "log_start_offset": 10,
           "replica_leos": [120, 100, 90], "configured_min_isr": 2, "effective_min_isr": 2}
    row.update(over)
    return row


# Every replication invariant broken once, offline forms Kafka shows, and nulls anywhere (a null input leaves a
# flag null: its not-null expectation reports the row).
STATES = [
    _state(),                                                            # valid
    _state(isr=[1, 2, 3, 4, 5, 6], replicas=[3, 1], replica_leos=[100, 100]),  # ISR not within replicas
    _state(leader=99, isr=[99]),                                         # unknown leader outside the replicas
    _state(leader=-1, isr=[2], high_watermark=-1, log_start_offset=0),   # offline, last ISR member listed
    _state(leader=-1, isr=[], elr=[2, 3], high_watermark=-1, log_start_offset=0),  # offline with ELR
    _state(leader=-1, high_watermark=5),                                 # offline but a high watermark
    _state(leader=2, isr=[1, 3]),                                        # leader outside the ISR
    _state(isr=[1, 2], elr=[2]),                                         # ELR overlaps the ISR
    _state(isr=[1], elr=[7]),                                            # ELR outside the replicas
    _state(replicas=[1, 1, 3], isr=[1, 3], replica_leos=[120, 120, 90]),  # replicas repeated
    _state(replica_leos=[120, 100]),                                     # misaligned LEOs
    _state(high_watermark=121),                                          # HW above the leader's LEO
    _state(leader=3, high_watermark=90, replica_leos=[80, 85, 90]),      # followers may lag behind the HW
    _state(leader=3, high_watermark=95, replica_leos=[120, 100, 90]),    # only the leader's LEO bounds the HW
    _state(high_watermark=-1),                                           # online without a high watermark
    _state(log_start_offset=101),                                        # log start above the HW
    _state(isr=[1, None], elr=[None], replicas=[1, 2, None], replica_leos=[120, None, 1]),
    _state(leader=2, replica_leos=[120, None, 90]),                      # the leader's LEO is unknown
    _state(replicas=None, isr=None, elr=None, replica_leos=None, leader=None, high_watermark=None),
    _state(run_id="unknown-run"),
]


def test_replication_invariants_and_broker_registry_equal_the_spark_columns_row_for_row(spark: Any) -> None:
    from pipelines.context import with_broker_registry, with_replication_invariants
    from pipelines.driver_invariants import BrokerRegistry
    from pipelines.driver_invariants import with_replication_invariants as on_driver
    from schemas.bronze import PARTITION_STATE
    from schemas.table import CONTEXT_COLUMNS

    schema = PARTITION_STATE.landing_schema
    rows = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in STATES], schema=schema)
    runs = pa.table({"run_id": ["r", "r"], "broker_ids": pa.array([[1, 2, 3], [3]], pa.list_(pa.int32())),
                     "controller_ids": pa.array([[3000], []], pa.list_(pa.int32()))})
    assert PARTITION_STATE.broker_refs is not None
    registry = BrokerRegistry(lambda ids: runs.filter(pa.compute.is_in(runs.column("run_id"), pa.array(list(ids)))))
    driver = registry.add_columns(on_driver(rows), PARTITION_STATE.broker_refs)
    joined = with_broker_registry(with_replication_invariants(spark.createDataFrame(rows)), spark.createDataFrame(runs),
                                  PARTITION_STATE.broker_refs)
    names = [*CONTEXT_COLUMNS["replication"], CTX_BROKERS_KNOWN]
    by_spark = {(r["run_id"], r["high_watermark"], str(r["replicas"]), str(r["isr"]), str(r["elr"]), r["leader"],
                 str(r["replica_leos"]), r["log_start_offset"]): [r[n] for n in names] for r in joined.collect()}
    assert len(by_spark) == len(STATES)
    got = [[r[n] for n in names] for r in driver.to_pylist()]
    expected = [by_spark[(r["run_id"], r["high_watermark"], str(r["replicas"]), str(r["isr"]), str(r["elr"]),
                          r["leader"], str(r["replica_leos"]), r["log_start_offset"])] for r in driver.to_pylist()]
    assert got == expected
    fails = {i: [n for n, v in zip(names, flags, strict=True) if v is False] for i, flags in enumerate(got)}
    assert fails[0] == [] and fails[3] == [] and fails[4] == [] and fails[12] == []
    assert fails[1] == ["ctx_isr_subset_of_replicas", "ctx_brokers_known"]
    assert fails[2] == ["ctx_isr_subset_of_replicas", "ctx_brokers_known"]  # no LEO of a leader outside replicas
    assert fails[5] == ["ctx_high_watermark_within_leader_leo"]
    assert fails[6] == ["ctx_leader_in_isr_or_offline"]
    assert fails[7] == ["ctx_elr_disjoint_from_isr"]
    assert fails[8] == ["ctx_elr_subset_of_replicas", "ctx_brokers_known"]
    assert fails[9] == ["ctx_replicas_distinct"]
    assert fails[10] == ["ctx_replica_leos_aligned"]
    assert fails[11] == ["ctx_high_watermark_within_leader_leo"]
    assert fails[13] == ["ctx_high_watermark_within_leader_leo"]
    assert fails[14] == ["ctx_high_watermark_within_leader_leo", "ctx_log_start_offset_within_high_watermark"]
    assert fails[15] == ["ctx_log_start_offset_within_high_watermark"]
    assert got[17][names.index("ctx_high_watermark_within_leader_leo")] is None
    assert all(v is None for v in got[18][:-1]) and got[19][-1] is None  # null inputs; a run without registry


def test_a_snapshot_without_ts_precedes_nothing_on_either_route(spark: Any) -> None:
    """As for the previous count: the partition's snapshot without ts comes last on both routes, so the first
    snapshot of the batch is compared with nothing (no history), not with the bad row's epochs."""
    from pipelines.context import LastStates
    from pipelines.context import with_previous_state as in_spark
    from pipelines.driver_invariants import with_previous_state as on_driver
    from schemas.bronze import PARTITION_STATE

    schema = PARTITION_STATE.landing_schema
    states = [_state(ts=T0 + dt.timedelta(seconds=2)), _state(ts=None, leader_epoch=9, partition_epoch=11),
              _state(ts=T0)]
    rows = pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in states], schema=schema)
    last = LastStates(lookback_us=60 * S)
    driver = on_driver(rows, last, min_ts_us=int(T0.timestamp() * S)).column(CTX_PREVIOUS_LEADER_EPOCH).to_pylist()
    spark_rows = in_spark(spark.createDataFrame(rows), last.history(spark, int(T0.timestamp() * S))).collect()
    # Spark hands timestamps back naive, in UTC (the session's zone, and this machine's).
    by_ts = {r["ts"] and r["ts"].replace(tzinfo=dt.UTC): r[CTX_PREVIOUS_LEADER_EPOCH] for r in spark_rows}
    assert driver == [3, 3, None]  # T0+2 s follows T0's epoch 3; the row without ts follows T0+2 s; T0: nothing
    assert [by_ts[s["ts"]] for s in states] == driver
