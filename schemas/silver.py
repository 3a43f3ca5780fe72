"""Silver (validated), quarantine (rejected, with reasons) and the data-quality log.

Each bronze table has a silver twin with the same columns plus `ingested_at`, holding only rows that
passed every expectation, de-duplicated on the bronze natural key; and a quarantine twin holding the
rejected rows as they arrived, each with the expectations it failed and the offending values.
`silver.dq_runs` records one line per validated micro-batch and table.
"""

from __future__ import annotations

import pyarrow as pa

from schemas.bronze import BRONZE_TABLES, TS
from schemas.expectations import Expect, between, in_set, not_null
from schemas.table import CONTEXT_COLUMNS, TableDef, columns

INGESTED_AT = ("ingested_at", TS, False, "when the validate job processed the row (its micro-batch's timestamp)")

FAILURE = pa.struct([
    pa.field("expectation", pa.string()),
    pa.field("column", pa.string()),
    pa.field("value", pa.string(), nullable=True),
])


def _row_local(td: TableDef) -> tuple[Expect, ...]:
    ctx = {c for cols in CONTEXT_COLUMNS.values() for c in cols}
    return tuple(e for e in td.expectations if not set(e.columns) & ctx)


def silver_of(bronze: TableDef) -> TableDef:
    schema = bronze.arrow_schema.append(pa.field(INGESTED_AT[0], INGESTED_AT[1], nullable=False))
    return TableDef("silver", bronze.name, schema, bronze.natural_key,
                    f"Validated, de-duplicated bronze.{bronze.name}. {bronze.description}",
                    {**bronze.column_docs, INGESTED_AT[0]: INGESTED_AT[3]},
                    expectations=(*_row_local(bronze), *not_null("ingested_at")))


def quarantine_of(bronze: TableDef) -> TableDef:
    fields = [f.with_nullable(True) for f in bronze.arrow_schema]
    fields += [pa.field("failures", pa.list_(FAILURE), nullable=False),
               pa.field("quarantined_at", TS, nullable=False),
               pa.field("validate_batch_id", pa.int64(), nullable=False)]
    docs = {**bronze.column_docs,
            "failures": "every expectation the row failed: its label, the column(s) and the offending value(s)",
            "quarantined_at": "when the validate job rejected the row (its micro-batch's timestamp)",
            "validate_batch_id": "the validate query's micro-batch id (see silver.dq_runs)"}
    return TableDef("quarantine", bronze.name, pa.schema(fields), (), f"Rows of bronze.{bronze.name} that failed "
                    "validation, as they arrived, with the reasons.", docs,
                    expectations=not_null("failures", "quarantined_at", "validate_batch_id"))


SILVER_TABLES: dict[str, TableDef] = {td.name: silver_of(td) for td in BRONZE_TABLES}
QUARANTINE_TABLES: dict[str, TableDef] = {td.name: quarantine_of(td) for td in BRONZE_TABLES}

EXPECTATION_RESULT = pa.struct([
    pa.field("expectation", pa.string()),
    pa.field("unexpected_count", pa.int64()),
])

_schema, _docs = columns(
    ("table_name", pa.string(), False, "bronze table the batch came from"),
    ("validate_batch_id", pa.int64(), False, "the validate query's micro-batch id for that table"),
    ("ingested_at", TS, False, "the micro-batch's timestamp"),
    ("rows_in", pa.int64(), False, "rows in the batch after de-duplication"),
    ("rows_valid", pa.int64(), False, "rows written to silver"),
    ("rows_quarantined", pa.int64(), False, "rows written to quarantine"),
    ("pass_rate", pa.float64(), False, "rows_valid / rows_in (1.0 for an empty batch)"),
    ("failed_expectations", pa.list_(EXPECTATION_RESULT), False, "expectations with unexpected rows, and how many"),
    ("ge_success", pa.bool_(), False, "Great Expectations' verdict on the whole batch"),
    ("ge_evaluated_expectations", pa.int32(), False, "expectations Great Expectations evaluated"),
    ("ge_successful_expectations", pa.int32(), False, "expectations that passed"),
    ("ge_engine", pa.string(), False, "execution engine GE validated with: 'pandas' or 'spark'"),
    ("runs", pa.list_(pa.string()), False, "emulator runs (run_id) the batch's rows belong to"),
    ("batch_duration_ms", pa.int64(), False, "wall time validating the micro-batch took (all its tables together)"),
)
DQ_RUNS = TableDef(
    "silver", "dq_runs", _schema, ("table_name", "validate_batch_id"),
    "One row per validated micro-batch and table: counts, pass rate and the failed expectations.", _docs,
    expectations=(*not_null(*_schema.names), between("rows_in", 0), between("rows_valid", 0),
                  between("rows_quarantined", 0), between("pass_rate", 0, 1),
                  in_set("ge_engine", ["pandas", "spark"])),
)

ALL_TABLES: tuple[TableDef, ...] = (
    *BRONZE_TABLES, *SILVER_TABLES.values(), *QUARANTINE_TABLES.values(), DQ_RUNS,
)
