"""Builds foundation/spark.py's CLASS_ARCHIVE (`make jars`): `python -m foundation.class_archive`.

A JVM spends most of a Spark session's start, and of its first jobs, loading, parsing and verifying classes (10 s
for a session and 6 s for its first job on two cores, idle). The JDK's class data sharing keeps them parsed and
verified in an archive that later JVMs map instead: this runs, in one local driver started with
`-XX:ArchiveClassesAtExit`, what isrwatch's jobs do (Delta reads, writes and merges, a streaming query with
de-duplication in RocksDB, Arrow to pandas), and the JVM writes the classes it loaded when it exits.
Only classes of the class path are kept (Spark's and jvm/local-master's; the Delta jars come through Spark's own
loader): the archive is checked against that class path, and rebuilt when jvm/local-master's jar is.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from foundation.spark import CLASS_ARCHIVE, JAVA_OPTIONS, build_spark_session


def _workload(folder: Path) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    assert spark is not None
    table, checkpoint = str(folder / "table"), str(folder / "checkpoint")
    rows = spark.range(0, 200, numPartitions=2).selectExpr(
        "id", "cast(id % 7 as string) AS key", "timestamp_seconds(1700000000 + id) AS ts")
    rows.write.format("delta").save(table)
    spark.sql(f"MERGE INTO delta.`{table}` t USING (SELECT 1 AS id) s ON t.id = s.id "
              "WHEN MATCHED THEN UPDATE SET key = 'merged'")
    query = (spark.readStream.format("delta").load(table).withWatermark("ts", "1 minute")
             .dropDuplicatesWithinWatermark(["id"]).writeStream.trigger(availableNow=True)
             .option("checkpointLocation", checkpoint)
             .foreachBatch(lambda batch, _: batch.groupBy("key").count().toPandas()).start())
    query.awaitTermination()
    spark.read.format("delta").load(table).groupBy("key").count().toPandas()


def build(archive: Path) -> None:
    archive.unlink(missing_ok=True)
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="isrwatch-class-archive-") as folder:
        # No archive to map yet (local_master_settings adds none): only the option that writes one.
        spark = build_spark_session("isrwatch-class-archive", master="local[2]",
                                    conf={JAVA_OPTIONS: f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off "
                                                        "-Xlog:cds+dynamic=off"})
        _workload(Path(folder))
        spark.stop()
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        assert gateway is not None
        process = gateway.proc
        gateway.shutdown()
        process.stdin.close()   # the driver JVM exits at the end of its standard input, writing the archive
        if process.wait(timeout=300) != 0 or not partial.exists():
            sys.exit(f"the JVM did not write its class archive {partial} (exit {process.returncode})")
    partial.rename(archive)


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else CLASS_ARCHIVE)
