"""A union micro-batch held on the driver, checked table by table: what validate's driver route and the alert lane
share.

Both keep a `DriverContext` between micro-batches (run windows, topics and brokers folded from the reference tables'
rows as they come; meter counts and partition states folded from each batch's valid rows), so a row is judged by the
same expectations against the same kind of context whichever query holds it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from jobs.validate_reads import DriverReads
from jobs.validate_routes import DriverContext, RoutedOnDriver, TableCheck, check_on_driver
from jobs.validate_source import table_column
from pipelines.context import LastCounts, LastStates
from pipelines.reference_context import BrokerRegistry, RunWindows, TopicPartitions
from schemas.bronze import RUNS, TOPIC_CONFIGS
from schemas.table import TableDef


def new_driver_context(lakehouse: str, tables: Sequence[TableDef], lookback_us: int) -> DriverContext:
    """An empty context for `tables`: reference rows are read on a cache miss, silver's on the first batch."""
    reads = DriverReads(lakehouse, lookback_us)
    return DriverContext(
        RunWindows(reads.reference(RUNS, ("run_id", "batch_id", "start_ts", "end_ts"))),
        TopicPartitions(reads.reference(TOPIC_CONFIGS, ("run_id", "topic", "partitions"))),
        {td.name: LastCounts(lookback_us) for td in tables if "previous_count" in td.context},
        reads.silver_counts_before,
        BrokerRegistry(reads.reference(RUNS, ("run_id", "broker_ids", "controller_ids"))),
        {td.name: LastStates(lookback_us) for td in tables if "previous_state" in td.context},
        reads.silver_states_before)


def check_union_on_driver(collected: pa.Table, tables: Sequence[TableDef], batch_id: int,
                          ctx: DriverContext) -> list[tuple[RoutedOnDriver, int]]:
    """Each table's rows of a collected union batch (`_table`, one struct column per table, `ingested_at`) checked
    (reference tables first: their rows feed the others' context); per table, its newest `ingested_at` in µs."""
    routed = []
    for td in tables:
        mine = collected.filter(pc.equal(collected.column("_table"), td.name))
        if mine.num_rows == 0:
            continue
        struct = mine.column(table_column(td.name)).combine_chunks()
        rows = pa.Table.from_arrays([*struct.flatten(), mine.column("ingested_at")],
                                    names=[*(f.name for f in struct.type), "ingested_at"])
        if td.name == RUNS.name:
            ctx.run_windows.fold(rows)
            ctx.brokers.fold(rows)
        elif td.name == TOPIC_CONFIGS.name:
            ctx.topics.fold(rows)
        at_us = int(pc.cast(pc.max(rows.column("ingested_at")), pa.int64()).as_py())
        routed.append((check_on_driver(td, rows, batch_id, ctx), at_us))
    return routed


def fold_checked(ctx: DriverContext, done: Sequence[TableCheck | RoutedOnDriver]) -> None:
    """The valid rows' meter counts and partition states, the context of the next batch's checks."""
    for c in done:
        if c.valid_meters is not None:
            ctx.last_counts[c.table].fold(c.valid_meters())
        if c.valid_states is not None:
            ctx.last_states[c.table].fold(c.valid_states())
