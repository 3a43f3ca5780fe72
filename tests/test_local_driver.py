"""A local driver's start (Makefile, foundation/spark.py): its Python workers import pyspark from the venv, whose
bytecode is cached, not from pyspark's zip; its JVM maps the archive of the classes a local driver loads."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from foundation.spark import CLASS_ARCHIVE

pytestmark = pytest.mark.spark


def test_a_python_worker_imports_pyspark_from_the_venv(spark: Any) -> None:
    paths = spark.sparkContext.parallelize(range(4), 2).map(lambda _: __import__("pyspark").__file__).collect()
    (path,) = set(paths)
    assert path.startswith(sys.prefix) and ".zip" not in path, path


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the JVM's memory map from /proc")
def test_the_driver_jvm_maps_the_class_archive_make_jars_built(spark: Any) -> None:
    assert CLASS_ARCHIVE.exists(), "make jars builds it"
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    assert str(CLASS_ARCHIVE) in Path(f"/proc/{pid}/maps").read_text()
