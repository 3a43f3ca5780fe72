"""`isrwatch pipeline run`: the streaming jobs in one driver, with a status line per query."""

from __future__ import annotations

import argparse
import functools
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from foundation.logs import logger
from foundation.settings import SettingsError
from isrwatch.arguments import lakehouse_root
from jobs.query_restarts import Restarts, failure_reason

log = logger("pipeline")


JOBS = ("validate", "posture", "slo", "alerts")


def add_pipeline_parser(sub: Any) -> None:
    p = sub.add_parser("pipeline", help="run the streaming jobs (validate, posture, slo, alerts) in one local driver")
    psub = p.add_subparsers(dest="pipeline_command", required=True)
    run = psub.add_parser("run", help="start the streaming jobs; Ctrl-C stops them cleanly",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated jobs: {', '.join(JOBS)}")
    run.add_argument("--config", default=None, help="pipeline settings YAML (default conf/pipeline.yaml)")
    run.add_argument("--lakehouse", type=lakehouse_root, default=None, help="lakehouse root (overrides the config)")
    run.add_argument("--trigger", choices=["live", "available-now"], default=None,
                     help="every job: live (micro-batches every trigger_interval) or available-now (catch up, stop)")
    run.add_argument("--tables", default=None, help="bronze tables to validate (default: the config's)")
    run.add_argument("--rules", default=None, help="alert rules and receivers (default conf/alerts.yaml)")
    run.add_argument("--slos", default=None, help="SLO specs (default conf/slos.yaml)")
    run.add_argument("--no-webhooks", action="store_true", help="evaluate alerts, deliver nothing")
    run.add_argument("--duration", type=float, default=None, help="live: stop after this many seconds")
    run.add_argument("--stop-when-idle", type=float, default=None, metavar="SECONDS",
                     help="live: stop once every query has caught up and no table it reads changed for SECONDS")
    run.add_argument("--status-every", type=float, default=5.0, help="seconds between status lines")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting (repeatable)")
    run.add_argument("--progress-log", default=None, metavar="FILE",
                     help="append every micro-batch's progress (Spark's phases, in ms) to FILE as JSON lines")
    run.add_argument("--verbose", action="store_true",
                     help="show Spark's and the JVM's own log lines (Spark's default: WARN and up) and py4j's")


def _reservoir_version(offset: Any) -> int | None:
    if isinstance(offset, str):
        offset = json.loads(offset)
    return int(offset["reservoirVersion"]) if isinstance(offset, dict) and "reservoirVersion" in offset else None


def table_version(path: str) -> int | None:
    from deltalake import DeltaTable

    from foundation.object_store import storage_options

    try:
        return int(DeltaTable(path, storage_options=storage_options(path)).version())
    except Exception:  # a remote root delta-rs cannot reach (credentials): lag is then unknown
        return None


_DELTA_SOURCE = re.compile(r"DeltaSource\[(.*)\]")


def _local(path: str) -> str:
    return path[len("file:"):] if path.startswith("file:") else path


def versions_behind(query: Any) -> int | None:
    """Table versions the query has not processed yet, over all its Delta sources (None while unknown)."""
    sources = (query.lastProgress or {}).get("sources") or []
    if not sources:
        return None
    behind = 0
    for source in sources:
        done = _reservoir_version(source.get("endOffset"))
        m = _DELTA_SOURCE.match(source.get("description", ""))
        latest = table_version(_local(m.group(1))) if m else None
        if done is None or latest is None:
            return None
        # The Delta source's offset names the next version to read once a version is fully consumed.
        behind += max(0, latest - done + 1)
    return behind


@dataclass
class Job:
    """One streaming query of the pipeline, and how to describe its progress."""

    name: str
    query: Any
    stats: Any
    paths: tuple[str, ...]     # the tables it reads (idle detection)
    finish: Any = None         # called once its query stopped (validate: GE's batches still waiting)
    restart: Any = None        # after a failure: the query started again from its checkpoint, as a new Job

    def status_line(self) -> str:
        progress = self.query.lastProgress or {}
        batch_ms = (progress.get("durationMs") or {}).get("triggerExecution")
        behind = versions_behind(self.query)
        state = "active" if self.query.isActive else ("failed" if self.query.exception() else "stopped")
        if self.stats.batch_id < 0 and self.query.isActive:
            return f"  {self.name:<27} first micro-batch running (Spark compiles its plan once per query)"
        return (f"  {self.name:<27} {state:<7} batch {self.stats.batch_id:>5}  {self.stats.describe():<46} "
                f"batch {batch_ms if batch_ms is not None else '-':>6} ms  lag {'?' if behind is None else behind}"
                " versions")


def build_settings(args: argparse.Namespace, jobs: list[str]) -> Any:
    from foundation.settings import load_settings, parse_spark_conf

    overrides: dict[str, Any] = {"lakehouse": args.lakehouse, "alerts.rules": args.rules, "slo.specs": args.slos,
                                 "alerts.webhooks": False if args.no_webhooks else None}
    if args.tables:
        overrides["validate.tables"] = [t for t in args.tables.split(",") if t]
    for job in jobs:
        overrides[f"{job}.trigger"] = args.trigger
    settings = load_settings(args.config, overrides)
    settings.spark.update(parse_spark_conf(args.conf))
    return settings


def _settle(jobs: list[Job], job_settings: Any) -> None:
    """available-now: a stage must finish before the next reads its output (live stages just run on)."""
    if job_settings.trigger == "available-now":
        for job in jobs:
            job.query.awaitTermination()


def start_jobs(spark: Any, settings: Any, jobs: list[str], progress: Any = None) -> tuple[list[Job], Any]:
    """Start the jobs in pipeline order; returns them and the alert webhook dispatcher (if any). `progress`, a
    jobs/progress_log.ProgressLog, also gets validate's steps per batch."""
    settings.use_storage()
    from schemas.bronze import BRONZE_TABLES
    from schemas.silver import SILVER_TABLES

    lake, started, dispatcher = settings.lakehouse, [], None
    silver = {t: td.path(lake) for t, td in SILVER_TABLES.items()}
    if "validate" in jobs:
        from jobs.validate import start_validation

        on_steps = None if progress is None else functools.partial(progress.steps, "validate")
        lane_steps = None if progress is None else functools.partial(progress.steps, "alert_lane")
        running = start_validation(spark, settings, on_steps=on_steps, lane_steps=lane_steps)
        bronze = {td.name: td.path(lake) for td in BRONZE_TABLES}
        tables = tuple(bronze[td.name] for td in running.validator.tables)
        started.append(Job("validate", running.query, running.validator.stats, tables, running.finish))
        if running.lane is not None:
            lane_tables = tuple(bronze[td.name] for td in running.lane.batches.tables)

            def lane_job(lane: Any) -> Job:
                return Job("alert_lane", lane.query, lane.stage.stats, lane_tables,
                           restart=lambda: lane_job(running.restart_lane()))

            started.append(lane_job(running.lane))
        _settle(started, settings.validate_)
    if "posture" in jobs:
        from jobs.posture import start_posture

        query, ev = start_posture(spark, settings)
        started.append(Job("posture", query, ev.stats, (silver["topic_configs"], silver["runs"])))
        _settle(started[-1:], settings.posture)
    if "slo" in jobs:
        from jobs.slo import start_slo

        query, slo_ev = start_slo(spark, settings)
        started.append(Job("slo", query, slo_ev.stats, (silver["partition_state"], silver["ack_ledger"])))
        _settle(started[-1:], settings.slo)
    if "alerts" in jobs:
        from jobs.alerts import start_alerts
        from schemas.gold_durability import POSTURE_HISTORY, SLO_STATUS

        alerts = start_alerts(spark, settings)
        dispatcher = alerts.dispatcher
        gold = (POSTURE_HISTORY.path(lake), SLO_STATUS.path(lake))
        started.append(Job("alerts", alerts.query, alerts.evaluator.stats, (*silver.values(), *gold)))
    return started, dispatcher


def main_pipeline(args: argparse.Namespace) -> int:
    from foundation.spark import build_spark_session
    from jobs import driver_signals
    from pipelines.great_expectations_check import import_in_background

    jobs = [j for j in args.jobs.split(",") if j]
    unknown = [j for j in jobs if j not in JOBS]
    if unknown or not jobs:
        log.error(f"isrwatch pipeline: unknown jobs {unknown or jobs}; known: {', '.join(JOBS)}")
        return 2
    try:
        settings = build_settings(args, jobs)
    except SettingsError as e:
        log.error(f"isrwatch pipeline: {e}")
        return 2
    if "validate" in jobs:
        import_in_background()
    spark = build_spark_session("isrwatch-pipeline", conf=settings.spark, verbose=args.verbose,
                                lakehouse=settings.lakehouse)
    listener = None
    if args.progress_log:
        from jobs.progress_log import ProgressLog

        listener = ProgressLog(args.progress_log)
        spark.streams.addListener(listener)
    try:
        with driver_signals.installed():   # SIGTERM as Ctrl-C: a stop between micro-batches (a second one: at once)
            return _run(spark, settings, jobs, args, listener)
    finally:
        if listener is not None:   # the session may outlive this call (tests share one)
            # Progress events reach listeners from Spark's listener bus, behind the queries: the last batches'
            # are still queued when the queries have stopped. Wait for them, so the log is whole.
            spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(10_000)
            spark.streams.removeListener(listener)


def _run(spark: Any, settings: Any, jobs: list[str], args: argparse.Namespace, progress: Any) -> int:
    from jobs.delta_tables import SchemaDriftError
    from jobs.streaming import stop_between_batches
    from pipelines.alert_rules import AlertConfigError
    from pipelines.slo_spec import SloConfigError

    try:
        running, dispatcher = start_jobs(spark, settings, jobs, progress)
    except (SchemaDriftError, FileNotFoundError, AlertConfigError, SloConfigError) as e:
        log.error(f"isrwatch pipeline: {e}")
        return 2
    log.info(f"isrwatch pipeline: {len(running)} queries ({', '.join(j.name for j in running)}), lakehouse "
             f"{settings.lakehouse}")
    started = time.monotonic()
    notices = None
    if settings.validate_.trigger == "live":   # an available-now run is a catch-up: behind until it ends, by design
        from lakehouse_read.freshness import Freshness

        notices = Freshness(settings.lakehouse, settings.checkpoint_root).warnings
    outcome = _watch(running, args, started, notices=notices)
    try:
        for job in running:
            stop_between_batches(job.query)  # a batch cut short is replayed on restart; its writes are idempotent
    except KeyboardInterrupt:  # a second signal: at once
        for job in running:
            job.query.stop()
    for job in running:
        if job.finish is not None:
            job.finish()
    if dispatcher is not None:
        dispatcher.wait_idle(30)
        dispatcher.stop()
    failed = [j for j in running if j.query.exception() is not None]
    for job in running:
        log.info(f"isrwatch pipeline: {job.name}: {job.stats.describe()}")
    for job in failed:
        log.error(f"isrwatch pipeline: {job.name} FAILED: {failure_reason(job.query.exception())}")
    log.error(f"isrwatch pipeline: {'FAILED' if failed else outcome} after {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


def _watch(running: list[Job], args: argparse.Namespace, started: float, restarts: Restarts | None = None,
           notices: Callable[[], list[str]] | None = None) -> str:
    """Print status lines until the queries end, the duration passes, everything is idle, or Ctrl-C; with each,
    a warning per `notices` (a query behind bronze). A query that can be restarted (the alert lane) and fails is
    started again, within `Restarts`; `running` then holds the new one. Any other failure ends the watch."""
    next_status = started + args.status_every
    paths = sorted({p for j in running for p in j.paths})
    versions: dict[str, int | None] = {}
    changed_at = started
    restarts = restarts or Restarts()
    from jobs.driver_signals import stop_requested

    try:
        while any(j.query.isActive for j in running):
            # One query down (the alert lane, say) leaves the others running blind to it: stop them all and exit
            # non-zero, so that whatever supervises the pipeline restarts it from its checkpoints.
            for job in [j for j in running if not j.query.isActive and j.query.exception() is not None]:
                error = failure_reason(job.query.exception())
                if job.restart is None or not restarts.allow(job.name, time.monotonic()):
                    log.error(f"isrwatch pipeline: {job.name} failed ({error}); stopping the other queries")
                    return "failed"
                log.error(f"isrwatch pipeline: {job.name} failed ({error}); restarting it from its checkpoint "
                          f"({restarts.describe(job.name)})")
                time.sleep(restarts.wait_s(job.name))
                running[running.index(job)] = job.restart()
            if stop_requested.is_set():
                log.info("isrwatch pipeline: stopping (signal)")
                return "stopped (signal)"
            if args.duration is not None and time.monotonic() - started >= args.duration:
                return "stopped after --duration"
            if args.stop_when_idle is not None:
                now = {p: table_version(p) for p in paths}
                if now != versions:
                    versions, changed_at = now, time.monotonic()
                elif (time.monotonic() - changed_at >= args.stop_when_idle
                      and all(versions_behind(j.query) == 0 for j in running)):
                    log.info("isrwatch pipeline: caught up and every table idle; stopping")
                    return "done"
            time.sleep(0.2)
            if time.monotonic() >= next_status:
                next_status += args.status_every
                for job in running:
                    log.info(job.status_line())
                for notice in notices() if notices is not None else ():
                    log.warning(f"isrwatch pipeline: {notice}")
    except KeyboardInterrupt:
        log.info("isrwatch pipeline: stopping (Ctrl-C)")
        return "stopped (Ctrl-C)"
    return "done"
