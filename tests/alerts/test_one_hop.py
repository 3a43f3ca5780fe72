"""The rules on silver tables evaluated by validate (alerts.silver_rules_in: validate, the default): one streaming
query from a bronze commit to a webhook (jobs/alert_stage.py, jobs/validate_alerts.py).

On the same bronze (a cluster losing two of its three brokers), validate's evaluation gives the transitions the
alerts job gives reading silver; its query killed between delivering a batch's transitions and committing them,
then started again, validate loses none and sends the killed batch's again under the same ids. (A SIGKILLed
process recovers the same way: tests/pipeline/test_exactly_once.py kills validate at each write boundary.)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from foundation.batch_appender import BatchAppender
from foundation.delta_io import read_rows
from foundation.settings import load_settings
from jobs.validate import start_validation
from pipelines.alert_config import load_alert_config, split_by_layer
from pipelines.alert_rules import AlertConfig, AlertConfigError, parse_alert_config
from schemas.bronze import PARTITION_STATE
from schemas.gold import ALERT_EVENTS, ALERTS, ALERTS_STATE
from schemas.silver import SILVER_TABLES
from tests.alerts.receiver import Receiver, rules_file
from tests.alerts.test_alerts_job import copy_lake, run_in_process
from tests.lakes import TABLES
from tests.pipeline.test_validate import validate

ROOT = Path(__file__).resolve().parents[2]
SILVER_RULES = {r.name for r in split_by_layer(load_alert_config())[0].rules}
FILES_PER_BATCH = 4   # bronze commits per table and micro-batch: a few batches, the first ones firing


def test_the_shipped_rules_split_by_the_layer_they_read() -> None:
    config = load_alert_config()
    silver, gold = split_by_layer(config)
    assert {r.source for r in silver.rules} == {"partition_state", "broker_metrics", "isr_membership", "ack_ledger",
                                               "broker_reports"}
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


def _copy(bronze: Path, dst: Path) -> str:
    shutil.copytree(bronze, dst)
    return str(dst)


def _transitions(lake: str) -> list[tuple[Any, ...]]:
    return sorted((e["rule"], e["fingerprint"], e["status"], e["ts"], e["value"])
                  for e in read_rows(ALERT_EVENTS, lake).to_pylist())


@pytest.fixture(scope="module")
def one_hop(bronze: Path, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> str:
    """validate alone, evaluating the rules on silver tables, a few micro-batches."""
    lake = _copy(bronze, tmp_path_factory.mktemp("validate-evaluates") / "lakehouse")
    validate(spark, lake, TABLES, **{"validate.max_files_per_trigger": FILES_PER_BATCH,
                                     "alerts.silver_rules_in": "validate", "alerts.webhooks": False})
    return lake


def test_validate_evaluates_what_the_alerts_job_would_from_silver(one_hop: str, spark: Any, tmp_path: Path) -> None:
    # The rules in the alerts job, reading the silver validate wrote (the same whichever job evaluates).
    two_hops = copy_lake(one_hop, tmp_path / "two-hops")
    rules = rules_file(tmp_path, "http://127.0.0.1:9/unused")
    run_in_process(spark, two_hops, rules, **{"alerts.webhooks": False,
                                              "alerts.max_files_per_trigger": FILES_PER_BATCH})
    expected = [t for t in _transitions(two_hops) if t[0] in SILVER_RULES]
    fired = {t[0] for t in expected if t[2] == "firing"}
    assert {"AtMinIsr", "UnderMinIsr", "UnderReplicated"} <= fired, fired
    assert _transitions(one_hop) == expected
    events = read_rows(ALERT_EVENTS, one_hop).to_pylist()
    assert all(e["event_id"] == f"s{e['eval_batch_id']}-{e['seq']}" for e in events)
    assert {r["engine"] for r in read_rows(ALERTS_STATE, one_hop).to_pylist()} == {"silver"}

    def current(lake: str) -> list[tuple[Any, ...]]:
        return sorted((a["rule"], a["fingerprint"], a["status"], a["fired_at"], a["resolved_at"])
                      for a in read_rows(ALERTS, lake).to_pylist() if a["rule"] in SILVER_RULES)

    assert current(one_hop) == current(two_hops)


class Killed(Exception):
    pass


@contextmanager
def failing_after_delivery(job: str, batch: int) -> Iterator[None]:
    """The stage's micro-batch `batch` fails once its transitions reached the receivers (the webhook lanes finish
    first) and before anything is recorded, as a crash there would leave it."""
    def kill(j: str, batch_id: int, point: str) -> None:
        if (j, batch_id, point) == (job, batch, "after_delivery"):
            raise Killed(f"killed after delivering batch {batch_id}")

    with pytest.MonkeyPatch.context() as m:
        m.setenv("ISRWATCH_KILL_AT", f"{job}:{batch}:after_delivery")
        m.setattr("jobs.alert_stage.die_here_if_asked", kill)
        yield


def test_killed_between_delivery_and_commit_validate_loses_no_transition(
        one_hop: str, bronze: Path, spark: Any, tmp_path: Path) -> None:
    """The query killed once a batch's transitions reached the receiver and before gold.alert_events holds them
    (its micro-batch fails there, as a crash would leave it: Spark's checkpoint without the batch, the engine's
    state without it); a new query, as after a restart, replays the batch, commits the same transitions under the
    same ids, and sends them again under the same delivery ids; every routed transition of the uninterrupted run
    reached the receiver. The transitions are delivered before the batch's silver rows are committed."""
    reference = read_rows(ALERT_EVENTS, one_hop).to_pylist()
    routed = [e for e in reference if e["status"] in ("firing", "resolved") and e["severity"] in ("critical",
                                                                                                   "warning")]
    killed_batch = min(e["eval_batch_id"] for e in routed)
    in_batch = {f"{e['event_id']}@test" for e in routed if e["eval_batch_id"] == killed_batch}
    lake = _copy(bronze, tmp_path / "killed")
    receiver = Receiver().start()
    try:
        settings = load_settings(overrides={
            "lakehouse": lake, "validate.tables": list(TABLES), "validate.trigger": "available-now",
            "validate.max_files_per_trigger": FILES_PER_BATCH, "validate.wait_for_tables_seconds": 0,
            "alerts.rules": rules_file(tmp_path, receiver.url)})
        with failing_after_delivery("validate_alerts", killed_batch):
            first = start_validation(spark, settings, log=lambda _: None)
            with pytest.raises(Exception, match="killed after delivering batch"):
                first.query.awaitTermination()
            first.finish()
        assert in_batch <= {r["json"]["isrwatchDeliveryId"] for r in receiver.delivered()}   # delivered ...
        assert not [e for e in read_rows(ALERT_EVENTS, lake).to_pylist()
                    if e["eval_batch_id"] == killed_batch]                                    # ... not committed,
        silver = BatchAppender(spark, f"isrwatch-validate/{PARTITION_STATE.name}/{first.query.id}")
        assert silver.last_committed(SILVER_TABLES[PARTITION_STATE.name].path(lake)) < killed_batch  # silver neither
        restarted = start_validation(spark, settings, log=lambda _: None)
        restarted.query.awaitTermination()
        assert restarted.query.exception() is None, restarted.query.exception()
        restarted.finish()
    finally:
        receiver.stop()

    def key(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e["event_id"], e["rule"], e["fingerprint"], e["status"], e["ts"])

    got = read_rows(ALERT_EVENTS, lake).to_pylist()
    assert sorted(map(key, got)) == sorted(map(key, reference))   # each transition once, under the same id
    ids = [r["json"]["isrwatchDeliveryId"] for r in receiver.delivered()]
    assert set(ids) == {f"{e['event_id']}@test" for e in routed}   # none lost
    twice = {i for i in ids if ids.count(i) > 1}
    assert twice and twice <= in_batch   # the killed batch's, sent again under the same ids
