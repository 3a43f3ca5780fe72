"""The write-ahead journal (foundation/journal.py): rows back as written, across a crash too."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from foundation.journal import Journal

SCHEMA = pa.schema([("id", pa.string(), False), ("n", pa.int32(), False),
                    ("at", pa.timestamp("us", tz="UTC"), False), ("note", pa.string(), True)])
T0 = dt.datetime(2026, 11, 27, 12, 0, 0, 123456, tzinfo=dt.UTC)


def rows(*ids: str) -> pa.Table:
    return pa.Table.from_pylist([{"id": i, "n": k, "at": T0 + dt.timedelta(microseconds=k), "note": None if k else "x"}
                                 for k, i in enumerate(ids)], schema=SCHEMA)


def test_rows_come_back_as_written_segment_by_segment_until_dropped(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j", SCHEMA)
    j.append(rows("a", "b"))
    j.append(rows("c"))
    first = j.seal()
    assert [s.path.name for s in first] == ["000000000000.jsonl"]
    assert first[0].rows.equals(pa.concat_tables([rows("a", "b"), rows("c")]))  # timestamps to the microsecond
    j.append(rows("d"))                     # a new segment: the sealed one is not written again
    second = j.seal()
    assert [(s.path.name, s.rows.column("id").to_pylist()) for s in second] == [
        ("000000000000.jsonl", ["a", "b", "c"]), ("000000000001.jsonl", ["d"])]
    j.drop(second[:1])
    assert [s.rows.column("id").to_pylist() for s in j.seal()] == [["d"]]
    assert j.seal()[0].path.name == "000000000001.jsonl"  # sealing with nothing appended opens nothing
    j.drop(j.seal())
    assert j.seal() == [] and list((tmp_path / "j").iterdir()) == []
    j.close()


def test_after_a_crash_the_rows_left_are_read_and_a_torn_last_line_is_skipped(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j", SCHEMA)
    j.append(rows("a", "b"))
    # The process dies inside its next append: half a line written, the append never returned.
    with (tmp_path / "j" / "000000000000.jsonl").open("ab") as f:
        f.write(b'{"id":"c","n":0,"at":17')
    again = Journal(tmp_path / "j", SCHEMA)  # the next process
    left = again.seal()
    assert [s.rows.column("id").to_pylist() for s in left] == [["a", "b"]]
    again.append(rows("e"))                 # into a segment of its own, after the ones left
    assert [s.path.name for s in again.seal()] == ["000000000000.jsonl", "000000000001.jsonl"]


def test_a_seal_lists_the_directory_only_when_a_segment_may_be_there(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The flusher seals every half second, mostly with nothing appended: once everything is dropped, a seal lists
    nothing until the next append. A new journal lists once (a crash may have left segments)."""
    j = Journal(tmp_path / "j", SCHEMA)
    j.append(rows("a"))
    j.close()
    listed: list[int] = []
    real = Journal._segments

    def counting(self: Journal) -> list[Path]:
        listed.append(1)
        return real(self)

    monkeypatch.setattr(Journal, "_segments", counting)
    again = Journal(tmp_path / "j", SCHEMA)       # lists once for the next segment number
    left = again.seal()                           # lists: the crashed process's segment
    assert [s.rows.column("id").to_pylist() for s in left] == [["a"]] and len(listed) == 2
    again.drop(left)                              # lists once to see nothing is left
    assert len(listed) == 3
    assert again.seal() == [] and again.seal() == [] and len(listed) == 3
    again.append(rows("b"))
    assert [s.rows.column("id").to_pylist() for s in again.seal()] == [["b"]] and len(listed) == 4
    again.close()
