"""What validate's driver route reads besides its micro-batch, by delta-rs (no Spark job on the live path): bronze
reference rows on a cache miss, and silver's rows before a batch on the first batch after a start."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from foundation.delta_io import open_table
from pipelines.context import METER_KEY, PARTITION_KEY, STATE_VALUES
from pipelines.great_expectations_check import arrow_to_ge_frame
from schemas.silver import SILVER_TABLES
from schemas.table import TableDef


def driver_read(td: TableDef, lakehouse: str, columns: list[str], where: pc.Expression) -> pa.Table:
    """`columns` of the rows of `td` matching `where`, read on the driver by delta-rs (files skipped by their
    statistics); an empty table when it does not exist yet."""
    schema = pa.schema([td.arrow_schema.field(c) for c in columns])
    table = open_table(td, lakehouse)
    if table is None:
        return schema.empty_table()
    return table.to_pyarrow_dataset().to_table(columns=columns, filter=where).cast(schema)


@dataclass(frozen=True)
class DriverReads:
    lakehouse: str
    lookback_us: int   # validate.counter_lookback

    def reference(self, td: TableDef, cols: tuple[str, ...]) -> Callable[[Sequence[str]], pa.Table]:
        """Rows of a bronze reference table for some runs, read on a driver cache miss."""
        def load(run_ids: Sequence[str]) -> pa.Table:
            return driver_read(td, self.lakehouse, list(cols), pc.field("run_id").isin(list(run_ids)))
        return load

    def silver_before(self, td: TableDef, cols: list[str], run_ids: list[str], min_ts_us: int) -> pa.Table:
        """Silver rows of `run_ids` within the look-back before `min_ts_us` (the first batch after a start)."""
        ts = pa.timestamp("us", tz="UTC")
        window = (pc.field("run_id").isin(run_ids) & (pc.field("ts") >= pa.scalar(min_ts_us - self.lookback_us, ts))
                  & (pc.field("ts") < pa.scalar(min_ts_us, ts)))
        return driver_read(SILVER_TABLES[td.name], self.lakehouse, cols, window)

    def silver_counts_before(self, td: TableDef, run_ids: list[str], min_ts_us: int) -> Any:
        """The silver meter rows before the batch within the look-back (`LastCounts.fold` keeps the newest)."""
        rows = self.silver_before(td, [*METER_KEY, "ts", "kind", "count"], run_ids, min_ts_us)
        meters = rows.filter(pc.and_(pc.equal(rows.column("kind"), "meter"), pc.is_valid(rows.column("count"))))
        return arrow_to_ge_frame(meters.select([*METER_KEY, "ts", "count"]))

    def silver_states_before(self, td: TableDef, run_ids: list[str], min_ts_us: int) -> Any:
        """The silver partition snapshots before the batch within the look-back (`LastStates.fold` keeps the
        newest per partition)."""
        return arrow_to_ge_frame(self.silver_before(td, [*PARTITION_KEY, "ts", *STATE_VALUES], run_ids, min_ts_us))
