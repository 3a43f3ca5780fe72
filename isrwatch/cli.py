"""The `isrwatch` command line."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from broker_emulator.errors import InvariantViolation, ScenarioError
from broker_emulator.scenario import load_scenario
from foundation.bronze_sink import SinkSchemaError
from foundation.logs import configure, logger
from isrwatch.arguments import duration_ms_argument, lakehouse_root

log = logger("cli")


def _pace(value: str) -> float | None:
    if value == "fast":
        return None
    if value == "live":
        return 1.0
    try:
        factor = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--pace must be fast, live or a number, got {value!r}") from None
    if factor <= 0:
        raise argparse.ArgumentTypeError(f"--pace factor must be > 0, got {value!r}")
    return factor


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="isrwatch", description="Kafka durability analytics.")
    sub = parser.add_subparsers(dest="command", required=True)
    em = sub.add_parser("emulate", help="run the deterministic Kafka replication emulator on a scenario",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    em.add_argument("--scenario", required=True, help="scenario YAML file (see conf/scenarios/)")
    em.add_argument("--seed", type=int, default=None, help="override the scenario's seed")
    em.add_argument("--duration", type=duration_ms_argument, default=None,
                    help="override the scenario's duration (e.g. 10m)")
    em.add_argument("--pace", type=_pace, default=None, metavar="fast|live|FACTOR",
                    help="fast = as fast as possible; live = virtual time follows wall time; FACTOR = x wall time")
    out = em.add_mutually_exclusive_group()
    out.add_argument("--lakehouse", type=lakehouse_root, default="lakehouse",
                     help="lakehouse root for the bronze Delta tables")
    out.add_argument("--no-lakehouse", action="store_true", help="simulate only, write no tables")
    em.add_argument("--summary-json", default=None, help="also write the run summary to this JSON file")
    em.add_argument("--quiet", action="store_true", help="no progress line")
    from isrwatch.pipeline_cli import add_pipeline_parser

    add_pipeline_parser(sub)
    from isrwatch.sql import add_sql_parser

    add_sql_parser(sub)
    from isrwatch.webhook_receiver import add_receiver_parser

    add_receiver_parser(sub)
    from isrwatch.serve_cli import add_serve_parsers

    add_serve_parsers(sub)
    from isrwatch.collect_cli import add_collect_parser

    add_collect_parser(sub)
    from isrwatch.submit_cli import add_submit_parser

    add_submit_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure()
    if args.command == "emulate":
        return _emulate(args)
    if args.command == "sql":
        from isrwatch.sql import main_sql

        return main_sql(args)
    if args.command == "pipeline":
        from isrwatch.pipeline_cli import main_pipeline

        return main_pipeline(args)
    if args.command == "serve":
        from isrwatch.serve_cli import main_serve

        return main_serve(args)
    if args.command == "dashboards":
        from isrwatch.serve_cli import main_dashboards

        return main_dashboards(args)
    if args.command == "collect":
        from isrwatch.collect_cli import main_collect

        return main_collect(args)
    if args.command == "submit":
        from isrwatch.submit_cli import main_submit

        return main_submit(args)
    if args.command == "webhook-receiver":
        from isrwatch.webhook_receiver import main_receiver

        return main_receiver(args)
    return 2


def _emulate(args: argparse.Namespace) -> int:
    from broker_emulator.simulation import Simulation
    from broker_emulator.summary import format_summary

    try:
        scenario = load_scenario(args.scenario).with_overrides(seed=args.seed, duration_ms=args.duration)
    except ScenarioError as e:
        log.error(f"isrwatch: invalid scenario: {e}")
        return 2
    sink = None
    if not args.no_lakehouse:
        from foundation.bronze_sink import DeltaSink

        sink = DeltaSink(args.lakehouse, f"{scenario.name}-s{scenario.seed}")
    if args.pace is not None:
        # Live runs make each second's data visible at once: flush every interval.
        import dataclasses

        scenario = dataclasses.replace(scenario, flush_every_intervals=1)
    log.info(f"isrwatch emulate: scenario {scenario.name} ({scenario.source}) seed {scenario.seed}, "
             f"{scenario.duration_ms / 1000:.0f} simulated s"
             + ("" if args.no_lakehouse else f", writing {args.lakehouse.rstrip('/')}/bronze"))
    sim = Simulation(scenario, sink)
    wait_until = None
    if args.pace is not None:
        from foundation.pacer import LivePacer

        wait_until = LivePacer(args.pace).wait_until
    started = time.monotonic()
    last = [0.0]

    def progress(now_ms: int) -> None:
        wall = time.monotonic()
        if args.quiet or wall - last[0] < 2.0:
            return
        last[0] = wall
        log.info(f"  {now_ms / 1000:>8.0f}/{scenario.duration_ms / 1000:.0f} simulated s, "
                 f"{sim.queue.processed} events, {wall - started:.1f} s wall")

    try:
        summary = sim.run(on_interval=progress, wait_until=wait_until)
    except InvariantViolation as e:
        log.error(f"isrwatch: FAILED: {e}")
        return 3
    except SinkSchemaError as e:
        log.error(f"isrwatch: {e}")
        return 2
    except KeyboardInterrupt:
        log.info("isrwatch: interrupted; batches written so far are complete and idempotent")
        return 130
    wall = time.monotonic() - started
    summary["wall_seconds"] = round(wall, 3)
    print(format_summary(summary))
    print(f"done in {wall:.1f} s wall ({scenario.duration_ms / 1000 / max(wall, 1e-9):.0f}x real time)"
          + ("" if args.no_lakehouse else f"; bronze tables in {args.lakehouse.rstrip('/')}/bronze"))
    if args.summary_json:
        Path(args.summary_json).write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
