"""One definition per lakehouse table.

A table is defined once, as an Arrow schema (what the emulator's delta-rs writer produces); the
Spark schema is derived from it so the two cannot drift apart. Later layers (silver, gold) attach
their expectation suites to the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from schemas.expectations import (
    CTX_BATCH_END_TS,
    CTX_BROKERS_KNOWN,
    CTX_ELR_DISJOINT_FROM_ISR,
    CTX_ELR_SUBSET_OF_REPLICAS,
    CTX_HW_WITHIN_LEADER_LEO,
    CTX_ISR_SUBSET_OF_REPLICAS,
    CTX_LEADER_IN_ISR_OR_OFFLINE,
    CTX_LOG_START_WITHIN_HW,
    CTX_PREVIOUS_COUNT,
    CTX_PREVIOUS_HIGH_WATERMARK,
    CTX_PREVIOUS_LEADER_EPOCH,
    CTX_PREVIOUS_LOG_START_OFFSET,
    CTX_PREVIOUS_PARTITION_EPOCH,
    CTX_REPLICA_LEOS_ALIGNED,
    CTX_REPLICAS_DISTINCT,
    CTX_RUN_START_TS,
    CTX_TOPIC_KNOWN,
    CTX_TOPIC_PARTITIONS,
    BrokerRefs,
    Expect,
)

# Context a table's expectations may need, and the ctx_* columns each one adds (jobs/validate_routes.py TableContext).
CONTEXT_COLUMNS: dict[str, tuple[str, ...]] = {
    "run_window": (CTX_RUN_START_TS, CTX_BATCH_END_TS),
    "topic": (CTX_TOPIC_PARTITIONS, CTX_TOPIC_KNOWN),
    "previous_count": (CTX_PREVIOUS_COUNT,),
    "broker_registry": (CTX_BROKERS_KNOWN,),  # needs TableDef.broker_refs
    "replication": (CTX_ISR_SUBSET_OF_REPLICAS, CTX_LEADER_IN_ISR_OR_OFFLINE, CTX_ELR_DISJOINT_FROM_ISR,
                    CTX_ELR_SUBSET_OF_REPLICAS, CTX_REPLICAS_DISTINCT, CTX_REPLICA_LEOS_ALIGNED,
                    CTX_HW_WITHIN_LEADER_LEO, CTX_LOG_START_WITHIN_HW),
    "previous_state": (CTX_PREVIOUS_LEADER_EPOCH, CTX_PREVIOUS_PARTITION_EPOCH, CTX_PREVIOUS_HIGH_WATERMARK,
                       CTX_PREVIOUS_LOG_START_OFFSET),
}


@dataclass(frozen=True)
class TableDef:
    """A Delta table of the lakehouse: its layer, name, Arrow schema, natural key and expectations."""

    layer: str
    name: str
    arrow_schema: pa.Schema
    natural_key: tuple[str, ...]
    description: str
    column_docs: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    expectations: tuple[Expect, ...] = ()
    context: tuple[str, ...] = ()
    broker_refs: BrokerRefs | None = None  # the columns naming brokers, for the "broker_registry" context

    def __post_init__(self) -> None:
        names = set(self.arrow_schema.names)
        missing = [c for c in self.natural_key if c not in names]
        if missing:
            raise ValueError(f"{self.qualified_name}: natural_key names unknown columns {missing}")
        undocumented = [c for c in self.arrow_schema.names if c not in self.column_docs]
        if undocumented:
            raise ValueError(f"{self.qualified_name}: columns without documentation {undocumented}")
        unknown_context = [c for c in self.context if c not in CONTEXT_COLUMNS]
        if unknown_context:
            raise ValueError(f"{self.qualified_name}: unknown context {unknown_context}")
        if ("broker_registry" in self.context) != (self.broker_refs is not None):
            raise ValueError(f"{self.qualified_name}: the 'broker_registry' context and broker_refs go together")
        if self.broker_refs is not None and not set(self.broker_refs.columns) <= names:
            raise ValueError(f"{self.qualified_name}: broker_refs names unknown columns "
                             f"{sorted(set(self.broker_refs.columns) - names)}")
        known = names | {c for ctx in self.context for c in CONTEXT_COLUMNS[ctx]}
        for e in self.expectations:
            missing = [c for c in e.columns if c not in known]
            if missing:
                raise ValueError(f"{self.qualified_name}: expectation {e.label} names unknown columns {missing}")

    @property
    def landing_schema(self) -> pa.Schema:
        """The schema bronze tables are stored with: every column nullable, because required-ness is
        enforced by validation (a violating row is quarantined with its reason) rather than by the writer."""
        return pa.schema([f.with_nullable(True) for f in self.arrow_schema])

    @property
    def qualified_name(self) -> str:
        return f"{self.layer}.{self.name}"

    def path(self, lakehouse: str) -> str:
        """Location of the table under a lakehouse root (a local path or any Hadoop-compatible URI)."""
        return f"{lakehouse.rstrip('/')}/{self.layer}/{self.name}"


def columns(*specs: tuple[str, pa.DataType, bool, str]) -> tuple[pa.Schema, dict[str, str]]:
    """Build an Arrow schema and the column docs from (name, type, nullable, doc) tuples."""
    schema = pa.schema([pa.field(name, dtype, nullable=nullable) for name, dtype, nullable, _ in specs])
    return schema, {name: doc for name, _, _, doc in specs}
