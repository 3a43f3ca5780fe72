"""Configuration posture: silver.topic_configs + silver.runs -> gold.posture and gold.posture_history.

    spark-submit [--master …] --jars <delta jars> jobs/posture.py [--lakehouse URI] [--trigger available-now]

Whenever a micro-batch carries a topic configuration, or a cluster's broker count changes, the job
recomputes the posture of every topic of that cluster (pipelines/posture.py) from the latest config of
each partition in silver, appends the snapshot to gold.posture_history (the alerts job turns its findings
into alerts) and replaces the cluster's rows in gold.posture (the current posture).

Exactly once: both writes carry the app transaction (isrwatch-posture/<query id>, batch id) and the
snapshot depends only on silver, so a batch replayed after a crash rewrites nothing.
"""

from __future__ import annotations

import argparse
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
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from foundation import kill_points
from foundation.delta_io import AppVersions, ensure_table, read_rows
from foundation.logs import logger
from foundation.settings import PipelineSettings, SettingsError
from jobs.delta_tables import wait_for_tables
from jobs.streaming import add_common_args, load_job_settings, run_job, start_query, union_stream, wait_started
from pipelines.posture import CONFIG_COLUMNS, latest_configs, topic_posture
from schemas.gold_durability import POSTURE, POSTURE_HISTORY
from schemas.silver import SILVER_TABLES

log = logger("posture")


@dataclass
class PostureStats:
    batch_id: int = -1
    snapshots: int = 0
    topics: int = 0
    findings: int = 0

    def describe(self) -> str:
        return f"{self.topics} topics, {self.findings} findings"


@dataclass
class PostureEvaluator:
    """The foreachBatch body: which clusters changed, their posture, the two gold writes."""

    spark: SparkSession
    settings: PipelineSettings
    query_id: str | None = None
    started: threading.Event = field(default_factory=threading.Event)
    brokers: dict[str, int] = field(default_factory=dict)
    restored: bool = False
    stats: PostureStats = field(default_factory=PostureStats)

    versions: AppVersions = field(init=False)  # set by start_query: the app id needs the query's id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        lake = self.settings.lakehouse
        wait_started(self, "posture")
        if not self.restored:  # first batch after a start: the broker counts the current posture was made with
            current = read_rows(POSTURE, lake, ["cluster", "brokers"]).to_pandas().dropna()
            self.brokers = {str(c): int(b) for c, b in zip(current["cluster"], current["brokers"], strict=True)}
            self.restored = True
        rows: Any = batch.toPandas()
        changed: dict[str, pd.Timestamp] = {}   # cluster -> event time of the change
        configs = rows[rows["_source"] == "topic_configs"]
        for cluster, ts in configs.groupby("run_id", sort=True)["ts"].max().items():
            changed[str(cluster)] = ts
        runs = rows[rows["_source"] == "runs"].sort_values(["run_id", "ts"], kind="stable")
        for cluster, group in runs.groupby("run_id", sort=True):
            brokers = int(group["brokers"].iloc[-1])
            if self.brokers.get(str(cluster)) != brokers:
                self.brokers[str(cluster)] = brokers
                changed[str(cluster)] = max(changed.get(str(cluster), group["ts"].iloc[-1]), group["ts"].iloc[-1])
        if not changed or self.versions.committed(POSTURE, lake) >= batch_id:
            return
        snapshot = self._snapshot(changed, batch_id)
        self.versions.write_once(POSTURE_HISTORY, lake, pa.Table.from_pandas(
            snapshot, schema=POSTURE_HISTORY.arrow_schema, preserve_index=False), batch_id)
        kill_points.reached("posture", batch_id, "after_history")
        current = read_rows(POSTURE, lake).to_pandas()
        current = current[~current["cluster"].isin(list(changed))]
        merged = pd.concat([current, snapshot], ignore_index=True).sort_values(["cluster", "topic"])
        self.versions.write_once(POSTURE, lake, pa.Table.from_pandas(merged, schema=POSTURE.arrow_schema,
                                                                     preserve_index=False), batch_id, mode="overwrite")
        s = self.stats
        s.batch_id, s.snapshots = batch_id, s.snapshots + len(changed)
        s.topics, s.findings = len(merged), int(merged["finding_count"].sum())

    def _snapshot(self, changed: dict[str, pd.Timestamp], batch_id: int) -> pd.DataFrame:
        """Posture of every topic of the changed clusters, from the latest config of each partition in silver."""
        path = SILVER_TABLES["topic_configs"].path(self.settings.lakehouse)
        configs = (self.spark.read.format("delta").load(path).where(F.col("run_id").isin(sorted(changed)))
                   .select(*CONFIG_COLUMNS, "ts").toPandas())
        posture = topic_posture(latest_configs(configs), self.brokers, self.settings.posture.failure_probability)
        posture = posture.rename(columns={"run_id": "cluster"})
        posture["ts"] = posture["cluster"].map(changed)
        posture["failure_probability"] = self.settings.posture.failure_probability
        posture["posture_batch_id"] = batch_id
        return posture[list(POSTURE.arrow_schema.names)]


def start_posture(spark: SparkSession, settings: PipelineSettings,
                  log: Any = lambda m: log.info(m)) -> tuple[Any, PostureEvaluator]:
    settings.use_storage()
    job, lake = settings.posture, settings.lakehouse
    paths = {t: SILVER_TABLES[t].path(lake) for t in ("topic_configs", "runs")}
    wait_for_tables({f"silver.{t}": p for t, p in paths.items()}, job.wait_for_tables.total_seconds(), log)
    for td in (POSTURE, POSTURE_HISTORY):
        ensure_table(td, lake)
    # Only the columns that say a config changed: the snapshot itself is read from silver.
    stream = union_stream(spark, {
        "topic_configs": (paths["topic_configs"], ["run_id", "ts"]),
        "runs": (paths["runs"], ["run_id", F.col("end_ts").alias("ts"), "brokers"]),
    }, job.max_files_per_trigger)
    evaluator = PostureEvaluator(spark, settings)
    return start_query(stream, "posture", evaluator, job, settings), evaluator


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobs/posture.py", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_common_args(p)
    p.add_argument("--failure-probability", type=float, default=None,
                   help="p: one broker's chance of losing its copy in the window you reason about")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def load() -> tuple[PipelineSettings, None]:
        return load_job_settings(args, "posture", {"posture.failure_probability": args.failure_probability}), None

    return run_job("posture", load, (SettingsError,), lambda spark, settings, _: start_posture(spark, settings),
                   verbose=args.verbose)


if __name__ == "__main__":
    raise SystemExit(main())
