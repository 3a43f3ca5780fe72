"""Idempotent driver-side writes (foundation/delta_io.py): a replayed version changes nothing, and an app's
versions are read from the table once per process."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import foundation.delta_io as delta_io
from collector import bronze_rows
from foundation.bronze_sink import DeltaSink
from foundation.delta_io import AppVersions, write_once
from schemas.bronze import RUNS
from schemas.gold import DELIVERIES


def _empty() -> pa.Table:
    return DELIVERIES.arrow_schema.empty_table()


def test_app_versions_skip_a_replayed_version_and_read_the_table_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lake = str(tmp_path / "lakehouse")
    assert write_once(DELIVERIES, lake, _empty(), "app", 0)
    reads: list[str] = []
    real = delta_io.committed_version

    def counting(td: Any, lakehouse: str, app_id: str) -> int:
        reads.append(app_id)
        return real(td, lakehouse, app_id)

    monkeypatch.setattr(delta_io, "committed_version", counting)
    versions = AppVersions("app")
    assert versions.committed(DELIVERIES, lake) == 0
    assert not versions.write_once(DELIVERIES, lake, _empty(), 0)  # a replay of version 0: nothing written
    assert versions.write_once(DELIVERIES, lake, _empty(), 1)
    assert versions.write_once(DELIVERIES, lake, _empty(), 2)
    assert versions.committed(DELIVERIES, lake) == 2
    assert reads == ["app"]  # looked up once; afterwards the driver knew
    table = DeltaTable(DELIVERIES.path(lake))
    assert table.version() == 2 and table.transaction_version("app") == 2
    # Another process (a restart) reads what was committed.
    assert AppVersions("app").committed(DELIVERIES, lake) == 2
    assert AppVersions("other").committed(DELIVERIES, lake) == -1


def test_ensure_table_adds_new_nullable_columns_to_a_table_written_before_them(tmp_path: Path) -> None:
    """gold.alerts gained `flapping`: a lakehouse written before keeps its rows, reads null there, and takes
    appends of the new schema."""
    import datetime as dt

    from deltalake import write_deltalake

    from schemas.gold import ALERTS

    lake = str(tmp_path / "lakehouse")
    old_schema = pa.schema([f for f in ALERTS.arrow_schema if f.name != "flapping"])
    filler = {pa.string(): "x", pa.float64(): 1.0, pa.bool_(): False, pa.int64(): 1}
    old_row: dict[str, Any] = {f.name: filler.get(f.type) for f in old_schema}
    old_row |= {"status": "firing", "rule": "R", "fingerprint": "f", "labels": [("alertname", "R")],
                **{f.name: dt.datetime(2026, 1, 1, tzinfo=dt.UTC) for f in old_schema if pa.types.is_timestamp(f.type)}}
    write_deltalake(ALERTS.path(lake), pa.Table.from_pylist([old_row], schema=old_schema))
    delta_io.ensure_table(ALERTS, lake)
    delta_io.ensure_table(ALERTS, lake)   # nothing more to add: no new version
    table = DeltaTable(ALERTS.path(lake))
    assert table.version() == 1
    rows = table.to_pyarrow_table().to_pylist()
    assert [(r["fingerprint"], r["status"], r["flapping"]) for r in rows] == [("f", "firing", None)]
    new_row = {**old_row, "fingerprint": "g", "flapping": True}
    delta_io.KeptOpen(ALERTS, lake).append(pa.Table.from_pylist([new_row], schema=ALERTS.arrow_schema))
    got = sorted((r["fingerprint"], r["flapping"])
                 for r in DeltaTable(ALERTS.path(lake)).to_pyarrow_table().to_pylist())
    assert got == [("f", None), ("g", True)]


def test_ensure_table_refuses_to_add_a_column_that_cannot_be_null(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    lake = str(tmp_path / "lakehouse")
    schema = pa.schema([f for f in DELIVERIES.arrow_schema if f.name != "outcome"])
    write_deltalake(DELIVERIES.path(lake), schema.empty_table())
    with pytest.raises(ValueError, match=r"gold.deliveries .* lacks column\(s\) \['outcome'\] that cannot be null"):
        delta_io.ensure_table(DELIVERIES, lake)


def test_a_table_kept_open_per_thread_takes_every_append_and_opens_once_per_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Threads appending through one KeptOpen: every row lands, each thread opens the table once and sees the others'
    commits; an append without its checksum gets it from the next append with one."""
    lake = str(tmp_path / "lakehouse")
    delta_io.ensure_table(DELIVERIES, lake)
    opened: list[int] = []
    real = delta_io.open_table

    def counting(td: Any, lakehouse: str) -> Any:
        opened.append(threading.get_ident())
        return real(td, lakehouse)

    monkeypatch.setattr(delta_io, "open_table", counting)
    kept = delta_io.KeptOpen(DELIVERIES, lake)

    def appends(n: int) -> None:
        for i in range(5):
            kept.append(pa.Table.from_pylist([_delivery(f"t{n}-{i}")], schema=DELIVERIES.arrow_schema))

    threads = [threading.Thread(target=appends, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(opened) == 3 and len(set(opened)) == 3
    ids = DeltaTable(DELIVERIES.path(lake)).to_pyarrow_table().column("delivery_id").to_pylist()
    assert sorted(ids) == sorted(f"t{n}-{i}" for n in range(3) for i in range(5))
    log = Path(DELIVERIES.path(lake)) / "_delta_log"
    bare = kept.append(pa.Table.from_pylist([_delivery("bare")], schema=DELIVERIES.arrow_schema), checksum=False)
    assert not (log / f"{bare:020d}.crc").exists()
    after = kept.append(pa.Table.from_pylist([_delivery("after")], schema=DELIVERIES.arrow_schema))
    assert after == bare + 1 and (log / f"{bare:020d}.crc").exists() and (log / f"{after:020d}.crc").exists()


@pytest.mark.parametrize("writer", ["kept_open", "app_versions"])
def test_a_write_that_fails_leaves_no_table_kept_and_the_next_opens_it_afresh(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str) -> None:
    """A copy kept across a failed write may be stuck (a conflict, a store listing a commit late): both keepers drop it,
    and the next write opens the table again rather than bringing that copy up to date."""
    lake = str(tmp_path / "lakehouse")
    delta_io.ensure_table(DELIVERIES, lake)
    opened: list[str] = []
    real_open, real_write = delta_io.open_table, delta_io.write_with_checksum

    def counting(td: Any, lakehouse: str) -> Any:
        opened.append(td.name)
        return real_open(td, lakehouse)

    fail = [False]

    def failing(*args: Any, **kwargs: Any) -> int:
        if fail[0]:
            raise OSError("store unavailable")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(delta_io, "open_table", counting)
    monkeypatch.setattr(delta_io, "write_with_checksum", failing)
    kept, versions = delta_io.KeptOpen(DELIVERIES, lake), AppVersions("app")

    def write(delivery: str, version: int) -> None:
        rows = pa.Table.from_pylist([_delivery(delivery)], schema=DELIVERIES.arrow_schema)
        if writer == "kept_open":
            kept.append(rows)
        else:
            versions.write_once(DELIVERIES, lake, rows, version)

    write("a", 0)
    write("b", 1)
    opens_while_kept = len(opened)
    fail[0] = True
    with pytest.raises(OSError, match="store unavailable"):
        write("c", 2)
    fail[0] = False
    write("d", 2)
    assert len(opened) == opens_while_kept + 1   # the failed write used the kept copy; the next opened afresh
    ids = DeltaTable(DELIVERIES.path(lake)).to_pyarrow_table().column("delivery_id").to_pylist()
    assert sorted(ids) == ["a", "b", "d"]


def test_overwrites_of_two_stages_rows_by_an_equality_predicate_commit_from_the_same_version(tmp_path: Path) -> None:
    """Why gold.alerts has a `stage` column: two writers (the alerts job and the alert lane; in two processes there is
    no lock between them) overwrite their own rows from the same table version. With `stage = '<name>'` both commit:
    Delta's conflict check rules the other's new files out by their statistics. With a `rule NOT IN (<the lane's
    rules>)` it cannot (a file of the lane's holds rules on both sides of the other's), and the second commit fails."""
    from deltalake import write_deltalake
    from deltalake.exceptions import CommitFailedError

    path = str(tmp_path / "alerts")

    def rows(stage: str, rules: list[str], value: float) -> pa.Table:
        return pa.table({"stage": [stage] * len(rules), "rule": rules, "value": [value] * len(rules)})

    lane_rules = ["OfflinePartitions", "UnderReplicated"]
    write_deltalake(path, rows("silver", ["SingleCopyAcks"], 0.0))
    write_deltalake(path, rows("lane", lane_rules, 0.0), mode="append")
    silver, lane = DeltaTable(path), DeltaTable(path)          # both read the same version
    write_deltalake(lane, rows("lane", lane_rules, 1.0), mode="overwrite", predicate="stage = 'lane'")
    write_deltalake(silver, rows("silver", ["SingleCopyAcks"], 1.0), mode="overwrite", predicate="stage = 'silver'")
    assert sorted((r["rule"], r["value"]) for r in DeltaTable(path).to_pyarrow_table().to_pylist()) == [
        ("OfflinePartitions", 1.0), ("SingleCopyAcks", 1.0), ("UnderReplicated", 1.0)]
    silver, lane = DeltaTable(path), DeltaTable(path)
    write_deltalake(lane, rows("lane", lane_rules, 2.0), mode="overwrite", predicate="stage = 'lane'")
    with pytest.raises(CommitFailedError):
        write_deltalake(silver, rows("silver", ["SingleCopyAcks"], 2.0), mode="overwrite",
                        predicate="rule NOT IN ('OfflinePartitions', 'UnderReplicated')")

def _delivery(delivery_id: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {"delivery_id": delivery_id, "event_id": "e", "receiver": "r", "rule": "R", "fingerprint": "f",
            "alert_status": "firing", "attempt": 1, "outcome": "sending", "http_status": None, "error": None,
            "attempted_at": now, "duration_ms": 0.0, "next_attempt_at": None}


def test_writers_in_one_process_overwriting_their_own_rows_of_a_table_never_conflict(tmp_path: Path) -> None:
    """Two app ids overwriting disjoint rows of one table from two threads, as the alerts job and the alert lane do
    gold.alerts in one `pipeline run`. By their files' min/max statistics each could hold rows of the other's
    predicate, so concurrent commits would conflict; they commit one at a time and every write lands."""
    lake = str(tmp_path / "lakehouse")
    delta_io.ensure_table(DELIVERIES, lake)
    own = {"silver": (["A", "C"], "rule NOT IN ('B1', 'B3')"), "lane": (["B1", "B3"], "rule IN ('B1', 'B3')")}
    failed: list[BaseException] = []

    def overwrites(app: str) -> None:
        versions = AppVersions(app)
        rules, predicate = own[app]
        try:
            for version in range(12):
                rows = [{**_delivery(f"{app}-{version}-{r}"), "rule": r} for r in rules]
                versions.write_once(DELIVERIES, lake, pa.Table.from_pylist(rows, schema=DELIVERIES.arrow_schema),
                                    version, mode="overwrite", predicate=predicate)
        except BaseException as e:
            failed.append(e)

    threads = [threading.Thread(target=overwrites, args=(app,)) for app in own]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    ids = DeltaTable(DELIVERIES.path(lake)).to_pyarrow_table().column("delivery_id").to_pylist()
    assert sorted(ids) == ["lane-11-B1", "lane-11-B3", "silver-11-A", "silver-11-C"]


def test_every_keeper_opens_a_table_again_once_it_has_taken_reopen_after_commits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A table kept open gets slower to write with each commit it has taken (deltalake 1.6): KeptOpen, AppVersions and
    the bronze sink open it afresh (from its newest checkpoint) once it has taken REOPEN_AFTER_COMMITS; every row
    lands once."""
    monkeypatch.setattr(delta_io, "REOPEN_AFTER_COMMITS", 5)
    opened: list[str] = []
    real = delta_io.open_table

    def counting(td: Any, lakehouse: str) -> Any:
        opened.append(td.name)
        return real(td, lakehouse)

    monkeypatch.setattr(delta_io, "open_table", counting)
    lake = str(tmp_path / "lakehouse")
    delta_io.ensure_table(DELIVERIES, lake)   # version 0
    opened.clear()
    kept, versions = delta_io.KeptOpen(DELIVERIES, lake), AppVersions("app")
    for i in range(12):   # opened for the 1st, 6th and 11th: at versions 0, 5 and 10
        kept.append(pa.Table.from_pylist([_delivery(f"k{i}")], schema=DELIVERIES.arrow_schema))
    assert opened == ["deliveries"] * 3
    opened.clear()
    for i in range(12):   # from version 12: opened for the 1st, 6th and 11th again, and once for the app's version
        assert versions.write_once(DELIVERIES, lake, pa.Table.from_pylist([_delivery(f"a{i}")],
                                                                          schema=DELIVERIES.arrow_schema), i)
    assert opened == ["deliveries"] * 4
    ids = DeltaTable(DELIVERIES.path(lake)).to_pyarrow_table().column("delivery_id").to_pylist()
    assert sorted(ids) == sorted([*(f"k{i}" for i in range(12)), *(f"a{i}" for i in range(12))])

    opened.clear()
    sink = DeltaSink(lake, "run", writer="test", maintain_every=1_000)
    for batch in range(12):   # looked for at the 1st (none: its write creates it), opened for the 2nd, 7th and 12th
        assert sink.write_batch(batch, {RUNS: _runs(batch)}) == ["runs"]
    assert opened == ["runs"] * 4
    assert sorted(DeltaTable(RUNS.path(lake)).to_pyarrow_table().column("batch_id").to_pylist()) == list(range(12))


def _runs(batch: int) -> pa.Table:
    return bronze_rows.table(RUNS, "run", batch, [bronze_rows.runs_row(
        scenario="kept", start_ms=0, end_ms=batch, interval_ms=1000, broker_ids=[1], controller_ids=[], final=False,
        summary="{}")])
