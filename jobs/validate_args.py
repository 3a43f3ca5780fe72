"""validate's command line: its arguments, and the settings they override (conf/pipeline.yaml's `validate.`)."""

from __future__ import annotations

import argparse

from foundation.settings import PipelineSettings, load_settings, parse_spark_conf, seconds

DESCRIPTION = "Streaming validation: bronze Delta tables -> silver / quarantine / silver.dq_runs, exactly once."


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/validate.py", description=DESCRIPTION,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--config", default=None, help="pipeline settings YAML (default conf/pipeline.yaml)")
    p.add_argument("--lakehouse", default=None, help="lakehouse root: path or Hadoop URI (overrides the config)")
    p.add_argument("--checkpoints", default=None, help="checkpoint root (default <lakehouse>/_checkpoints)")
    p.add_argument("--tables", default=None, help="comma-separated bronze tables (default: all)")
    p.add_argument("--trigger", choices=["live", "available-now"], default=None)
    p.add_argument("--trigger-interval", default=None, help="live micro-batch interval, e.g. '1 second'")
    p.add_argument("--driver-max-rows", type=int, default=None,
                   help="most rows of a micro-batch checked on the driver (a larger one goes to the executors)")
    p.add_argument("--max-files-per-trigger", type=int, default=None)
    p.add_argument("--wait-for-tables", type=float, default=None, help="seconds to wait for bronze tables")
    p.add_argument("--rules", default=None, help="alert rules and receivers (default conf/alerts.yaml): the alert "
                                                 "lane beside validate evaluates those on silver tables")
    p.add_argument("--no-webhooks", action="store_true", help="evaluate and record alerts, deliver nothing")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="Spark setting for a session this job builds (repeatable)")
    p.add_argument("--verbose", action="store_true",
                   help="show Spark's and the JVM's own log lines (Spark's default: WARN and up) and py4j's")
    return p


def settings_from_args(args: argparse.Namespace) -> PipelineSettings:
    spark_conf = parse_spark_conf(args.conf)
    settings = load_settings(args.config, {
        "lakehouse": args.lakehouse, "checkpoints": args.checkpoints,
        "validate.tables": args.tables.split(",") if args.tables else None,
        "validate.trigger": args.trigger, "validate.trigger_interval": args.trigger_interval,
        "validate.driver_max_rows": args.driver_max_rows,
        "validate.max_files_per_trigger": args.max_files_per_trigger,
        "validate.wait_for_tables": None if args.wait_for_tables is None else seconds(args.wait_for_tables),
        "alerts.rules": args.rules, "alerts.webhooks": False if args.no_webhooks else None,
    })
    settings.spark.update(spark_conf)
    return settings
