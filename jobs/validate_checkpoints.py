"""Carry on from the per-table validate checkpoints an earlier isrwatch left.

Before the union query, validate ran one streaming query per bronze table, checkpointed under
`<checkpoints>/validate/<table>`. A new union query started over the same lakehouse would read every
bronze table from its first version again and append those rows to silver a second time (its writes are
marked with its own query id). So when the union checkpoint does not exist yet, each table's source
starts at the first bronze version its old query had not committed. The old de-duplication state does
not carry over: bronze rows that arrive twice within `dedup_window` of the switch would both pass (the
emulator's appends are idempotent, so it writes none).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from foundation.streaming_checkpoint import (
    BASE_INDEX,
    first_unread_version,
    last_committed_batch,
    parse_offset_log_entry,
)


class CheckpointMigrationError(Exception):
    """Raised when an old per-table checkpoint stopped inside a bronze version (nothing is started)."""


class HadoopFiles:
    """The checkpoint root through Spark's Hadoop file systems: any URI a checkpoint may live on."""

    def __init__(self, spark: SparkSession) -> None:
        jvm = spark.sparkContext._jvm
        assert jvm is not None, "a classic (JVM) SparkSession"
        self.conf = spark.sparkContext._jsc.hadoopConfiguration()
        # The classes looked up once. py4j resolves `jvm.org.apache.hadoop.fs.Path` a name at a time, a round trip
        # each, and the JVM tells a package from a class by failing to load it, which searches every jar on the
        # class path: an exists and a read took 17 ms on an idle machine that way, against ~1 ms.
        self.path_class: Any = jvm.org.apache.hadoop.fs.Path
        self.io_utils: Any = jvm.org.apache.commons.io.IOUtils
        # A file system per scheme and authority, as Hadoop caches them: getFileSystem is one more round trip.
        self._fs_of: dict[str, Any] = {}

    def _fs(self, path: str) -> tuple[Any, Any]:
        p = self.path_class(path)
        parts = urlsplit(path)
        key = f"{parts.scheme}://{parts.netloc}"
        if key not in self._fs_of:
            self._fs_of[key] = p.getFileSystem(self.conf)
        return self._fs_of[key], p

    def exists(self, path: str) -> bool:
        fs, p = self._fs(path)
        return bool(fs.exists(p))

    def names(self, path: str) -> list[str]:
        fs, p = self._fs(path)
        return [s.getPath().getName() for s in fs.listStatus(p)] if fs.exists(p) else []

    def read(self, path: str) -> str:
        fs, p = self._fs(path)
        stream = fs.open(p)
        try:
            return str(self.io_utils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def write(self, path: str, text: str) -> None:
        """`text` at `path`, whole or not at all: written beside it, then renamed."""
        fs, p = self._fs(path)
        part = self.path_class(f"{path}.part")
        stream = fs.create(part, True)
        try:
            stream.write(bytearray(text.encode()))
        finally:
            stream.close()
        if not fs.rename(part, p):
            raise OSError(f"could not rename {part} to {path}")


def offset_log_entry(files: HadoopFiles, path: str) -> tuple[dict[str, Any], list[Any]]:
    """(the batch's metadata, one offset per source) from a file of a streaming query's offset log."""
    return parse_offset_log_entry(files.read(path), path)


def next_version(offset: dict[str, Any], where: str) -> int | None:
    """The first bronze version not fully processed at a committed Delta source offset (None: all of it). An offset
    inside a version cannot be carried over."""
    version = first_unread_version(offset)
    if version is None or int(offset["index"]) == BASE_INDEX or version > int(offset["reservoirVersion"]):
        return version
    raise CheckpointMigrationError(
        f"{where}: the old validate query stopped inside bronze version {version} (file {offset['index']}); run the "
        "earlier isrwatch's validate until it has caught up, then start this one")


def continue_from_per_table_checkpoints(spark: SparkSession, checkpoint_root: str, union_checkpoint: str,
                                        tables: list[str], log: Callable[[str], None]) -> dict[str, int]:
    """Per table, the bronze version the union query's source starts at (tables without an old checkpoint,
    or once the union query has a checkpoint of its own, are absent)."""
    files = HadoopFiles(spark)
    if files.names(f"{union_checkpoint}/offsets"):
        return {}
    starting = {}
    for name in tables:
        old = f"{checkpoint_root.rstrip('/')}/validate/{name}"
        committed = last_committed_batch(files.names(f"{old}/commits"))
        if committed is None:
            continue
        offset = offset_log_entry(files, f"{old}/offsets/{committed}")[1][0]  # the old query had one source
        version = None if offset is None else next_version(offset, old)
        if version is not None:
            starting[name] = version
            log(f"validate: {name} continues from bronze version {version} (the per-table checkpoint {old})")
    return starting
