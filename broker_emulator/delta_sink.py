"""Writes the emulator's batches to bronze Delta tables with delta-rs, idempotently.

Each append records an app transaction (app id `isrwatch-emulator/<run_id>`, version = batch id).
delta-rs records app transactions but does not enforce them, so the sink reads the table's recorded
version first and skips a batch it has already written: a restarted run never duplicates rows.
"""

from __future__ import annotations

import os

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from schemas.table import TableDef


class DeltaSink:
    def __init__(self, lakehouse: str, run_id: str) -> None:
        self.lakehouse = lakehouse
        self.run_id = run_id
        self.app_id = f"isrwatch-emulator/{run_id}"

    def written_version(self, td: TableDef) -> int:
        """The last batch id this run committed to `td`, or -1."""
        try:
            version = DeltaTable(td.path(self.lakehouse)).transaction_version(self.app_id)
        except TableNotFoundError:
            return -1
        return -1 if version is None else int(version)

    def write_batch(self, batch_id: int, tables: dict[TableDef, pa.Table]) -> list[str]:
        written: list[str] = []
        for td in sorted(tables, key=lambda t: t.name):
            table = tables[td]
            if not table.schema.equals(td.arrow_schema):
                raise ValueError(f"{td.qualified_name}: batch schema differs from the table definition:\n"
                                 f"{table.schema}\nexpected:\n{td.arrow_schema}")
            if self.written_version(td) >= batch_id:
                continue  # already committed by an earlier attempt of this run
            path = td.path(self.lakehouse)
            if "://" not in path:
                os.makedirs(path, exist_ok=True)
            write_deltalake(path, table, mode="append",
                            commit_properties=CommitProperties(
                                app_transactions=[Transaction(self.app_id, batch_id)]))
            written.append(td.name)
        return written


def compact_and_checkpoint(lakehouse: str, tables: tuple[TableDef, ...], retention_hours: int = 168) -> None:
    """Bound a long run's table size: merge small files, checkpoint the log, vacuum old files."""
    for td in tables:
        try:
            dt = DeltaTable(td.path(lakehouse))
        except TableNotFoundError:
            continue
        dt.optimize.compact()
        dt.create_checkpoint()
        dt.vacuum(retention_hours=retention_hours, enforce_retention_duration=False, dry_run=False)
        dt.cleanup_metadata()
