"""`isrwatch pipeline run`: the streaming jobs in one driver, with a status line per query."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from isrwatch.settings import SettingsError

JOBS = ("validate",)


def add_pipeline_parser(sub: Any) -> None:
    p = sub.add_parser("pipeline", help="run the streaming jobs (validate, …) in one local driver")
    psub = p.add_subparsers(dest="pipeline_command", required=True)
    run = psub.add_parser("run", help="start the streaming jobs; Ctrl-C stops them cleanly",
                          formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run.add_argument("--jobs", default="validate", help=f"comma-separated jobs: {', '.join(JOBS)}")
    run.add_argument("--config", default=None, help="pipeline settings YAML (default conf/pipeline.yaml)")
    run.add_argument("--lakehouse", default=None, help="lakehouse root (overrides the config)")
    run.add_argument("--trigger", choices=["live", "available-now"], default=None,
                     help="live: micro-batches every trigger_interval; available-now: catch up, then stop")
    run.add_argument("--tables", default=None, help="bronze tables to validate (default: the config's)")
    run.add_argument("--duration", type=float, default=None, help="live: stop after this many seconds")
    run.add_argument("--stop-when-idle", type=float, default=None, metavar="SECONDS",
                     help="live: stop once every query has caught up and no bronze table changed for SECONDS")
    run.add_argument("--status-every", type=float, default=5.0, help="seconds between status lines")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark setting (repeatable)")


def _reservoir_version(offset: Any) -> int | None:
    if isinstance(offset, str):
        offset = json.loads(offset)
    return int(offset["reservoirVersion"]) if isinstance(offset, dict) and "reservoirVersion" in offset else None


def _bronze_version(path: str) -> int | None:
    from deltalake import DeltaTable

    try:
        return int(DeltaTable(path).version())
    except Exception:  # a remote root without credentials for delta-rs: lag is then unknown
        return None


def versions_behind(query: Any, bronze_path: str) -> int | None:
    """Bronze versions the query has not processed yet (None while unknown)."""
    sources = (query.lastProgress or {}).get("sources") or [{}]
    done = _reservoir_version(sources[0].get("endOffset"))
    latest = _bronze_version(bronze_path)
    # The Delta source's offset names the next version to read once a version is fully consumed.
    return None if done is None or latest is None else max(0, latest - done + 1)


def status_line(name: str, query: Any, stats: Any, bronze_path: str) -> str:
    progress = query.lastProgress or {}
    batch_ms = (progress.get("durationMs") or {}).get("triggerExecution")
    behind = versions_behind(query, bronze_path)
    lag = "?" if behind is None else str(behind)
    state = "active" if query.isActive else ("failed" if query.exception() else "stopped")
    if stats.batch_id < 0 and query.isActive:
        return f"  validate {name:<18} first micro-batch running (Spark compiles its plan once per query)"
    return (f"  validate {name:<18} {state:<7} batch {stats.batch_id:>5}  in {stats.rows_in:>7}  "
            f"silver {stats.rows_valid:>7}  quarantine {stats.rows_quarantined:>5}  "
            f"batch {batch_ms if batch_ms is not None else '-':>6} ms  lag {lag} versions")


def main_pipeline(args: argparse.Namespace) -> int:
    from isrwatch.spark import build_spark_session
    from jobs.validate import SchemaDriftError, build_parser, settings_from_args, start_validation

    jobs = [j for j in args.jobs.split(",") if j]
    unknown = [j for j in jobs if j not in JOBS]
    if unknown or not jobs:
        print(f"isrwatch pipeline: unknown jobs {unknown or jobs}; known: {', '.join(JOBS)}", file=sys.stderr)
        return 2
    job_args = ["--trigger", args.trigger] if args.trigger else []
    for flag, value in (("--config", args.config), ("--lakehouse", args.lakehouse), ("--tables", args.tables)):
        if value:
            job_args += [flag, value]
    for item in args.conf:
        job_args += ["--conf", item]
    try:
        settings = settings_from_args(build_parser().parse_args(job_args))
    except SettingsError as e:
        print(f"isrwatch pipeline: {e}", file=sys.stderr)
        return 2
    spark = build_spark_session("isrwatch-pipeline", conf=settings.spark)
    try:
        running = start_validation(spark, settings)
    except (SchemaDriftError, FileNotFoundError) as e:
        print(f"isrwatch pipeline: {e}", file=sys.stderr)
        return 2
    print(f"isrwatch pipeline: {len(running.queries)} validate queries, trigger {settings.validate_.trigger}, "
          f"lakehouse {settings.lakehouse}", file=sys.stderr)
    from schemas.bronze import BRONZE_TABLES

    paths = {td.name: td.path(settings.lakehouse) for td in BRONZE_TABLES}
    started = time.monotonic()
    next_status = started + args.status_every
    versions: dict[str, int | None] = {}
    changed_at = started
    try:
        while any(q.isActive for q in running.queries.values()):
            if args.duration is not None and time.monotonic() - started >= args.duration:
                break
            if args.stop_when_idle is not None:
                now_versions = {n: _bronze_version(paths[n]) for n in running.queries}
                if now_versions != versions:
                    versions, changed_at = now_versions, time.monotonic()
                elif (time.monotonic() - changed_at >= args.stop_when_idle
                      and all(versions_behind(q, paths[n]) == 0 for n, q in running.queries.items())):
                    print("isrwatch pipeline: caught up and bronze idle; stopping", file=sys.stderr)
                    break
            time.sleep(0.2)
            if time.monotonic() >= next_status:
                next_status += args.status_every
                for name, q in running.queries.items():
                    print(status_line(name, q, running.validators[name].stats, paths[name]), file=sys.stderr)
    except KeyboardInterrupt:
        print("isrwatch pipeline: stopping (Ctrl-C)", file=sys.stderr)
    for q in running.queries.values():
        q.stop()  # an interrupted batch is replayed on restart; its writes are idempotent
    failed = [n for n, q in running.queries.items() if q.exception() is not None]
    for name, v in running.validators.items():
        s = v.stats
        print(f"isrwatch pipeline: validate {name}: {s.total_in} rows in, {s.total_valid} to silver, "
              f"{s.total_quarantined} quarantined", file=sys.stderr)
    for name in failed:
        print(f"isrwatch pipeline: validate {name} FAILED: {str(running.queries[name].exception()).splitlines()[0]}",
              file=sys.stderr)
    print(f"isrwatch pipeline: {'FAILED' if failed else 'done'} after {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    return 1 if failed else 0
