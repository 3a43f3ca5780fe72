"""Writes a bronze writer's batches (the emulator's, the collector's) to bronze Delta tables with delta-rs,
idempotently.

Each append records an app transaction (app id `isrwatch-<writer>/<run_id>`, version = batch id).
delta-rs records app transactions but does not enforce them, so the sink reads the table's recorded
version first and skips a batch it has already written: a restarted run never duplicates rows.
"""

from __future__ import annotations

import os

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import TableNotFoundError

from foundation.delta_checksum import write_with_checksum
from foundation.delta_io import compact_and_checkpoint
from schemas.bronze import REFERENCE_TABLES
from schemas.table import TableDef


class SinkSchemaError(Exception):
    """Raised when an existing bronze table's columns differ from its definition (nothing is written)."""


class DeltaSink:
    """Appends batches; every `maintain_every` batches it compacts, checkpoints and vacuums.

    A live run commits once a second per table: without maintenance a day is 86,400 small files and
    log entries per table. Compaction merges them, a checkpoint bounds log replay, and vacuum removes
    the compacted-away files older than `vacuum_retention_hours`.
    """

    def __init__(self, lakehouse: str, run_id: str, *, writer: str = "emulator", maintain_every: int = 600,
                 vacuum_retention_hours: int = 24) -> None:
        if maintain_every < 1:
            raise ValueError(f"maintain_every must be >= 1, got {maintain_every}")
        self.lakehouse = lakehouse
        self.run_id = run_id
        self.app_id = f"isrwatch-{writer}/{run_id}"
        self.maintain_every = maintain_every
        self.vacuum_retention_hours = vacuum_retention_hours
        self.batches_written = 0
        self.checked: set[str] = set()

    def written_version(self, td: TableDef) -> int:
        """The last batch id this run committed to `td`, or -1."""
        try:
            version = DeltaTable(td.path(self.lakehouse)).transaction_version(self.app_id)
        except TableNotFoundError:
            return -1
        return -1 if version is None else int(version)

    def _check_existing_schema(self, td: TableDef) -> None:
        """Refuse to append to a table whose columns differ (e.g. written by an older isrwatch)."""
        if td.name in self.checked:
            return
        try:
            existing = [f.name for f in DeltaTable(td.path(self.lakehouse)).schema().fields]
        except TableNotFoundError:
            existing = list(td.arrow_schema.names)
        if existing != list(td.arrow_schema.names):
            raise SinkSchemaError(f"{td.qualified_name} at {td.path(self.lakehouse)} has columns {existing}, "
                                  f"expected {list(td.arrow_schema.names)}: write to another --lakehouse "
                                  "(or move this one away); nothing was written")
        self.checked.add(td.name)

    def write_batch(self, batch_id: int, tables: dict[TableDef, pa.Table]) -> list[str]:
        written: list[str] = []
        for td in tables:  # every table checked before any is written
            self._check_existing_schema(td)
        for td in sorted(tables, key=write_order):
            table = tables[td]
            if not table.schema.equals(td.arrow_schema):
                raise ValueError(f"{td.qualified_name}: batch schema differs from the table definition:\n"
                                 f"{table.schema}\nexpected:\n{td.arrow_schema}")
            if self.written_version(td) >= batch_id:
                continue  # already committed by an earlier attempt of this run
            path = td.path(self.lakehouse)
            if "://" not in path:
                os.makedirs(path, exist_ok=True)
            write_with_checksum(path, table.cast(td.landing_schema), mode="append",
                                commit_properties=CommitProperties(
                                    app_transactions=[Transaction(self.app_id, batch_id)]))
            written.append(td.name)
        if written:
            self.batches_written += 1
            if self.batches_written % self.maintain_every == 0:
                compact_and_checkpoint(self.lakehouse, tuple(tables), self.vacuum_retention_hours)
        return written


def write_order(td: TableDef) -> tuple[int, str]:
    """Reference tables (schemas.bronze.REFERENCE_TABLES) first, then by name."""
    rank = REFERENCE_TABLES.index(td.name) if td.name in REFERENCE_TABLES else len(REFERENCE_TABLES)
    return rank, td.name
