"""Every table isrwatch defines, in every layer: where there are no folders to list (an object store), the
lakehouse's tables are found by trying these."""

from __future__ import annotations

from schemas.api_tables import SILENCES
from schemas.gold import GOLD_ALERT_TABLES
from schemas.gold_durability import GOLD_DURABILITY_TABLES
from schemas.silver import ALL_TABLES as BRONZE_SILVER_QUARANTINE
from schemas.table import TableDef

EVERY_TABLE: tuple[TableDef, ...] = (*BRONZE_SILVER_QUARANTINE, *GOLD_ALERT_TABLES, *GOLD_DURABILITY_TABLES, SILENCES)
