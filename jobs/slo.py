"""Durability SLOs: silver.partition_state / silver.ack_ledger -> gold.slo_timeslices and gold.slo_status.

    spark-submit [--master …] --jars <delta jars> jobs/slo.py [--lakehouse URI] [--slos conf/slos.yaml]

Every micro-batch becomes timeslices (bad and total events per SLO, cluster and metric interval,
pipelines/slo_math.py); each new interval gets a status row: SLI over the rolling window, error budget
left, burn rates over 5m/30m/1h/6h/3d, and whether a page or ticket burn condition holds. The alerts job
reads gold.slo_status and runs those conditions through the same alert lifecycle as every other rule.

A micro-batch of more than `driver_max_rows` rows (a catch-up) is not collected: it is grouped by
cluster on the executors, each cluster computed there from its own series (pipelines/slo_per_cluster.py).

Restart: the rolling windows are rebuilt from gold.slo_timeslices (only slices of batches whose status is
committed), and both writes carry the app transaction (isrwatch-slo/<query id>, batch id), so a batch
replayed after a crash neither double-counts nor duplicates.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from foundation import kill_points
from foundation.delta_io import AppVersions, ensure_table
from foundation.logs import logger
from foundation.settings import PipelineSettings, SettingsError
from jobs.delta_tables import wait_for_tables
from jobs.per_cluster import route, step_per_cluster
from jobs.streaming import (
    add_common_args,
    load_job_settings,
    run_job,
    start_query,
    union_stream,
    wait_started,
)
from pipelines.slo_config import load_slos
from pipelines.slo_math import BudgetSeries, epoch_ms, evaluate_batch, with_epoch_ms
from pipelines.slo_per_cluster import evaluate_cluster, gather, series_by_cluster
from pipelines.slo_spec import BURN_WINDOWS, Slo, SloConfigError
from schemas.gold_durability import SLO_STATUS, SLO_TIMESLICES
from schemas.silver import SILVER_TABLES

log = logger("slo")


def stream_columns(table: str) -> list[Any]:
    """What the SLIs need from each silver table (a function: Spark columns need a running session)."""
    if table == "partition_state":
        return ["run_id", "ts", "topic", "leader", "effective_min_isr", F.size("isr").alias("isr_size")]
    return ["run_id", "ts", "topic", "acks", "records_acked", "records_lost"]


@dataclass
class SloStats:
    batch_id: int = -1
    slices: int = 0
    paging: int = 0
    ticketing: int = 0
    batches: int = 0
    executor_batches: int = 0   # batches evaluated on the executors (more than driver_max_rows rows)

    def describe(self) -> str:
        return f"{self.slices} timeslices, {self.paging} paging, {self.ticketing} ticketing"


@dataclass
class SloEvaluator:
    settings: PipelineSettings
    slos: tuple[Slo, ...]
    series: dict[tuple[str, str], BudgetSeries] = field(default_factory=dict)   # (slo, cluster)
    restored: bool = False
    query_id: str | None = None
    started: threading.Event = field(default_factory=threading.Event)
    stats: SloStats = field(default_factory=SloStats)

    versions: AppVersions = field(init=False)  # set by start_query: the app id needs the query's id

    def restore(self, spark: SparkSession) -> None:
        """Rebuild the rolling windows from the timeslices of batches whose status was committed."""
        self.restored = True
        done = self.versions.committed(SLO_STATUS, self.settings.lakehouse)
        if done < 0:
            return
        longest = max(max(s.window_ms for s in self.slos), max(BURN_WINDOWS.values()))
        path = SLO_TIMESLICES.path(self.settings.lakehouse)
        rows: Any = (spark.read.format("delta").load(path).where(F.col("slo_batch_id") <= done)
                .withColumn("_latest", F.max("ts").over(Window.partitionBy("cluster")))
                .where(F.col("ts") > F.col("_latest") - F.expr(f"INTERVAL {longest // 1000} SECONDS"))
                .groupBy("slo", "cluster", "ts").agg(F.sum("bad").alias("bad"), F.sum("total").alias("total"))
                .toPandas())
        rows["ts"] = epoch_ms(rows["ts"])
        for (slo, cluster), group in rows.groupby(["slo", "cluster"], sort=True):
            series = self.series.setdefault((str(slo), str(cluster)), BudgetSeries())
            series.add(group.sort_values("ts"))

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        lake = self.settings.lakehouse
        wait_started(self, "slo")
        if self.versions.committed(SLO_STATUS, lake) >= batch_id:
            return  # applied before a restart; restore() counts its timeslices
        if not self.restored:  # the app id (query id) is known only once the query runs
            self.restore(batch.sparkSession)
        routed = route(batch, self.settings.slo.driver_max_rows,
                       lambda rows: evaluate_batch(self.slos, self.series, with_epoch_ms(rows), batch_id),
                       lambda big: self._on_executors(big, batch_id))
        slices_out, status_out = routed.result
        self._write(SLO_TIMESLICES, slices_out, batch_id)
        kill_points.reached("slo", batch_id, "after_timeslices")
        self._write(SLO_STATUS, status_out, batch_id)
        s = self.stats
        s.batch_id, s.slices = batch_id, s.slices + sum(len(f) for f in slices_out)
        s.batches += 1
        s.executor_batches += routed.on_executors
        latest = [f.iloc[-1] for f in status_out if len(f)]
        s.paging, s.ticketing = sum(bool(r["page"]) for r in latest), sum(bool(r["ticket"]) for r in latest)
        if batch_id > 0 and batch_id % self.settings.slo.maintain_every_batches == 0:
            from foundation.delta_io import compact_and_checkpoint

            compact_and_checkpoint(lake, (SLO_TIMESLICES, SLO_STATUS))

    def _on_executors(self, batch: DataFrame, batch_id: int) -> tuple[list[pd.DataFrame], list[pd.DataFrame]]:
        """A batch too large to collect: grouped by cluster on the executors, each cluster's timeslices and
        statuses computed there from its own series (pipelines/slo_per_cluster.py)."""
        step = functools.partial(evaluate_cluster, self.slos, batch_id)
        return gather(self.slos, step_per_cluster(batch, series_by_cluster(self.series), step), self.series)

    def _write(self, td: Any, frames: list[pd.DataFrame], batch_id: int) -> None:
        # An empty batch is still committed: its app transaction is what a replay checks.
        table = td.arrow_schema.empty_table()
        if frames:
            frame = pd.concat(frames, ignore_index=True)
            frame["ts"] = pd.to_datetime(frame["ts"].astype("int64"), unit="ms", utc=True)
            table = pa.Table.from_pandas(frame[td.arrow_schema.names], schema=td.arrow_schema, preserve_index=False)
        self.versions.write_once(td, self.settings.lakehouse, table, batch_id)


def start_slo(spark: SparkSession, settings: PipelineSettings, slos: tuple[Slo, ...] | None = None,
              log: Any = lambda m: log.info(m)) -> tuple[Any, SloEvaluator]:
    settings.use_storage()
    job, lake = settings.slo, settings.lakehouse
    slos = slos or load_slos(job.specs)
    sources = sorted({s.source for s in slos})
    paths = {t: SILVER_TABLES[t].path(lake) for t in sources}
    wait_for_tables({f"silver.{t}": p for t, p in paths.items()}, job.wait_for_tables.total_seconds(), log)
    for td in (SLO_TIMESLICES, SLO_STATUS):
        ensure_table(td, lake)
    stream = union_stream(spark, {t: (paths[t], stream_columns(t)) for t in sources}, job.max_files_per_trigger)
    evaluator = SloEvaluator(settings, slos)
    query = start_query(stream, "slo", evaluator, job, settings)
    return query, evaluator


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/slo.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_args(p)
    p.add_argument("--slos", default=None, help="SLO specs (default conf/slos.yaml)")
    p.add_argument("--driver-max-rows", type=int, default=None, metavar="N",
                   help="evaluate a micro-batch of more rows on the executors "
                        "(default: driver_max_rows, conf/pipeline.yaml)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def load() -> tuple[PipelineSettings, tuple[Slo, ...]]:
        settings = load_job_settings(args, "slo", {"slo.specs": args.slos,
                                                   "slo.driver_max_rows": args.driver_max_rows})
        return settings, load_slos(settings.slo.specs)

    return run_job("slo", load, (SettingsError, SloConfigError), start_slo, verbose=args.verbose)


if __name__ == "__main__":
    raise SystemExit(main())
