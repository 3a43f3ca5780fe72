"""jobs/posture.py and jobs/slo.py on real Spark + Delta, over the three clusters of conftest.py.

Posture is checked against the clusters' known configuration; SLO windows against the same counts taken
straight from silver with SQL. Both jobs SIGKILLed and restarted: tests/alerts/test_alerts_job.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from foundation.delta_io import read_rows
from foundation.settings import load_settings
from jobs.slo import start_slo
from schemas.gold_durability import POSTURE, POSTURE_HISTORY, SLO_STATUS, SLO_TIMESLICES
from schemas.silver import SILVER_TABLES
from tests.lakes import UNCLEAN

ROOT = Path(__file__).resolve().parents[2]


def frame(td: Any, lake: str) -> pd.DataFrame:
    return read_rows(td, lake).to_pandas()


def test_posture_of_each_cluster(silver_lake: str) -> None:
    posture = frame(POSTURE, silver_lake).set_index(["cluster", "topic"])
    assert sorted(posture.index) == [("healthy-s3", "orders"), ("lose-two-s3", "orders"), (UNCLEAN, "ledger")]
    healthy = posture.loc[("healthy-s3", "orders")]
    assert (healthy["replication_factor"], healthy["effective_min_isr"], healthy["brokers"]) == (3, 2, 4)
    assert healthy["verdict_row"] == "RF=3/M=2" and list(healthy["findings"]) == []
    assert healthy["failure_domains"] == 3 and healthy["racks_configured"]
    assert healthy["p_all_copies_lost"] == pytest.approx(0.02 ** 3)
    lose_two = posture.loc[("lose-two-s3", "orders")]
    assert list(lose_two["findings"]) == ["rf_equals_brokers"] and lose_two["brokers"] == 3
    # The seed's unclean timeline: RF 3, min ISR 1, unclean on, no racks on its three brokers.
    ledger = posture.loc[(UNCLEAN, "ledger")]
    assert list(ledger["findings"]) == ["min_isr_one", "unclean_enabled", "rf_equals_brokers"]
    assert (ledger["availability_headroom"], ledger["zero_loss_tolerance"]) == (2, 0)
    assert ledger["verdict_class"] == "single-copy-acks" and not ledger["racks_configured"]
    # The configuration never changed after creation: one snapshot per cluster.
    history = frame(POSTURE_HISTORY, silver_lake)
    assert history.groupby("cluster")["ts"].nunique().to_dict() == {"healthy-s3": 1, "lose-two-s3": 1, UNCLEAN: 1}


def _silver_counts(spark: Any, lake: str) -> pd.DataFrame:
    """Per cluster, the SLI counts over the whole run, straight from silver (every run is shorter than 28 d)."""
    spark.read.format("delta").load(SILVER_TABLES["partition_state"].path(lake)).createOrReplaceTempView("ps")
    spark.read.format("delta").load(SILVER_TABLES["ack_ledger"].path(lake)).createOrReplaceTempView("al")
    return spark.sql("""
        SELECT run_id AS cluster, 'write-availability' AS slo, count(*) AS total,
               count_if(NOT (leader >= 0 AND size(isr) >= effective_min_isr)) AS bad FROM ps GROUP BY run_id
        UNION ALL
        SELECT run_id, 'read-availability', count(*), count_if(leader < 0) FROM ps GROUP BY run_id
        UNION ALL
        SELECT run_id, 'multi-copy-acks', count_if(leader >= 0),
               count_if(leader >= 0 AND size(isr) <= 1 AND effective_min_isr <= 1) FROM ps GROUP BY run_id
        UNION ALL
        SELECT run_id, 'acked-durability', sum(records_acked), sum(records_lost)
        FROM al WHERE acks IN ('1', 'all') GROUP BY run_id
    """).toPandas()


def test_slo_windows_match_silver_and_burn_pages_where_budget_went(spark: Any, silver_lake: str) -> None:
    status = frame(SLO_STATUS, silver_lake)
    last = status.sort_values("ts").groupby(["cluster", "slo"]).tail(1).set_index(["cluster", "slo"])
    expected = _silver_counts(spark, silver_lake).set_index(["cluster", "slo"])
    assert len(last) == 12 and sorted(last.index) == sorted(expected.index)
    for key, row in expected.iterrows():
        assert (last.loc[key, "bad_window"], last.loc[key, "total_window"]) == (row["bad"], row["total"]), key
    healthy = status[status["cluster"] == "healthy-s3"]
    assert (healthy["sli_value"] == 1.0).all() and not healthy["page"].any() and not healthy["ticket"].any()
    paging = sorted({(c, s) for c, s, p in zip(status["cluster"], status["slo"], status["page"], strict=True) if p})
    # lose-two refused acks=all writes for 8 s; the unclean election lost 2 acknowledged records and then
    # took acks=all on a single copy. Nothing went offline (the stale replica was elected at once).
    assert paging == [("lose-two-s3", "write-availability"), (UNCLEAN, "acked-durability"),
                      (UNCLEAN, "multi-copy-acks")], paging
    lost = last.loc[(UNCLEAN, "acked-durability")]
    assert lost["bad_window"] == 2.0
    objective = 0.99999
    assert lost["error_budget_remaining"] == pytest.approx(1 - (2 / lost["total_window"]) / (1 - objective))


def test_a_batch_over_driver_max_rows_is_evaluated_per_cluster_on_the_executors_with_the_same_rows(
        spark: Any, silver_lake: str, tmp_path: Path) -> None:
    """The SLO job again over the three clusters' silver, every micro-batch grouped by cluster on the executors:
    the timeslices and statuses of the `silver_lake` run (on the driver), row for row."""
    lake = str(tmp_path / "lake")
    shutil.copytree(silver_lake, lake, ignore=shutil.ignore_patterns("slo_timeslices", "slo_status", "_checkpoints"))
    settings = load_settings(overrides={"lakehouse": lake, "slo.trigger": "available-now",
                                        "slo.wait_for_tables": "0 seconds", "slo.driver_max_rows": 0})
    query, evaluator = start_slo(spark, settings, log=lambda _: None)
    query.awaitTermination()
    assert query.exception() is None, query.exception()
    assert evaluator.stats.batches >= 1 and evaluator.stats.executor_batches == evaluator.stats.batches

    def rows(td: Any, at: str) -> list[tuple[Any, ...]]:
        f = frame(td, at).drop(columns="slo_batch_id")
        return sorted(f.astype(str).itertuples(index=False, name=None))

    for td in (SLO_TIMESLICES, SLO_STATUS):
        got, expected = rows(td, lake), rows(td, silver_lake)
        assert len(got) > 100 and got == expected, td.name
    assert {c for c in frame(SLO_STATUS, lake)["cluster"]} == {"healthy-s3", "lose-two-s3", UNCLEAN}
