"""Which evaluator holds each alert rule: the alert lane every rule on a silver table, the alerts job every rule on a
gold table (pipelines/alert_config.split_by_layer), and the rows an older isrwatch wrote given to the evaluator of
their rule's layer when a job starts (jobs/alert_stage.settle_owners)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
import yaml

from foundation.delta_checksum import write_with_checksum
from foundation.delta_io import open_table, read_rows
from jobs.alert_stage import settle_owners
from pipelines.alert_config import load_alert_config, split_by_layer
from pipelines.alert_rules import AlertConfig, AlertConfigError, parse_alert_config
from schemas.gold import ALERTS, ALERTS_STATE

ROOT = Path(__file__).resolve().parents[2]
GOLD_RULES = {r.name for r in split_by_layer(load_alert_config())[1].rules}


def test_the_shipped_rules_split_by_the_layer_they_read() -> None:
    """The lane holds every rule on a silver table, the alerts job every rule on a gold table: one answer each."""
    config = load_alert_config()
    silver, gold = split_by_layer(config)
    assert {r.source for r in silver.rules} == {"partition_state", "broker_metrics", "isr_membership", "ack_ledger",
                                               "broker_reports"}
    assert {r.name for r in silver.rules} >= {"UnderMinIsr", "BrokerNotReporting", "IsrThrash", "AckedRecordsLost"}
    assert {r.source for r in gold.rules} == {"posture", "slo_status"}
    assert len(silver.rules) + len(gold.rules) == len(config.rules)
    assert silver.receivers == gold.receivers == config.receivers


def shipped_with_inhibition(rule: str, by: str, equal: list[str]) -> AlertConfig:
    """The shipped rules, `rule` inhibited by `by`, as if read from mine.yaml."""
    raw = yaml.safe_load((ROOT / "conf/alerts.yaml").read_text())
    next(r for r in raw["rules"] if r["name"] == rule)["inhibited_by"] = [{"rule": by, "equal": equal}]
    return parse_alert_config(raw, "mine.yaml", {})


def test_an_inhibition_across_the_two_layers_is_refused() -> None:
    config = shipped_with_inhibition("UnderMinIsr", "PostureMinIsrOne", ["cluster", "topic"])
    with pytest.raises(AlertConfigError, match=r"mine\.yaml: rule 'UnderMinIsr' \(on a silver table\) is "
                                               r"inhibited_by 'PostureMinIsrOne' \(on a gold table\)"):
        split_by_layer(config, "mine.yaml")


def test_an_older_lakehouses_engine_state_goes_to_the_evaluator_of_each_rules_layer_in_one_commit(
        tmp_path: Path) -> None:
    """gold.alerts_engine_state as older isrwatch versions left it: rows of validate's own evaluator (`silver`), of
    the alerts job holding a rule on a silver table, and from before the `engine` column. Every alert and window of
    a rule on a silver table, and the signals, become the lane's; a gold rule's stays the alerts job's; in one
    commit, and none when nothing is left to move. The rows' state is untouched: open alerts continue."""
    lake = str(tmp_path / "lake")
    row = {"state": "{}", "batch_id": 7}
    before = [{**row, "kind": "alert", "key": "UnderMinIsr/f1", "engine": "silver"},
              {**row, "kind": "alert", "key": "IsrThrash/f2", "engine": "gold"},
              {**row, "kind": "window", "key": "IsrThrash/f3", "engine": None},
              {**row, "kind": "alert", "key": "UnderReplicated/f4", "engine": "lane"},
              {**row, "kind": "alert", "key": "PostureMinIsrOne/f5", "engine": "gold"},
              {**row, "kind": "alert", "key": "SloBurnRatePage/f6", "engine": None},
              {**row, "kind": "last_hw", "key": "c1", "engine": "silver"},
              {**row, "kind": "last_seen", "key": "c1/1", "engine": None}]
    write_with_checksum(ALERTS_STATE.path(lake), pa.Table.from_pylist(before, schema=ALERTS_STATE.arrow_schema),
                        mode="overwrite")
    table = open_table(ALERTS_STATE, lake)
    assert table is not None
    version = table.version()
    settle_owners(lake, GOLD_RULES)
    after = read_rows(ALERTS_STATE, lake).to_pylist()
    assert {r["key"]: r["engine"] for r in after} == {
        "UnderMinIsr/f1": "lane", "IsrThrash/f2": "lane", "IsrThrash/f3": "lane", "UnderReplicated/f4": "lane",
        "PostureMinIsrOne/f5": "gold", "SloBurnRatePage/f6": "gold", "c1": "lane", "c1/1": "lane"}
    assert [{k: v for k, v in r.items() if k != "engine"} for r in after] == [
        {k: v for k, v in r.items() if k != "engine"} for r in before]
    table.update_incremental()
    assert table.version() == version + 1
    settle_owners(lake, GOLD_RULES)  # settled: no commit
    table.update_incremental()
    assert table.version() == version + 1


def test_gold_alerts_written_before_the_stage_column_get_their_evaluator(tmp_path: Path) -> None:
    """gold.alerts from before `stage` (the column absent) gets it, each row its rule's evaluator, in one commit;
    nothing else in the rows changes, and validate's old `silver` rows become the lane's."""
    lake = str(tmp_path / "lake")
    at = pd.Timestamp("2026-11-27T12:00:00Z").to_pydatetime()
    old_schema = pa.schema([f for f in ALERTS.arrow_schema if f.name != "stage"])
    before = [{"status": "firing", "rule": rule, "fingerprint": fp, "cluster": "c1", "severity": "critical",
               "scope": "partition", "labels": [("topic", "t")], "summary": "s", "description": "", "runbook": "",
               "value": 1.0, "inhibited": False, "flapping": False, "active_since": at, "fired_at": at,
               "resolved_at": None, "last_evaluated": at, "updated_batch_id": 7}
              for rule, fp in (("UnderMinIsr", "f1"), ("IsrThrash", "f2"), ("UnderReplicated", "f4"),
                               ("PostureMinIsrOne", "f5"))]
    write_with_checksum(ALERTS.path(lake), pa.Table.from_pylist(before, schema=old_schema), mode="overwrite")

    def stages() -> dict[str, str]:
        return {r["fingerprint"]: r["stage"] for r in read_rows(ALERTS, lake).to_pylist()}

    settle_owners(lake, GOLD_RULES)
    assert stages() == {"f1": "lane", "f2": "lane", "f4": "lane", "f5": "gold"}
    rows = read_rows(ALERTS, lake).to_pylist()
    assert [{k: v for k, v in r.items() if k != "stage"} for r in sorted(rows, key=lambda r: r["fingerprint"])] == [
        {**b, "labels": [("topic", "t")]} for b in before]
    write_with_checksum(ALERTS.path(lake), pa.Table.from_pylist([{**r, "stage": "silver"} for r in rows],
                                                                schema=ALERTS.arrow_schema), mode="overwrite")
    settle_owners(lake, GOLD_RULES)
    assert stages() == {"f1": "lane", "f2": "lane", "f4": "lane", "f5": "gold"}
