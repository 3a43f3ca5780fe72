"""validate's streaming source: every configured bronze table in one union, de-duplicated on each table's natural key.

Each row carries `_table`, `_key` (its natural key as JSON), one struct column per table holding its row (null on
other tables' rows) and `ingested_at`, the micro-batch's own timestamp (replayed identically after a restart).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from foundation.settings import PipelineSettings, spark_interval
from schemas.table import TableDef


def table_column(name: str) -> str:
    """The union's struct column holding a row of bronze table `name` (null on other tables' rows)."""
    return f"_{name}"


def natural_key(td: TableDef) -> Column:
    """A row's natural key as one JSON string (microsecond timestamps, so distinct times stay distinct)."""
    return F.to_json(F.struct(*td.natural_key), {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"})


def bronze_rows(spark: SparkSession, settings: PipelineSettings, tables: list[TableDef],
                starting_versions: dict[str, int]) -> DataFrame:
    """One streaming DataFrame over the bronze tables: `_table`, `_key` (the natural key as JSON), one struct
    column per table holding its row, and `ingested_at`; every row, duplicates too."""
    v = settings.validate_
    frames = []
    for td in tables:
        reader = spark.readStream.format("delta").option("maxFilesPerTrigger", v.max_files_per_trigger)
        if td.name in starting_versions:
            reader = reader.option("startingVersion", starting_versions[td.name])
        source = reader.load(td.path(settings.lakehouse))
        frames.append(source.select(F.lit(td.name).alias("_table"), natural_key(td).alias("_key"),
                                    F.struct(*source.columns).alias(table_column(td.name))))
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame, allowMissingColumns=True)
    return union.withColumn("ingested_at", F.current_timestamp())


def bronze_union(spark: SparkSession, settings: PipelineSettings, tables: list[TableDef],
                 starting_versions: dict[str, int]) -> DataFrame:
    """`bronze_rows`, de-duplicated per table and key within the window (in the state store)."""
    return (bronze_rows(spark, settings, tables, starting_versions)
            .withWatermark("ingested_at", spark_interval(settings.validate_.dedup_window))
            .dropDuplicatesWithinWatermark(["_table", "_key"]))
