"""Streaming checkpoints on a local disk are written through Hadoop's FileSystem API (foundation/spark.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def _manager(spark: Any, path: Path) -> Any:
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    return jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(
        jvm.org.apache.hadoop.fs.Path(str(path)), conf)


def test_a_local_checkpoint_goes_through_the_file_system_api_and_is_written_whole_once(spark: Any,
                                                                                      tmp_path: Path) -> None:
    """The manager Spark picks for a local checkpoint: the FileSystem one (FileContext's forks `readlink` for every
    rename). What it writes appears whole, under its name only, and is refused a second time."""
    manager = _manager(spark, tmp_path)
    assert manager.getClass().getSimpleName() == "FileSystemBasedCheckpointFileManager"
    jvm = spark.sparkContext._jvm
    target = jvm.org.apache.hadoop.fs.Path(str(tmp_path / "offsets" / "0"))
    manager.mkdirs(target.getParent())
    out = manager.createAtomic(target, False)
    out.write(bytearray(b"v1\n{}"))
    assert not (tmp_path / "offsets" / "0").exists()  # nothing under the name before the close
    out.close()
    assert (tmp_path / "offsets" / "0").read_bytes() == b"v1\n{}"
    assert sorted(p.name for p in (tmp_path / "offsets").iterdir() if not p.name.startswith(".")) == ["0"]
    again = manager.createAtomic(target, False)
    again.write(bytearray(b"v1\n{\"other\": 1}"))
    with pytest.raises(Exception, match="FileAlreadyExistsException"):  # py4j's error around Hadoop's
        again.close()
    assert (tmp_path / "offsets" / "0").read_bytes() == b"v1\n{}"
