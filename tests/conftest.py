"""One SparkSession per test session; a fresh lakehouse per test."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Under pytest-xdist the worker's __main__ has neither __spec__ nor __file__, which pyspark.sql.connect
# (imported by Great Expectations) takes for a doctest run without Spark Connect's dependencies, and
# answers with sys.exit(0). A worker is no doctest run: give its __main__ a file, a real one that does nothing,
# since a process spawned from the worker (validate's Great Expectations child) runs its parent's main file first.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = str(Path(__file__).with_name("__init__.py"))


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    from foundation.spark import build_spark_session

    session = build_spark_session("isrwatch-tests", master="local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def silver_lake(tmp_path_factory: pytest.TempPathFactory, spark: object) -> str:
    """Three emulated clusters validated into silver, with posture and SLO gold tables (tests/lakes.py)."""
    from tests.lakes import build_silver_lake

    return build_silver_lake(tmp_path_factory, spark)


@pytest.fixture
def lakehouse(tmp_path: Path) -> str:
    return str(tmp_path / "lakehouse")


# make test runs on two xdist workers with --dist loadgroup: each test file is a group (its module fixtures are
# built once), and every test on the session's `silver_lake` joins one group (built once, not once per worker).
# Groups start heaviest first (the longest in make test's --durations), so the last one to start is short and
# neither worker idles while the other finishes a long file.
HEAVIEST_FIRST = (
    "silver_lake",
    "tests/pipeline/test_validate.py",
    "tests/pipeline/test_exactly_once.py",
    "tests/test_object_store.py",
    "tests/collector/test_collect_real_kafka.py",
    "tests/test_pipeline_cli.py",
    "tests/alerts/test_alert_lane_killed.py",
    "tests/alerts/test_isr_thrash_end_to_end.py",
    "tests/emulator/test_determinism_and_sweep.py",
    "tests/collector/test_canary.py",
    "tests/collector/test_exporter_dialects_real.py",
)


# tryfirst: xdist's own hook (on each worker) turns the xdist_group marks into node-id suffixes, so they must be
# on the items before it runs; after it, every test is its own group and a file's module fixtures, and the
# session's silver_lake, are built on both workers.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    on_silver_lake = {file_of(i) for i in items if "silver_lake" in getattr(i, "fixturenames", ())}
    group = {id(i): "silver_lake" if file_of(i) in on_silver_lake else file_of(i) for i in items}
    rank = {name: n for n, name in enumerate(HEAVIEST_FIRST)}
    if config.pluginmanager.hasplugin("xdist"):   # its marker is unknown to a run with -p no:xdist
        for item in items:
            item.add_marker(pytest.mark.xdist_group(name=group[id(item)]))
    items.sort(key=lambda item: rank.get(group[id(item)], len(rank)))   # stable: files stay in order and whole


def pytest_collection_finish(session: pytest.Session) -> None:
    # pytest 9.2 derives node ids from a field xdist 3.8 does not set: the groups silently vanish (each test its
    # own group), and the suite's time with them. Refuse to run so rather than find out from the clock.
    if session.config.getoption("loadgroup", default=False) and session.items \
            and "@" not in session.items[0].nodeid:
        raise pytest.UsageError("xdist --dist loadgroup did not group the tests (pytest and pytest-xdist versions "
                                "that do not work together?): see pyproject.toml's pins")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """An S3-compatible store on loopback (testing/s3proxy.py), one per test module that asks."""
    from testing.s3proxy import S3Proxy

    with S3Proxy(tmp_path_factory.mktemp("s3proxy")) as server:
        yield server


@pytest.fixture
def on_store(s3: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """This process pointed at the store the way a user points theirs: the AWS SDK's variables."""
    from foundation import object_store

    for key, value in s3.environment.items():
        monkeypatch.setenv(key, value)
    object_store.use(None)
    yield s3
    object_store.use(None)
