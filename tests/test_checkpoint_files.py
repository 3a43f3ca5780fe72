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


def test_local_files_are_created_through_the_nio_file_system_with_the_permissions_hadoop_asks(spark: Any,
                                                                                             tmp_path: Path) -> None:
    """`file:` is jvm/local-master's file system (java.nio sets the permissions Hadoop's own forks `chmod` for): every
    file a checkpoint or a Delta write creates gets the mode Hadoop asks for, bit for bit; a sticky bit goes Hadoop's
    way."""
    import os
    import stat

    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == "isrwatch.hadoop.NioLocalFileSystem"
    assert fs.getRawFileSystem().getClass().getName() == "isrwatch.hadoop.NioLocalFileSystem$Raw"
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission
    path = jvm.org.apache.hadoop.fs.Path

    def mode(p: Path) -> int:
        return stat.S_IMODE(os.stat(p).st_mode)

    written = tmp_path / "f"
    out = fs.create(path(str(written)), permission.createImmutable(0o604), True, 4096, 1, 1 << 20, None)
    out.write(bytearray(b"x"))
    out.close()
    umask = permission.getUMask(conf).toShort()  # Hadoop's (fs.permissions.umask-mode), not the process's
    assert written.read_bytes() == b"x" and mode(written) == 0o604 & ~umask
    for bits in (0o640, 0o751, 0o000, 0o777):
        fs.setPermission(path(str(written)), permission.createImmutable(bits))
        assert mode(written) == bits
    assert fs.mkdirs(path(str(tmp_path / "d" / "e")), permission.createImmutable(0o750))
    assert mode(tmp_path / "d" / "e") == 0o750 & ~umask
    fs.setPermission(path(str(tmp_path / "d")), permission.createImmutable(0o1777))
    assert stat.S_IMODE(os.stat(tmp_path / "d").st_mode) == 0o1777

