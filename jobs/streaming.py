"""What the gold streaming jobs (posture, slo) share: flags, settings overrides, the union query, the wait.

Each job reads a few Delta tables as one streaming union (so one micro-batch id orders everything),
hands every micro-batch to a driver-side evaluator (a foreachBatch callable), and writes gold with
app-transaction idempotency (isrwatch/delta_io.write_once), so a micro-batch replayed after a crash
changes nothing.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from pyspark.errors import StreamingQueryException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from foundation.delta_io import AppVersions
from foundation.logs import configure, logger
from foundation.settings import JobSettings, PipelineSettings, load_settings, parse_spark_conf, spark_interval
from jobs import driver_signals

log = logger("jobs")


T = TypeVar("T")


class Started(Protocol):
    """A foreachBatch function that learns its query's id once the query started."""

    query_id: str | None
    started: threading.Event


class Evaluator(Started, Protocol):
    versions: AppVersions

    def __call__(self, batch: DataFrame, batch_id: int) -> None: ...


def add_common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", default=None, help="pipeline settings YAML (default conf/pipeline.yaml)")
    p.add_argument("--lakehouse", default=None, help="lakehouse root (overrides the config)")
    p.add_argument("--checkpoints", default=None, help="checkpoint root (default <lakehouse>/_checkpoints)")
    p.add_argument("--trigger", choices=["live", "available-now"], default=None)
    p.add_argument("--trigger-interval", default=None, help="live micro-batch interval, e.g. '1 second'")
    p.add_argument("--max-files-per-trigger", type=int, default=None, help="cap a micro-batch at N files per table")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting (repeatable)")
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's and the JVM's own log lines (Spark's default: WARN and up) and py4j's")


def load_job_settings(args: argparse.Namespace, section: str, extra: dict[str, Any] | None = None) -> PipelineSettings:
    settings = load_settings(args.config, {
        "lakehouse": args.lakehouse, "checkpoints": args.checkpoints, f"{section}.trigger": args.trigger,
        f"{section}.trigger_interval": args.trigger_interval,
        f"{section}.max_files_per_trigger": args.max_files_per_trigger, **(extra or {}),
    })
    settings.spark.update(parse_spark_conf(args.conf))
    return settings


def union_stream(spark: SparkSession, tables: dict[str, tuple[str, Sequence[str | Column]]],
                 max_files: int) -> DataFrame:
    """One streaming DataFrame over several Delta tables: name -> (path, columns), tagged in `_source`."""
    frames = [spark.readStream.format("delta").option("maxFilesPerTrigger", max_files).load(path)
              .select(*cols).withColumn("_source", F.lit(name)) for name, (path, cols) in tables.items()]
    union = frames[0]
    for f in frames[1:]:
        union = union.unionByName(f, allowMissingColumns=True)
    return union


def start_query(stream: DataFrame, name: str, evaluator: Evaluator, job: JobSettings,
                settings: PipelineSettings) -> StreamingQuery:
    writer = (stream.writeStream.queryName(name).foreachBatch(evaluator)
              .option("checkpointLocation", f"{settings.checkpoint_root.rstrip('/')}/{name}"))
    writer = (writer.trigger(availableNow=True) if job.trigger == "available-now"
              else writer.trigger(processingTime=spark_interval(job.trigger_interval)))
    query = writer.start()
    evaluator.query_id = str(query.id)  # kept in the checkpoint: the same after a restart
    evaluator.versions = AppVersions(f"isrwatch-{name}/{query.id}")  # the app id of the job's idempotent writes
    evaluator.started.set()
    return query


def run_job(job: str, load: Callable[[], tuple[PipelineSettings, T]], errors: tuple[type[Exception], ...],
            start: Callable[[SparkSession, PipelineSettings, T], tuple[StreamingQuery, Any]], *,
            verbose: bool = False) -> int:
    """A gold job's main: settings (exit 2 on `errors`), the session (quiet unless `verbose`), the query (exit 2
    when its tables are missing), then wait and print the evaluator's stats."""
    from foundation.spark import build_spark_session

    configure(verbose)
    try:
        settings, extra = load()
    except errors as e:
        log.error(f"{job}: {e}")
        return 2
    spark = build_spark_session(f"isrwatch-{job}", conf=settings.spark, verbose=verbose,
                                lakehouse=settings.lakehouse)
    with driver_signals.installed():
        try:
            query, evaluator = start(spark, settings, extra)
        except FileNotFoundError as e:
            log.error(f"{job}: {e}")
            return 2
        began = time.monotonic()
        return await_job(job, query, lambda: f"{evaluator.stats.describe()}; {time.monotonic() - began:.0f} s")


def await_job(name: str, query: StreamingQuery, summary: Callable[[], str]) -> int:
    """Wait for the query (available-now ends by itself; Ctrl-C stops a live one); print the outcome."""
    if await_query(query):
        log.info(f"{name}: stopped; a restart resumes where this left off")
        return 130
    error = query.exception()
    if error is not None:
        log.error(f"{name}: FAILED: {error}")
    log.error(f"{name}: {summary()}")
    return 1 if error is not None else 0



def await_query(query: StreamingQuery, stop: Callable[[], None] | None = None,
                beside: Callable[[], StreamingQuery | None] = lambda: None) -> bool:
    """Wait for `query` to end, for the query `beside` it to end (validate's alert lane), or for a stop signal
    (jobs/driver_signals.py), then stop it between micro-batches (`stop`, default `stop_between_batches`); True
    when stopped by a signal. A query that fails returns False as one that finishes: its `exception()` says which
    (awaitTermination raises it, which would skip the caller's restart of a failed alert lane)."""
    try:
        while not query.awaitTermination(1):
            other = beside()
            if other is not None and not other.isActive:
                return False
            if driver_signals.stop_requested.is_set():
                (stop or (lambda: stop_between_batches(query)))()
                return True
    except KeyboardInterrupt:  # a second signal: at once
        query.stop()
        return True
    except StreamingQueryException:
        return False
    return False


def stop_between_batches(query: StreamingQuery, timeout_s: float = 300.0) -> None:
    """Stop `query` once the micro-batch it is running, if any, has finished (up to `timeout_s`; a second
    interrupt stops it at once). A batch stopped midway is replayed at the next start, its writes skipped
    where they were committed (exactly once either way); letting it finish saves the replay. A query behind
    starts its next batch at once: stopping it within a poll of that start interrupts it before it writes. An idle
    query's trigger is active only while it looks for new data (every 10 ms at a 0-second trigger): no batch
    follows, so it is stopped once that look ends."""
    deadline = time.monotonic() + timeout_s
    try:
        if query.isActive and query.status["isTriggerActive"]:
            running_after = _last_batch(query)
            while (query.isActive and query.status["isTriggerActive"] and _last_batch(query) == running_after
                   and time.monotonic() < deadline):
                time.sleep(0.02)
    except KeyboardInterrupt:
        pass
    query.stop()


def _last_batch(query: StreamingQuery) -> int | None:
    """The id of the query's last completed micro-batch (None before the first)."""
    progress = query.lastProgress
    return None if progress is None else int(progress["batchId"])


def wait_started(evaluator: Started, job: str) -> None:
    """foreachBatch can run before start() returns: wait until the query id (the app id's key) is known."""
    if not evaluator.started.wait(120) or evaluator.query_id is None:
        raise RuntimeError(f"{job}: query id not set")
