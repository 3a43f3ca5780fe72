"""The one check of a row (pipelines/expectations.py, pipelines/reference_context.py, pipelines/context.py,
pipelines/replication_invariants.py): its flags, reasons and context, written out; the same counts as Great
Expectations' own engine; and the same rows, flags and reasons whether the driver or the executors check them."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from jobs.validate_routes import TableContext, check_partition
from pipelines.context import LastCounts, LastStates, with_previous_count
from pipelines.expectations import FAILURES, VALID, evaluate, failures, spark_text
from pipelines.great_expectations_check import SuiteValidator, arrow_to_ge_frame
from pipelines.reference_context import BrokerRegistry, RunWindows, TopicPartitions
from pipelines.replication_invariants import with_previous_state
from schemas.bronze import BROKER_METRICS, CLUSTER_EVENTS, PARTITION_STATE
from schemas.expectations import (
    CTX_BATCH_END_TS,
    CTX_BROKERS_KNOWN,
    CTX_PREVIOUS_COUNT,
    CTX_PREVIOUS_LEADER_EPOCH,
    CTX_RUN_START_TS,
    CTX_TOPIC_KNOWN,
    CTX_TOPIC_PARTITIONS,
)
from schemas.silver import QUARANTINE_TABLES
from schemas.table import CONTEXT_COLUMNS

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


def test_each_rows_flags_and_reasons_are_the_ones_an_operator_reads() -> None:
    rows = _metrics_with_context(BAD_METRICS)
    expectations = BROKER_METRICS.expectations
    verdict = evaluate(rows, expectations)
    assert verdict.valid.tolist() == [True, False, False, True, False, False, False, True, False, False, False]
    which = pd.Index(range(len(BAD_METRICS)))[~verdict.valid].to_numpy()
    reasons = dict(zip(which.tolist(), failures(rows, expectations, verdict, which), strict=True))
    assert reasons[1] == [{"expectation": "not_null(mbean)", "column": "mbean", "value": None}]
    assert reasons[2] == [{"expectation": "between(0<=value)", "column": "value", "value": "-5.0"}]
    assert reasons[4] == [{"expectation": "in_set(name)", "column": "name", "value": "NotAKafkaMetric"}]
    assert [f["expectation"] for f in reasons[5]] == ["not_null(kind)"]  # null: not also "not in the set"
    assert reasons[6] == [{"expectation": "pair(count>=ctx_previous_count)", "column": "count,ctx_previous_count",
                           "value": "count=93, ctx_previous_count=100"}]
    assert reasons[8] == [{"expectation": "pair(ctx_batch_end_ts>=ts)", "column": "ctx_batch_end_ts,ts",
                           "value": "ctx_batch_end_ts=2026-11-23 12:00:01, ts=2027-11-23 12:00:00.00012"}]
    assert reasons[9] == [{"expectation": "pair(ts>=ctx_run_start_ts)", "column": "ts,ctx_run_start_ts",
                           "value": "ts=2026-11-22 12:00:00, ctx_run_start_ts=2026-11-23 11:59:50"},
                          {"expectation": "pair(ts>=process_start_ts)", "column": "ts,process_start_ts",
                           "value": "ts=2026-11-22 12:00:00, process_start_ts=2026-11-23 12:00:00"}]
    assert reasons[10] == [{"expectation": "broker_ids_known", "column": CTX_BROKERS_KNOWN, "value": "false"}]
    assert verdict.counts(expectations) == dict(Counter(f["expectation"] for r in reasons.values() for f in r))


@pytest.fixture(scope="module")
def great_expectations() -> SuiteValidator:
    return SuiteValidator(engines=("pandas",))


def test_great_expectations_counts_what_the_check_counts_on_every_kind_of_bad_row(
        great_expectations: SuiteValidator) -> None:
    """Great Expectations itself, given the same rows with their context, counts the same failures per
    expectation: the check implements the suite GE records, nulls and pairs included."""
    metrics = _metrics_with_context(BAD_METRICS)
    outcome = great_expectations.validate_frame(BROKER_METRICS, arrow_to_ge_frame(metrics))
    assert outcome.unexpected == evaluate(metrics, BROKER_METRICS.expectations).counts(BROKER_METRICS.expectations)
    assert len(outcome.unexpected) == 9 and not outcome.success
    states = _states_with_context(STATES)
    outcome = great_expectations.validate_frame(PARTITION_STATE, arrow_to_ge_frame(states))
    counts = evaluate(states, PARTITION_STATE.expectations).counts(PARTITION_STATE.expectations)
    assert outcome.unexpected == counts
    assert counts["isr_subset_of_replicas"] == 2 and counts["high_watermark_within_leader_leo"] == 4


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


def test_run_windows_load_only_on_a_miss_and_leave_unknown_runs_null() -> None:
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
    micros = [out.column(c).cast(pa.int64()).to_pylist() for c in (CTX_RUN_START_TS, CTX_BATCH_END_TS)]
    assert list(zip(*micros, strict=True)) == [(0, S), (0, 2 * S), (5 * S, 6 * S), (None, None), (None, None)]
    windows.add_columns(batch.slice(0, 3))
    assert len(loads) == 1  # known keys: no read


def test_run_windows_stay_bounded() -> None:
    windows = RunWindows(lambda _ids: _runs(), max_batches=3)
    windows.fold(_runs(*(("r", b, 0, b * S) for b in range(10))))
    assert sorted(windows.ends) == [("r", 7), ("r", 8), ("r", 9)]


def test_topic_partitions_mark_unknown_topics() -> None:
    configs = pa.table({"run_id": ["r", "r"], "topic": ["t", "t"], "partitions": pa.array([4, 4], pa.int32())})
    topics = TopicPartitions(lambda _ids: configs)
    batch = pa.table({"run_id": ["r", "r", "r"], "topic": ["t", "other", None]})
    out = topics.add_columns(batch).to_pylist()
    assert [(r[CTX_TOPIC_PARTITIONS], r[CTX_TOPIC_KNOWN]) for r in out] == [(4, True), (None, False), (None, True)]


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
    out = with_previous_count(rows, last.before(10 * S), {})
    # broker 1: 55 follows the history's 50, 60 follows 55; broker 2's history (1 s) is within 60 s of the
    # batch; broker 3 has none.
    assert out.column(CTX_PREVIOUS_COUNT).to_pylist() == [55, 50, 7, None]


def test_a_row_without_ts_precedes_nothing() -> None:
    """The previous count by ts, with a bad row that has none: it is quarantined, and must not become the
    predecessor of the meter's first row."""
    mbean = "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec"
    last = LastCounts(lookback_us=60 * S)
    last.fold(pd.DataFrame([("r", 1, mbean, 0, 9 * S, 50)],
                           columns=["run_id", "broker_id", "mbean", "process_start_ts", "ts", "count"]))
    rows = pa.table({"row": [0, 1, 2], "run_id": ["r"] * 3, "broker_id": pa.array([1, 1, 1], pa.int32()),
                     "mbean": [mbean] * 3, "process_start_ts": pa.array([0, 0, 0], pa.int64()).cast(TS),
                     "ts": pa.array([12 * S, None, 10 * S], pa.int64()).cast(TS),
                     "count": pa.array([60, 999, 55], pa.int64())})
    previous = with_previous_count(rows, last.before(10 * S), {}).column(CTX_PREVIOUS_COUNT).to_pylist()
    assert previous == [55, 60, 50]  # 55 follows the history's 50, 60 follows 55, the row without ts comes last


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


def _state_rows(states: list[dict[str, Any]]) -> pa.Table:
    schema = PARTITION_STATE.landing_schema
    return pa.Table.from_pylist([{c: r.get(c) for c in schema.names} for r in states], schema=schema)


def _states_context(history: dict[tuple[Any, ...], tuple[Any, ...]] | None = None) -> TableContext:
    """partition_state's context with run "r" registered (brokers 1-3, controller 3000), started at T0 - 10 s."""
    runs = pa.table({"run_id": ["r", "r"], "batch_id": pa.array([1, 2], pa.int64()),
                     "start_ts": pa.array([T0 - dt.timedelta(seconds=10)] * 2, TS),
                     "end_ts": pa.array([T0 + dt.timedelta(seconds=1), T0 + dt.timedelta(hours=1)], TS),
                     "broker_ids": pa.array([[1, 2, 3], [3]], pa.list_(pa.int32())),
                     "controller_ids": pa.array([[3000], []], pa.list_(pa.int32()))})
    topics = pa.table({"run_id": ["r"], "topic": ["t"], "partitions": pa.array([4], pa.int32())})

    def of_runs(table: pa.Table) -> Any:
        return lambda ids: table.filter(pa.compute.is_in(table.column("run_id"), pa.array(list(ids))))
    return TableContext(PARTITION_STATE, RunWindows(of_runs(runs)), TopicPartitions(of_runs(topics)),
                        BrokerRegistry(of_runs(runs)), {}, history or {})


def _states_with_context(states: list[dict[str, Any]]) -> pa.Table:
    return _states_context().add(_state_rows(states), {})


def test_replication_invariants_and_broker_registry_row_by_row() -> None:
    assert PARTITION_STATE.broker_refs is not None
    driver = _states_with_context(STATES)
    names = [*CONTEXT_COLUMNS["replication"], CTX_BROKERS_KNOWN]
    got = [[r[n] for n in names] for r in driver.to_pylist()]
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
    assert fails[16] == ["ctx_elr_disjoint_from_isr", "ctx_brokers_known"]  # a null element is a value of its own
    assert got[17][names.index("ctx_high_watermark_within_leader_leo")] is None
    assert all(v is None for v in got[18][:-1]) and got[19][-1] is None  # null inputs; a run without registry


def test_a_snapshot_without_ts_precedes_nothing() -> None:
    """As for the previous count: the partition's snapshot without ts comes last, so the first snapshot of the batch
    is compared with nothing (no history), not with the bad row's epochs."""
    states = [_state(ts=T0 + dt.timedelta(seconds=2)), _state(ts=None, leader_epoch=9, partition_epoch=11),
              _state(ts=T0)]
    previous = with_previous_state(_state_rows(states), LastStates(60 * S).before(int(T0.timestamp() * S)), {})
    # T0+2 s follows T0's epoch 3; the row without ts follows T0+2 s; T0: nothing.
    assert previous.column(CTX_PREVIOUS_LEADER_EPOCH).to_pylist() == [3, 3, None]


def test_the_executors_check_each_row_as_the_driver_does(spark: Any) -> None:
    """Five snapshots of each of 20 partitions out of time order, with every bad form of STATES, checked on the
    executors (hashed by partition, two rows an Arrow batch, so a partition's predecessor is carried between batches)
    and on the driver: the same context, verdict and reasons row for row."""
    from jobs.validate_routes import ExecutorRoute

    states = [dict(s, partition=p, ts=T0 + dt.timedelta(seconds=(7 * k + 3 * p) % 5 + 1, milliseconds=i),
                   leader_epoch=3 + k % 3,
                   row=len(STATES) * (5 * p + k) + i)
              for p in range(20) for k in range(5) for i, s in enumerate(STATES)
              if i == (p + k) % len(STATES) or i == 0]
    rows = _state_rows(states).append_column("row", pa.array([s["row"] for s in states], pa.int64()))
    history = {("r", "t", p): (1, 2, 5, 100, 10) for p in range(0, 20, 2)}  # half the partitions known before
    on_driver = _states_context(history).add(rows, {})
    verdict = evaluate(on_driver, PARTITION_STATE.expectations)
    which = pd.Index(range(rows.num_rows))[~verdict.valid].to_numpy()
    reasons = dict(zip(which.tolist(), failures(on_driver, PARTITION_STATE.expectations, verdict, which),
                       strict=True))
    expected = {r["row"]: (r, bool(verdict.valid[i]), reasons.get(i)) for i, r in enumerate(on_driver.to_pylist())}

    route = ExecutorRoute(spark, PARTITION_STATE, "/nowhere", None, None)  # type: ignore[arg-type]
    context = _states_context(history).known_only(["r", "unknown-run"])
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        checked = route._checked(spark.createDataFrame(rows), context).toArrow().to_pylist()
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert len(checked) == rows.num_rows == len(expected)
    columns = [c for c in on_driver.column_names if c.startswith("ctx_")]
    assert len(columns) == 17
    for r in checked:
        driver_row, valid, failed = expected[r["row"]]
        assert [r[c] for c in columns] == [driver_row[c] for c in columns], r["row"]
        assert (r[VALID], r[FAILURES]) == (valid, failed), r["row"]
    assert sum(not r[VALID] for r in checked) == len(which) > 20


def test_check_partition_yields_nothing_for_no_rows() -> None:
    failures_type = QUARANTINE_TABLES[PARTITION_STATE.name].arrow_schema.field(FAILURES).type
    assert list(check_partition(_states_context(), failures_type, iter([]))) == []
