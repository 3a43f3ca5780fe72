"""One definition per lakehouse table.

A table is defined once, as an Arrow schema (what the emulator's delta-rs writer produces); the
Spark schema is derived from it so the two cannot drift apart. Later layers (silver, gold) attach
their expectation suites to the same object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass(frozen=True)
class TableDef:
    """A Delta table of the lakehouse: its layer, name, Arrow schema and natural key."""

    layer: str
    name: str
    arrow_schema: pa.Schema
    natural_key: tuple[str, ...]
    description: str
    column_docs: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        names = set(self.arrow_schema.names)
        missing = [c for c in self.natural_key if c not in names]
        if missing:
            raise ValueError(f"{self.qualified_name}: natural_key names unknown columns {missing}")
        undocumented = [c for c in self.arrow_schema.names if c not in self.column_docs]
        if undocumented:
            raise ValueError(f"{self.qualified_name}: columns without documentation {undocumented}")

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
