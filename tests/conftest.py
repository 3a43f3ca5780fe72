"""One SparkSession per test session; a fresh lakehouse per test."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from foundation.kill_points import DECLARED
from tests.kill_at import KILLS_FOLDER

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


def shared_lake(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> str:
    """A lakehouse built once per test run and shared, read-only, by every xdist worker: the first to ask builds it
    (`build(path)`) under a file lock while any other waits for it."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base   # the workers' common folder
    folder = root / f"shared-{name}"
    with FileLock(root / f"shared-{name}.lock"):
        if not (folder / "built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder / "lakehouse")
            (folder / "built").touch()
    return str(folder / "lakehouse")


@pytest.fixture(scope="session")
def silver_lake(tmp_path_factory: pytest.TempPathFactory, spark: object) -> str:
    """Three emulated clusters validated into silver, with posture and SLO gold tables (tests/lakes.py)."""
    from tests.lakes import build_silver_lake

    return shared_lake(tmp_path_factory, "silver_lake", lambda lake: build_silver_lake(lake, spark))


@pytest.fixture
def lakehouse(tmp_path: Path) -> str:
    return str(tmp_path / "lakehouse")


# make test runs on two xdist workers with --dist loadgroup: each test file is a group (its module fixtures are
# built once), and the files of tests/api one group (their package's `api_lake`, which writes, built once). The
# session's `silver_lake` is shared by both workers (`shared_lake`). Groups start heaviest first (the longest in make
# test's --durations), so the last one to start is short and neither worker idles while the other finishes a long
# file; the first one builds silver_lake, the second does not need it.
# tests/collector/conftest.py's collect_cluster, named after its first and heaviest file (HEAVIEST_FIRST ranks it).
COLLECT_CLUSTER_GROUP = "tests/collector/test_collect_real_kafka.py"
HEAVIEST_FIRST = (
    "tests/test_object_store.py",
    "tests/alerts/test_alerts_job.py",
    "tests/pipeline/test_exactly_once.py",
    "tests/alerts/test_alert_lane_killed.py",
    "tests/collector/test_canary_broker_faults.py",
    "api_lake",
    "tests/collector/test_collect_real_kafka.py",
    "tests/pipeline/test_validate.py",
    "tests/collector/test_collect_security.py",
    "tests/collector/test_canary.py",
    "tests/collector/test_exporter_dialects_real.py",
    "tests/alerts/test_alert_lane.py",
    "tests/test_pipeline_cli.py",
    "tests/alerts/test_isr_thrash_end_to_end.py",
    "tests/emulator/test_determinism_and_sweep.py",
)


# tryfirst: xdist's own hook (on each worker) turns the xdist_group marks into node-id suffixes, so they must be
# on the items before it runs; after it, every test is its own group and a file's module fixtures, and the
# session's silver_lake, are built on both workers.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def file_of(item: pytest.Item) -> str:
        return item.nodeid.split("::", 1)[0]

    def using(fixture: str) -> set[str]:
        return {file_of(i) for i in items if fixture in getattr(i, "fixturenames", ())}

    # Files that share a session or package fixture share a group: one worker builds it once.
    on_api_lake, on_collect_cluster = using("api_lake"), using("collect_cluster")
    group = {id(i): "api_lake" if file_of(i) in on_api_lake else
             COLLECT_CLUSTER_GROUP if file_of(i) in on_collect_cluster else file_of(i) for i in items}
    rank = {name: n for n, name in enumerate(HEAVIEST_FIRST)}
    for item in items:   # `-m s3`, `-m "not spark"` without marking every test that asks for the store or Spark
        fixtures = set(getattr(item, "fixturenames", ()))   # every fixture the test needs, directly or not
        if {"s3", "on_store"} & fixtures:
            item.add_marker(pytest.mark.s3)
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
        if "cluster_runs" in fixtures:   # the runs on a Spark standalone cluster, shared by the store's tests
            item.add_marker(pytest.mark.cluster)
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


def pytest_configure(config: pytest.Config) -> None:
    # One folder for the whole run, made by the controller (or the only process) before the workers start: every
    # process the tests start inherits it, and each real kill leaves its point there (tests/kill_at.py).
    if not hasattr(config, "workerinput") and KILLS_FOLDER not in os.environ:
        os.environ[KILLS_FOLDER] = tempfile.mkdtemp(prefix="isrwatch-test-kills-")
        config.add_cleanup(lambda: shutil.rmtree(os.environ.pop(KILLS_FOLDER), ignore_errors=True))


def _whole_suite(config: pytest.Config) -> bool:
    """make test's run: every test of tests/ but the slow ones, none deselected by name."""
    tests = (config.rootpath / "tests").resolve()
    return (not config.option.keyword and config.option.markexpr in ("not slow", "slow or not slow")
            and all(Path(config.rootpath, a).resolve() == tests for a in config.args))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run of the whole suite fails when a declared kill point (foundation/kill_points.py) was not reached by a
    real SIGKILL in any test: each one guards a crash the pipeline must survive."""
    config = session.config
    if hasattr(config, "workerinput") or exitstatus != 0 or not _whole_suite(config):
        return
    folder = Path(os.environ[KILLS_FOLDER])
    reached = {p.name for p in folder.iterdir()}
    missing = [f"{job}:{point}" for job, points in DECLARED.items() for point in points
               if f"{job}:{point}" not in reached and not (job == "validate" and any(
                   name.endswith(f":{point}") and name.split(":")[0] not in DECLARED for name in reached))]
    if missing:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        message = f"kill points no test reached with a SIGKILL: {', '.join(missing)} (foundation/kill_points.py)"
        if reporter is not None:
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
