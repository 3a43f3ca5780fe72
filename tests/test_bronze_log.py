"""The alert lane's source (foundation/bronze_log.py), read directly: whole commits in order, each row once, a
replayed range read again identically, planning alone giving the same offsets, compaction's rewrites skipped, a gap
in the log refused."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

from foundation.bronze_log import BronzeLogReader, LogGapError, data_files, log_versions, spark_arrow_schema
from schemas.bronze import BROKER_METRICS, CLUSTER_EVENTS, PARTITION_STATE, RUNS
from tests.emulated import emulate_into
from tests.lakes import LOSE_TWO

TABLES = [PARTITION_STATE, BROKER_METRICS]
NONE_READ = {td.name: -1 for td in TABLES}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("bronze-log") / "lakehouse")
    # A commit per table every emulated second.
    emulate_into(path, {**LOSE_TWO, "duration": "6s", "flush_every_intervals": 1}, "lose-two-s3")
    return path


def _rows(batches: list[pa.RecordBatch], table: str) -> pa.Table:
    schema = spark_arrow_schema(TABLES)
    t = pa.Table.from_batches(batches, schema) if batches else schema.empty_table()
    mine = t.filter(pc.equal(t.column("_table"), table))
    return pa.Table.from_struct_array(mine.column(f"_{table}").combine_chunks()).append_column("_version",
                                                                                                mine.column("_version"))


def _read(reader: BronzeLogReader, start: dict[str, int]) -> tuple[list[pa.RecordBatch], dict[str, int]]:
    batches, end = reader.read(start)
    return list(batches), end


def _key(t: pa.Table) -> list[tuple[object, ...]]:
    return sorted(zip(*(t.column(c).to_pylist() for c in ("run_id", "ts", *t.column_names[3:5])), strict=True))


def test_a_read_from_the_start_holds_every_row_of_each_table_once_with_its_version(lake: str) -> None:
    batches, end = _read(BronzeLogReader(lake, TABLES, {}, 1000), NONE_READ)
    for td in TABLES:
        path = td.path(lake)
        stored = DeltaTable(path).to_pyarrow_table()
        got = _rows(batches, td.name)
        assert got.num_rows == stored.num_rows > 0
        assert _key(got.drop_columns("_version")) == _key(stored.select(got.drop_columns("_version").column_names))
        assert end[td.name] == log_versions(path)[-1]
        assert set(got.column("_version").to_pylist()) <= set(log_versions(path))
    assert pa.Table.from_batches(batches).schema == spark_arrow_schema(TABLES)  # what Spark demands, exactly


def test_a_capped_read_takes_whole_commits_and_successive_reads_cover_everything_once(lake: str) -> None:
    reader, planner = BronzeLogReader(lake, TABLES, {}, 1), BronzeLogReader(lake, TABLES, {}, 1, rows=False)
    start, seen, reads = dict(NONE_READ), {td.name: 0 for td in TABLES}, 0
    while True:
        batches, end = _read(reader, start)
        if end == start:
            break
        reads += 1
        for td in TABLES:
            versions = set(_rows(batches, td.name).column("_version").to_pylist())
            assert len(versions) <= 1  # at most one commit (one data file) per table and read
            seen[td.name] += _rows(batches, td.name).num_rows
        # The replay of that range reads the same rows.
        again = list(reader.readBetweenOffsets(start, end))
        assert [b.to_pylist() for b in again] == [b.to_pylist() for b in batches]
        # Planning only, the reader gives Spark the same offsets and no row; the batch reads the same rows itself.
        assert _read(planner, start) == ([], end)
        assert planner.rows_between(start, end).to_pylist() == pa.Table.from_batches(batches, reader.schema).to_pylist()
        start = end
    assert reads > 3
    assert seen == {td.name: DeltaTable(td.path(lake)).to_pyarrow_table().num_rows for td in TABLES}


def test_files_rewritten_by_compaction_are_not_read_again(lake: str, tmp_path: Path) -> None:
    import shutil

    copy = str(tmp_path / "lakehouse")
    shutil.copytree(lake, copy)
    path = PARTITION_STATE.path(copy)
    before = log_versions(path)[-1]
    DeltaTable(path).optimize.compact()
    assert log_versions(path)[-1] == before + 1
    batches, end = _read(BronzeLogReader(copy, [PARTITION_STATE], {}, 1000), {PARTITION_STATE.name: before})
    assert (batches, end) == ([], {PARTITION_STATE.name: before + 1})


def test_commits_gone_from_the_log_are_refused_naming_the_table_once_it_has_been_idle(
        lake: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    import foundation.bronze_log as bronze_log

    copy = str(tmp_path / "lakehouse")
    shutil.copytree(lake, copy)
    log = Path(PARTITION_STATE.path(copy)) / "_delta_log"
    os.remove(log / f"{1:020d}.json")
    os.remove(log / f"{2:020d}.json")
    reader = BronzeLogReader(copy, TABLES, {}, 1000)
    read_from = {**NONE_READ, PARTITION_STATE.name: 0}
    # The next commit is missing: at first, as on any idle poll, nothing new; the log is not listed yet.
    batches, end = _read(reader, read_from)
    assert end[PARTITION_STATE.name] == 0 and _rows(batches, PARTITION_STATE.name).num_rows == 0
    monkeypatch.setattr(bronze_log, "GAP_CHECK_S", 0.0)  # idle long enough: the log is listed
    with pytest.raises(LogGapError, match=r"bronze\.partition_state: versions 1\.\.2 are gone"):
        _read(reader, read_from)
    # A replay names its commits: one gone is refused at once.
    with pytest.raises(LogGapError, match=r"bronze\.partition_state: version 1 is gone"):
        replayed = BronzeLogReader(copy, TABLES, {}, 1000)
        list(replayed.readBetweenOffsets(read_from, {**read_from, PARTITION_STATE.name: 3}))


def test_the_first_read_starts_at_the_oldest_commit_left_by_log_retention(lake: str, tmp_path: Path) -> None:
    import shutil

    copy = str(tmp_path / "lakehouse")
    shutil.copytree(lake, copy)
    log = Path(PARTITION_STATE.path(copy)) / "_delta_log"
    DeltaTable(PARTITION_STATE.path(copy)).create_checkpoint()
    newest = log_versions(str(log.parent))[-1]
    for v in range(3):
        os.remove(log / f"{v:020d}.json")
    batches, end = _read(BronzeLogReader(copy, TABLES, {}, 1000), NONE_READ)
    assert end[PARTITION_STATE.name] == newest
    assert sorted(set(_rows(batches, PARTITION_STATE.name).column("_version").to_pylist())) == \
        [v for v in range(3, newest + 1) if data_files(str(log.parent), v)]


def test_reads_after_a_known_version_open_each_new_commit_and_never_list_the_log(
        lake: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An idle poll costs one failed open per table, not a listing of a log that grows with the table (listed only
    after `GAP_CHECK_S` idle, to look for a gap)."""
    import foundation.bronze_log as bronze_log

    listings: list[str] = []
    real = bronze_log.log_versions
    monkeypatch.setattr(bronze_log, "log_versions", lambda path, fs=None: listings.append(path) or real(path, fs))
    newest = {td.name: real(td.path(lake))[-1] for td in TABLES}
    reader = BronzeLogReader(lake, TABLES, {}, 1000)
    batches, end = _read(reader, {td.name: newest[td.name] - 2 for td in TABLES})
    assert end == newest
    assert {td.name: sorted(set(_rows(batches, td.name).column("_version").to_pylist())) for td in TABLES} == \
        {td.name: [newest[td.name] - 1, newest[td.name]] for td in TABLES}
    assert _read(reader, end) == ([], end)  # idle
    assert listings == []
    _read(reader, NONE_READ)  # before the first read the log is listed: version 0 may be gone
    assert len(listings) == len(TABLES)


def test_a_live_poll_finding_only_the_first_commits_waits_for_the_writers_other_tables(
        lake: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer commits a batch's `runs` row and its events before its other tables: a live poll that finds only
    those plans no batch until the others land or `FIRST_COMMITS_WAIT_S` has passed; under Trigger.AvailableNow
    nothing waits."""
    from types import SimpleNamespace

    import foundation.bronze_log as bronze_log

    clock = [100.0]
    monkeypatch.setattr(bronze_log, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    tables = [RUNS, CLUSTER_EVENTS, *TABLES]
    newest = {td.name: log_versions(td.path(lake))[-1] for td in tables}
    runs_only_new = {**newest, RUNS.name: newest[RUNS.name] - 1}
    reader = BronzeLogReader(lake, tables, {}, 1000, rows=False)
    events_too = {**runs_only_new, CLUSTER_EVENTS.name: newest[CLUSTER_EVENTS.name] - 1}
    assert _read(reader, events_too) == ([], events_too)  # held: the events alone wait for the states too
    assert _read(reader, runs_only_new) == ([], runs_only_new)  # held
    clock[0] += bronze_log.FIRST_COMMITS_WAIT_S * 0.9
    assert _read(reader, runs_only_new) == ([], runs_only_new)  # still held
    # The writer's other tables land: one batch covers them and the reference commit.
    with_others = {**runs_only_new, PARTITION_STATE.name: newest[PARTITION_STATE.name] - 1}
    assert _read(reader, with_others) == ([], newest)
    # Nothing follows the reference commit: planned once it has waited `FIRST_COMMITS_WAIT_S`.
    assert _read(reader, runs_only_new) == ([], runs_only_new)
    clock[0] += bronze_log.FIRST_COMMITS_WAIT_S
    assert _read(reader, runs_only_new) == ([], newest)
    # Under Trigger.AvailableNow, up to the versions that existed at its start, at once.
    reader.prepareForTriggerAvailableNow()
    assert _read(reader, runs_only_new) == ([], newest)


def test_offsets_only_the_source_declares_one_column_and_with_rows_the_tables_union() -> None:
    """With `rows=false` no row ever comes, and each micro-batch code-generates a projection of the declared schema:
    one string column rather than the union's nested structs (a quarter of the lane's query thread, by JFR)."""
    from foundation.bronze_log import BronzeLogSource

    tables = "partition_state,broker_metrics"
    plans_only = BronzeLogSource({"tables": tables, "rows": "false"}).schema()
    assert [(f.name, f.dataType.simpleString()) for f in plans_only.fields] == [("_table", "string")]
    full = BronzeLogSource({"tables": tables}).schema()
    assert [f.name for f in full.fields] == ["_table", "_version", "_partition_state", "_broker_metrics"]
