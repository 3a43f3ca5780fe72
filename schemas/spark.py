"""Spark schemas derived from the Arrow definitions, so the two can never disagree."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T


def to_spark_type(dtype: pa.DataType, name: str) -> T.DataType:
    if pa.types.is_string(dtype):
        return T.StringType()
    if pa.types.is_int32(dtype):
        return T.IntegerType()
    if pa.types.is_int64(dtype):
        return T.LongType()
    if pa.types.is_float64(dtype):
        return T.DoubleType()
    if pa.types.is_boolean(dtype):
        return T.BooleanType()
    if pa.types.is_timestamp(dtype) and dtype.tz is not None:
        return T.TimestampType()
    if pa.types.is_struct(dtype):
        return T.StructType([T.StructField(f.name, to_spark_type(f.type, f"{name}.{f.name}"), f.nullable)
                             for f in dtype])
    if pa.types.is_list(dtype):
        return T.ArrayType(to_spark_type(dtype.value_type, name), containsNull=True)
    raise TypeError(f"column {name}: no Spark type for Arrow type {dtype}")


def to_spark_schema(schema: pa.Schema) -> T.StructType:
    return T.StructType([T.StructField(f.name, to_spark_type(f.type, f.name), f.nullable) for f in schema])
