"""Bronze tables' new rows, read straight from their Delta commit logs: the alert lane's streaming source.

Spark's Delta source costs a live micro-batch ~0.6 s before any row reaches the driver on two cores (it lists the
log, builds a snapshot, plans a file scan and runs it as tasks); reading each new commit's JSON and its added
Parquet files with pyarrow costs milliseconds. `BronzeLogSource` is that read as a Spark Python streaming source
(a `SimpleDataSourceStreamReader`, which reads on the driver): its offset is each table's last version read, so the
query's checkpoint holds exactly which commits a micro-batch covered, and a batch replayed after a crash
(`readBetweenOffsets`) reads the same commits again. The alert lane runs it with `rows=false`: the source only plans
(the offsets go to the query's offset log) and the lane's batch reads its rows on the driver (`rows_between`,
jobs/lane_log.py), without handing them through Spark.

Rows come in the shape of validate's union (jobs/validate_source.py): `_table`, `_version` and one struct column
per table holding its row, null on the other tables' rows. Files a commit adds without changing data (compaction:
`dataChange: false`) are skipped, as Spark's Delta source skips them. The log and the files are read through
pyarrow's file systems: the local disk, or an S3-compatible store (foundation/object_store.py: its endpoint passed as
the source's `store` option, its credentials from the environment). Under `Trigger.AvailableNow` the source stops at
the versions that existed when the query started.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import posixpath
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StringType, StructField, StructType

from foundation.object_store import ObjectStore, lake_filesystem
from schemas.bronze import BRONZE_BY_NAME, COMMITTED_FIRST
from schemas.table import TableDef

NAME = "isrwatch_bronze_log"
# How long a table stays without a new commit before its log is listed to look for a gap, and then how often.
GAP_CHECK_S = 10.0
# How long a live poll that finds new commits only of the tables a writer commits first waits for its other tables.
FIRST_COMMITS_WAIT_S = 0.5


Commits = list[tuple[int, list[str]]]  # (version, its data files), oldest first


class LogGapError(Exception):
    """Commits the source has not read are gone from `_delta_log` (log retention removed them)."""


def union_schema(tables: list[TableDef]) -> pa.Schema:
    fields = [pa.field("_table", pa.string()), pa.field("_version", pa.int64())]
    return pa.schema(fields + [pa.field(f"_{td.name}", pa.struct(list(td.landing_schema))) for td in tables])


def spark_arrow_schema(tables: list[TableDef]) -> pa.Schema:
    """`union_schema` as Spark sees it, which is the schema a reader's record batches must have exactly."""
    return to_arrow_schema(from_arrow_schema(union_schema(tables)), timezone="UTC")


def log_versions(table_path: str, fs: pafs.FileSystem | None = None) -> list[int]:
    """The versions whose commit JSON is in the table's log, oldest first (none when the table does not exist).
    `table_path` is a path on `fs` (default: the local disk)."""
    fs = fs or pafs.LocalFileSystem()
    infos = fs.get_file_info(pafs.FileSelector(posixpath.join(table_path, "_delta_log"), allow_not_found=True))
    return sorted(int(n[:-5]) for i in infos if (n := i.base_name).endswith(".json") and n[:-5].isdigit())


def data_adds(table_path: str, version: int, fs: pafs.FileSystem | None = None) -> list[dict[str, Any]]:
    """The `add` actions of commit `version` that carry new data (not compaction's), in the commit's order."""
    fs = fs or pafs.LocalFileSystem()
    with fs.open_input_stream(commit_path(table_path, version)) as commit:
        lines = commit.read().decode().splitlines()
    return [a for line in lines if line and (a := json.loads(line).get("add")) and a.get("dataChange", True)]


def commit_path(table_path: str, version: int) -> str:
    return posixpath.join(table_path, "_delta_log", f"{version:020d}.json")


def added_paths(table_path: str, adds: list[dict[str, Any]]) -> list[str]:
    """The paths of the files `adds` added (their `path` is relative to the table and URL-encoded)."""
    return [posixpath.join(table_path, unquote(a["path"])) for a in adds]


def read_file(path: str, fs: pafs.FileSystem) -> pa.Table:
    """One small Parquet file, whole. `pq.read_table` builds a dataset for each call and hands the decoding to
    Arrow's thread pool: 1.5-1.7 ms a bronze file of a live commit here, against 0.65-0.7 ms for this."""
    with fs.open_input_file(path) as f:
        return pq.ParquetFile(f).read(use_threads=False)


def data_files(table_path: str, version: int, fs: pafs.FileSystem | None = None) -> list[str]:
    """The Parquet files commit `version` added with new data, in the commit's order."""
    return added_paths(table_path, data_adds(table_path, version, fs))


class BronzeLogReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: {table: last version read, -1 before the first}. A read takes whole commits, oldest first, until
    `max_files` data files are in (at least one commit per table that has one). With `rows` false the reader only
    plans: Spark gets the offsets and no row, and the query's batch reads its rows itself (`rows_between`).
    `store`: where an object-store lakehouse answers (None: the environment's)."""

    def __init__(self, lakehouse: str, tables: list[TableDef], start: dict[str, int], max_files: int,
                 rows: bool = True, store: ObjectStore | None = None) -> None:
        self.lakehouse, self.tables, self.start, self.max_files = lakehouse, tables, start, max_files
        self.rows, self.store = rows, store
        self.schema = spark_arrow_schema(tables)
        self.target: dict[str, int] | None = None  # the last versions to read under Trigger.AvailableNow
        self._fs: tuple[pafs.FileSystem, str] | None = None
        self._idle_since: dict[str, float] = {}  # per table: since when no new commit was found (monotonic)
        self._first_commits_since: float | None = None  # since when only reference tables have new commits

    def _lake(self) -> tuple[pafs.FileSystem, str]:
        """The lakehouse's file system and root on it, made on first use (the reader is pickled to Spark's worker)."""
        if self._fs is None:
            self._fs = lake_filesystem(self.lakehouse, self.store)
        return self._fs

    def _table_path(self, td: TableDef) -> str:
        return td.path(self._lake()[1])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fs": None, "_idle_since": {}, "_first_commits_since": None}

    def prepareForTriggerAvailableNow(self) -> None:
        fs = self._lake()[0]
        self.target = {td.name: (log_versions(self._table_path(td), fs) or [-1])[-1] for td in self.tables}

    def initialOffset(self) -> dict[str, int]:
        return {td.name: int(self.start.get(td.name, -1)) for td in self.tables}

    def read(self, start: dict[str, int]) -> tuple[Iterator[pa.RecordBatch], dict[str, int]]:
        planned = self._plan(start, None)
        if self._hold_first_commits(planned):
            return iter([]), start
        end = {**start, **{td.name: commits[-1][0] for td, commits in planned if commits}}
        return iter(self._read(planned) if self.rows else []), end

    def readBetweenOffsets(self, start: dict[str, int], end: dict[str, int]) -> Iterator[pa.RecordBatch]:
        return iter(self._read(self._plan(start, end)) if self.rows else [])

    def rows_between(self, start: dict[str, int], end: dict[str, int]) -> pa.Table:
        """Every row the commits after `start` up to `end` added, in the source's shape."""
        return pa.Table.from_batches(self._read(self._plan(start, end)), schema=self.schema)

    def _plan(self, start: dict[str, int], end: dict[str, int] | None) -> list[tuple[TableDef, Commits]]:
        """Per table, the commits to read after `start` (up to `end`, or `max_files` files) with their data files.

        Commit `after + 1`, then the next, is opened until one is missing: one read per new commit and one failed open
        per table on an idle poll, where listing `_delta_log` stats every entry of a log that grows with the table
        (28 ms at 5,000 commits, against the lane's 100 ms poll). The log is listed only to find where a table
        starts (before its first read: log retention may have removed version 0) and, while a table is idle, at most
        every `GAP_CHECK_S`, to notice commits that exist past one that does not (`LogGapError`)."""
        planned = []
        fs = self._lake()[0]
        new_batch = end is None  # at most `max_files` files, and under AvailableNow no version past the target
        upto = self.target if new_batch else end
        for td in self.tables:
            path = self._table_path(td)
            # A table added to the source after some batches were logged: those batches' offsets lack it, and it
            # starts where the reader was told to (`start` at construction).
            after = int(start.get(td.name, self.start.get(td.name, -1)))
            last = None if upto is None else upto.get(td.name, after)
            first = after + 1 if after >= 0 else self._oldest(path)
            commits: Commits = []
            files = 0
            for version in itertools.count(first):
                if last is not None and version > last:
                    break
                if new_batch and files >= self.max_files:
                    break
                try:
                    commits.append((version, data_files(path, version, fs)))
                except FileNotFoundError:
                    if not new_batch:  # a replay: the offset log names this commit, so it existed
                        raise LogGapError(self._gone(td, version, after)) from None
                    if not commits and after >= 0:
                        self._check_gap(td, path, after)
                    break
                files += len(commits[-1][1])
            if commits:
                self._idle_since.pop(td.name, None)
            planned.append((td, commits))
        return planned

    def _hold_first_commits(self, planned: list[tuple[TableDef, Commits]]) -> bool:
        """Whether a live poll that found new commits only of the tables a writer commits first
        (schemas.bronze.COMMITTED_FIRST: the reference tables, the events) plans no batch yet. A writer commits those
        one by one and its other tables ~50-100 ms later (foundation/bronze_sink.py): a micro-batch started on the
        first commits alone makes the others wait for it, then for their own (in bench/alert_latency.py, half the
        lane's delay). So the poll waits for the rest, at most `FIRST_COMMITS_WAIT_S`: an interval's events then
        reach the engine with its states or before them, never after (a controlled shutdown known before the ISR
        shrink it causes is evaluated). Under Trigger.AvailableNow nothing waits."""
        new = {td.name for td, commits in planned if commits}
        if self.target is not None or not new or not new <= set(COMMITTED_FIRST):
            self._first_commits_since = None
            return False
        now = time.monotonic()
        if self._first_commits_since is None:
            self._first_commits_since = now
        if now - self._first_commits_since < FIRST_COMMITS_WAIT_S:
            return True
        self._first_commits_since = None
        return False

    def _oldest(self, path: str) -> int:
        """The table's oldest commit: the first listed, or an older one a store's listing left out (s3proxy lists
        commits being written late); 0 for no table yet."""
        fs = self._lake()[0]
        oldest = (log_versions(path, fs) or [0])[0]
        while oldest > 0 and fs.get_file_info(commit_path(path, oldest - 1)).type != pafs.FileType.NotFound:
            oldest -= 1
        return oldest

    def _check_gap(self, td: TableDef, path: str, after: int) -> None:
        """No commit after `after`: none yet, or gone while newer ones exist (log retention past the lane's position,
        a log damaged by hand). The log is listed once the table has been idle `GAP_CHECK_S`, then every
        `GAP_CHECK_S`; a commit past `after + 1` with `after + 1` still missing (opened again: a store's listing may
        show a commit before it can be read, never the reverse) is a gap."""
        now = time.monotonic()
        since = self._idle_since.setdefault(td.name, now)
        if now - since < GAP_CHECK_S:
            return
        self._idle_since[td.name] = now
        fs = self._lake()[0]
        newer = [v for v in log_versions(path, fs) if v > after]
        if not newer or newer[0] == after + 1:  # none yet, or listed before it can be read: the next poll reads it
            return
        try:
            data_adds(path, after + 1, fs)
        except FileNotFoundError:
            raise LogGapError(self._gone(td, after + 1, after, newer[0])) from None

    @staticmethod
    def _gone(td: TableDef, version: int, after: int, present: int | None = None) -> str:
        missing = f"versions {version}..{present - 1} are" if present is not None else f"version {version} is"
        return (f"{td.qualified_name}: {missing} gone from its _delta_log (log retention, or the log damaged); the "
                f"alert lane read up to {after}. Delete the lane's checkpoint to start again from the newest commits")

    def _read(self, planned: list[tuple[TableDef, Commits]]) -> list[pa.RecordBatch]:
        fs = self._lake()[0]
        return [batch for td, commits in planned for version, files in commits for f in files
                for batch in self._rows(td, read_file(f, fs), version)]

    def _rows(self, td: TableDef, rows: pa.Table, version: int) -> list[pa.RecordBatch]:
        if rows.num_rows == 0:
            return []
        n = rows.num_rows
        # Columns the file lacks (an older writer's) are null, as Delta reads them.
        own = pa.StructArray.from_arrays(
            [rows.column(f.name).combine_chunks().cast(f.type) if f.name in rows.column_names else pa.nulls(n, f.type)
             for f in td.landing_schema], fields=list(td.landing_schema)).cast(self.schema.field(f"_{td.name}").type)
        columns: list[pa.Array] = [pa.array([td.name] * n, pa.string()), pa.array([version] * n, pa.int64())]
        columns += [own if other is td else pa.nulls(n, self.schema.field(f"_{other.name}").type)
                    for other in self.tables]
        return [pa.RecordBatch.from_arrays(columns, schema=self.schema)]


class BronzeLogSource(DataSource):
    """Options: `lakehouse`, `tables` (comma-separated bronze table names), `start` (JSON {table: version}: the
    last version already read, -1 for none; used when the query has no checkpoint yet), `max_files`, `rows`
    (`false`: offsets only, see BronzeLogReader), `store` (JSON of an ObjectStore: the lakehouse's endpoint when it
    is on one)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _tables(self) -> list[TableDef]:
        names = [n for n in str(self.options.get("tables", "")).split(",") if n]
        unknown = [n for n in names if n not in BRONZE_BY_NAME]
        if not names or unknown:
            raise ValueError(f"{NAME}: option 'tables' must name bronze tables, got {names} (unknown: {unknown})")
        return [BRONZE_BY_NAME[n] for n in names]

    def schema(self) -> StructType:
        if self.options.get("rows", "true") == "false":
            # No row ever comes, yet each micro-batch still plans and code-generates a projection of this schema: for
            # the union's nested structs that took a quarter of the alert lane's query thread (JFR), for nothing.
            return StructType([StructField("_table", StringType())])
        return from_arrow_schema(union_schema(self._tables()))

    def simpleStreamReader(self, schema: StructType) -> BronzeLogReader:
        start: dict[str, Any] = json.loads(self.options.get("start", "{}"))
        store = self.options.get("store")
        return BronzeLogReader(self.options["lakehouse"], self._tables(), {k: int(v) for k, v in start.items()},
                               int(self.options.get("max_files", "1000")), self.options.get("rows", "true") == "true",
                               ObjectStore(**json.loads(store)) if store else None)


def store_option(store: ObjectStore) -> str:
    """An ObjectStore as the source's `store` option."""
    return json.dumps(dataclasses.asdict(store))
