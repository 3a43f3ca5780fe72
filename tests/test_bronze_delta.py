"""The emulator's bronze Delta tables: idempotent appends, and delta-spark reads every one of them."""

from __future__ import annotations

import os

import pytest
from deltalake import DeltaTable

from broker_emulator.scenario import parse_scenario
from broker_emulator.simulation import Simulation
from foundation.bronze_sink import DeltaSink
from schemas.bronze import BRONZE_TABLES, PARTITION_STATE, RUNS
from schemas.spark import to_spark_schema
from tests.emulated import emulate_into

SCENARIO = {
    "name": "bronze-test", "seed": 3, "duration": "20s", "flush_every_intervals": 5,
    "cluster": {"brokers": 3, "racks": ["a", "b", "c"]},
    "topics": [{"name": "t", "partitions": 4, "replication.factor": 3, "config": {"min.insync.replicas": 2}}],
    "workload": {"producers": [{"topic": "t", "acks": "all", "rate": 200}],
                 "consumers": [{"group": "g", "topic": "t"}]},
    "faults": [{"at": "5s", "kind": "crash", "broker": 2, "duration": "8s"}],
}


RUN_ID = "bronze-test-s3"


def _counts(lakehouse: str) -> dict[str, int]:
    return {td.name: DeltaTable(td.path(lakehouse)).to_pyarrow_table().num_rows for td in BRONZE_TABLES}


def test_rerunning_a_run_appends_nothing(lakehouse: str) -> None:
    emulate_into(lakehouse, SCENARIO, RUN_ID)
    first = _counts(lakehouse)
    assert first["partition_state"] == 4 * 20
    assert first["runs"] == 5  # flushes at 5, 10, 15, 20 s and the final batch (final=true)
    emulate_into(lakehouse, SCENARIO, RUN_ID)  # the same run again: every batch is already committed
    assert _counts(lakehouse) == first
    versions = {td.name: DeltaTable(td.path(lakehouse)).version() for td in BRONZE_TABLES}
    emulate_into(lakehouse, SCENARIO, RUN_ID)
    assert {td.name: DeltaTable(td.path(lakehouse)).version() for td in BRONZE_TABLES} == versions


def test_a_batch_with_the_wrong_schema_is_refused(lakehouse: str) -> None:
    import pyarrow as pa

    bad = pa.table({"run_id": ["x"]})
    with pytest.raises(ValueError, match=r"bronze\.partition_state"):
        DeltaSink(lakehouse, "x").write_batch(0, {PARTITION_STATE: bad})


@pytest.mark.spark
def test_delta_spark_reads_every_bronze_table(spark, lakehouse: str) -> None:  # type: ignore[no-untyped-def]
    emulate_into(lakehouse, SCENARIO, RUN_ID)
    for td in BRONZE_TABLES:
        df = spark.read.format("delta").load(td.path(lakehouse))
        expected = to_spark_schema(td.arrow_schema)
        assert [(f.name, f.dataType) for f in df.schema] == [(f.name, f.dataType) for f in expected], td.name
        assert df.count() == DeltaTable(td.path(lakehouse)).to_pyarrow_table().num_rows > 0, td.name
    states = spark.read.format("delta").load(PARTITION_STATE.path(lakehouse))
    row = states.orderBy("ts", "partition").first()
    assert row.ts.year == 2026 and len(row.replicas) == 3 and len(row.replica_leos) == 3


def test_periodic_maintenance_compacts_and_checkpoints(lakehouse: str) -> None:
    sc = parse_scenario({**SCENARIO, "flush_every_intervals": 1}, "<test>")
    sink = DeltaSink(lakehouse, "bronze-test-s3", maintain_every=10)
    Simulation(sc, sink).run()
    dt = DeltaTable(PARTITION_STATE.path(lakehouse))
    assert dt.to_pyarrow_table().num_rows == 4 * 20  # compaction changes files, never rows
    assert len(dt.file_uris()) < 21  # 21 appends, compacted twice
    import os

    log = os.path.join(PARTITION_STATE.path(lakehouse), "_delta_log")
    assert any(name.endswith(".checkpoint.parquet") for name in os.listdir(log))


def test_an_existing_table_with_other_columns_is_refused_and_kept(lakehouse: str) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    from foundation.bronze_sink import SinkSchemaError
    from schemas.bronze import BROKER_METRICS

    old = pa.table({"run_id": ["old"], "batch_id": [0]})
    write_deltalake(BROKER_METRICS.path(lakehouse), old)
    with pytest.raises(SinkSchemaError, match=r"bronze\.broker_metrics at .* has columns \['run_id', 'batch_id'\]"):
        emulate_into(lakehouse, SCENARIO, RUN_ID)
    assert DeltaTable(BROKER_METRICS.path(lakehouse)).to_pyarrow_table().to_pylist() == [{"run_id": "old",
                                                                                          "batch_id": 0}]
    assert not os.path.exists(RUNS.path(lakehouse))  # checked before anything of the batch was written


def test_a_batch_commits_its_run_topics_and_events_before_its_other_tables(lakehouse: str,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that sees a batch's rows in any other table finds its run, topics and events already committed
    (schemas.bronze.COMMITTED_FIRST): the lane evaluates a controlled shutdown before the ISR shrink it causes."""
    import threading
    from collections import defaultdict

    from schemas.bronze import CLUSTER_EVENTS, COMMITTED_FIRST

    steps: dict[int, list[tuple[str, str]]] = defaultdict(list)   # per batch: (begin/end, table), in time order
    lock = threading.Lock()
    append = DeltaSink._append

    def recorded(self: DeltaSink, td, table, batch_id) -> None:  # type: ignore[no-untyped-def]
        with lock:
            steps[batch_id].append(("begin", td.name))
        append(self, td, table, batch_id)
        with lock:
            steps[batch_id].append(("end", td.name))

    monkeypatch.setattr(DeltaSink, "_append", recorded)
    sc = parse_scenario({**SCENARIO, "flush_every_intervals": 1, "duration": "8s"}, "<test>")
    Simulation(sc, DeltaSink(lakehouse, RUN_ID)).run()
    assert COMMITTED_FIRST[-1] == CLUSTER_EVENTS.name
    with_events = 0
    for batch in steps.values():
        firsts = [k for k, (_, n) in enumerate(batch) if n in COMMITTED_FIRST]
        others = [k for k, (_, n) in enumerate(batch) if n not in COMMITTED_FIRST]
        assert not firsts or not others or max(firsts) < min(others), batch
        with_events += any(n == CLUSTER_EVENTS.name for _, n in batch) and bool(others)
    assert len(steps) >= 8 and with_events > 0, "the crash's events were written with other tables' rows"
