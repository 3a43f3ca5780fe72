"""The two alert evaluators on real Spark + Delta: emulator runs -> the alert lane (rules on silver tables) and
validate, posture, slo -> the alerts job (rules on gold tables) -> a webhook receiver.

One lakehouse holds three clusters (emulator runs): a healthy one, one losing two of three brokers, and
the seed's unclean election. Each default rule that those scenarios trigger fires on the right cluster
and entity, nothing fires on the healthy one, and a SIGKILLed alerts job restarted from its checkpoint
produces exactly the transitions of an uninterrupted run.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from foundation.delta_io import read_rows
from foundation.settings import load_settings
from jobs.alert_lane import RunningLane
from jobs.alerts import RunningAlerts, start_alerts
from pipelines.alert_config import load_alert_config, split_by_layer
from schemas.gold import ALERT_EVENTS, ALERTS, ALERTS_STATE
from schemas.gold_durability import POSTURE, POSTURE_HISTORY, SLO_STATUS, SLO_TIMESLICES
from tests.alerts.lane_runs import lane_to_the_end
from tests.alerts.receiver import Receiver, signed_with
from tests.driver_env import driver_env
from tests.kill_at import killed_at
from tests.lakes import UNCLEAN

ROOT = Path(__file__).resolve().parents[2]
SECRET = "test-secret"


def rules_file(tmp: Path, url: str) -> str:
    raw = yaml.safe_load((ROOT / "conf/alerts.yaml").read_text())
    raw["receivers"] = [{"name": "test", "url": url, "secret": SECRET, "backoff_initial": "50ms",
                         "severities": ["critical", "warning"]}]
    path = tmp / "alerts.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def copy_lake(src: str, dst: Path) -> str:
    """Bronze, silver and the posture/SLO gold tables, without anything the alert evaluators wrote."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("alert_events", "alerts", "alerts_engine_state",
                                                            "deliveries", "_checkpoints"))
    return str(dst)


@dataclass
class Evaluated:
    """Both evaluators run to the end: the lane (rules on silver tables, its webhook lanes stopped once idle) and the
    alerts job (rules on gold tables, its dispatcher left to the caller); None where the rules hold none."""

    lane: RunningLane | None
    alerts: RunningAlerts | None


def run_in_process(spark: Any, lake: str, rules: str, **overrides: Any) -> Evaluated:
    """The alert lane over the lakehouse's bronze and the alerts job over its gold tables, available-now, one bronze
    commit a table (the lane) and one file (the alerts job) per micro-batch."""
    settings = load_settings(overrides={"lakehouse": lake, "alerts.trigger": "available-now", "alerts.rules": rules,
                                        "alerts.max_files_per_trigger": 1, "validate.trigger": "available-now",
                                        "validate.max_files_per_trigger": 1, **overrides})
    config = load_alert_config(rules)
    silver, gold = split_by_layer(config)
    lane = None
    if silver.rules:
        lane = lane_to_the_end(spark, settings)
    alerts = None
    if gold.rules:
        alerts = start_alerts(spark, settings, config, log=lambda _: None)
        alerts.query.awaitTermination()
        assert alerts.query.exception() is None, alerts.query.exception()
    return Evaluated(lane, alerts)


def transitions(lake: str) -> list[dict[str, Any]]:
    rows = read_rows(ALERT_EVENTS, lake).to_pylist()
    return sorted(rows, key=lambda r: (r["eval_batch_id"], r["seq"]))


@pytest.fixture(scope="module")
def alerted(spark: Any, silver_lake: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[Any]]:
    """Both evaluators run once over the three clusters, delivering to a real receiver."""
    tmp = tmp_path_factory.mktemp("alerted")
    lake = copy_lake(silver_lake, tmp / "lake")
    receiver = Receiver().start()
    try:
        running = run_in_process(spark, lake, rules_file(tmp, receiver.url))
        assert running.alerts is not None and running.alerts.dispatcher is not None
        assert running.alerts.dispatcher.wait_idle(60)
        running.alerts.dispatcher.stop()
        return lake, receiver.delivered()
    finally:
        receiver.stop()


def test_rules_fire_on_their_scenarios_and_webhooks_receive_them(alerted: tuple[str, list[Any]]) -> None:
    lake, got = alerted
    events = transitions(lake)
    fired = Counter((e["cluster"], e["rule"]) for e in events if e["status"] == "firing")
    assert not [k for k in fired if k[0] == "healthy-s3"], fired
    for rule in ("UnderMinIsr", "AtMinIsr"):  # each of the four partitions, once
        assert fired[("lose-two-s3", rule)] == 4, (rule, fired)
    assert fired[("lose-two-s3", "ProduceNotEnoughReplicas")] >= 1, fired
    # Broker 2 is down 30 s and broker 3 8 s, each then recovering its log for 6.7-12.5 s before it reports
    # again: both are silent longer than the rule's 15 s, and each fires once and resolves once.
    broker_down = [e for e in events if e["rule"] == "BrokerNotReporting" and e["cluster"] == "lose-two-s3"]
    for broker in ("2", "3"):
        assert [e["status"] for e in broker_down if dict(e["labels"])["broker_id"] == broker] == [
            "firing", "resolved"], (broker, broker_down)
    assert {dict(e["labels"])["broker_id"] for e in broker_down} == {"2", "3"}
    for rule in ("UncleanLeaderElection", "AckedRecordsLost"):  # elected at once: never offline
        assert fired[(UNCLEAN, rule)] == 1, (rule, fired)
    # Every firing alert of lose-two resolves once the brokers are back (the run ends healthy).
    resolved = Counter((e["cluster"], e["rule"]) for e in events if e["status"] == "resolved")
    assert resolved[("lose-two-s3", "UnderMinIsr")] == 4
    assert resolved[(UNCLEAN, "UncleanLeaderElection")] == 1
    lost = next(e for e in events if e["rule"] == "AckedRecordsLost" and e["status"] == "firing")
    assert lost["value"] == 2.0 and dict(lost["labels"])["topic"] == "ledger"
    # The receiver got exactly the routed transitions, each once and signed, each alert's in order (its four lanes
    # send different alerts side by side).
    routed = [e for e in events if e["status"] in ("firing", "resolved") and not e["inhibited"]
              and e["severity"] in ("critical", "warning")]
    ids = [r["headers"]["X-Isrwatch-Delivery"] for r in got]
    assert sorted(ids) == sorted(f"{e['event_id']}@test" for e in routed)
    fingerprint = {f"{e['event_id']}@test": e["fingerprint"] for e in routed}
    for fp in set(fingerprint.values()):
        assert [i for i in ids if fingerprint[i] == fp] == [f"{e['event_id']}@test" for e in routed
                                                              if e["fingerprint"] == fp]
    assert all(signed_with(r["body"], SECRET, r["headers"]["X-Isrwatch-Signature"]) for r in got)
    # gold.alerts: nothing about the cluster's state left firing for lose-two. Its SLO budget is still
    # burning (the 5-minute window outlasts the 60 s run) and its configuration is what it was.
    current = read_rows(ALERTS, lake).to_pylist()
    left = sorted(a["rule"] for a in current if a["cluster"] == "lose-two-s3" and a["status"] == "firing")
    assert left == ["PostureRfEqualsBrokers", "SloBurnRatePage", "SloBurnRateTicket"], left
    ticket = next(a for a in current if a["cluster"] == "lose-two-s3" and a["rule"] == "SloBurnRateTicket")
    assert ticket["inhibited"], "the page for the same SLO inhibits its ticket"


def test_posture_findings_and_slo_burn_go_through_the_same_lifecycle(alerted: tuple[str, list[Any]]) -> None:
    lake, got = alerted
    firing = sorted((e["cluster"], e["rule"], dict(e["labels"]).get("topic") or dict(e["labels"]).get("slo"))
                    for e in transitions(lake) if e["status"] == "firing"
                    and (e["rule"].startswith("Posture") or e["rule"].startswith("Slo")))
    assert firing == [
        ("lose-two-s3", "PostureRfEqualsBrokers", "orders"),
        ("lose-two-s3", "SloBurnRatePage", "write-availability"),
        ("lose-two-s3", "SloBurnRateTicket", "write-availability"),
        (UNCLEAN, "PostureMinIsrOne", "ledger"),
        (UNCLEAN, "PostureRfEqualsBrokers", "ledger"),
        (UNCLEAN, "PostureUncleanElectionEnabled", "ledger"),
        (UNCLEAN, "SloBurnRatePage", "acked-durability"),
        (UNCLEAN, "SloBurnRatePage", "multi-copy-acks"),
        (UNCLEAN, "SloBurnRateTicket", "acked-durability"),
        (UNCLEAN, "SloBurnRateTicket", "multi-copy-acks"),
    ], firing
    # Delivered: the page (critical) and the posture warnings; info findings and inhibited tickets are not.
    delivered = {(a["labels"]["cluster"], a["labels"]["alertname"]) for r in got for a in r["json"]["alerts"]}
    assert (UNCLEAN, "SloBurnRatePage") in delivered and (UNCLEAN, "PostureUncleanElectionEnabled") in delivered
    assert not {d for d in delivered if d[1] in ("PostureRfEqualsBrokers", "SloBurnRateTicket")}


def test_batches_over_driver_max_rows_are_evaluated_on_the_executors_with_the_same_results(
        spark: Any, silver_lake: str, alerted: tuple[str, list[Any]], tmp_path: Path) -> None:
    """The `alerted` run again, every micro-batch of the alerts job on the executor route (grouped by cluster, the
    rules run in Spark's Python workers): the same transitions, gold.alerts and engine state, row for row. (The
    lane reads its batches on the driver, at most `validate.max_files_per_trigger` commits a table each.)"""
    reference = alerted[0]
    lake = copy_lake(silver_lake, tmp_path / "executors")
    running = run_in_process(spark, lake, rules_file(tmp_path, "http://127.0.0.1:9/unused"),
                             **{"alerts.driver_max_rows": 0, "alerts.webhooks": False})
    assert running.alerts is not None
    stats = running.alerts.evaluator.stats
    assert stats.batches >= 1 and stats.executor_batches == stats.batches

    def rows(td: Any, at: str, ignore: tuple[str, ...] = ()) -> list[list[tuple[str, str]]]:
        return sorted(sorted((k, repr(v)) for k, v in r.items() if k not in ignore)
                      for r in read_rows(td, at).to_pylist())

    events = rows(ALERT_EVENTS, lake, ("evaluated_at",))
    assert len(events) > 20 and events == rows(ALERT_EVENTS, reference, ("evaluated_at",))
    assert rows(ALERTS, lake) == rows(ALERTS, reference)
    assert rows(ALERTS_STATE, lake) == rows(ALERTS_STATE, reference)
    assert {e["cluster"] for e in read_rows(ALERT_EVENTS, lake).to_pylist()} >= {"lose-two-s3", UNCLEAN}


def routed(event: dict[str, Any]) -> bool:
    """Whether the test's receiver (critical and warning) gets the transition."""
    return event["status"] in ("firing", "resolved") and not event["inhibited"] and \
        event["severity"] in ("critical", "warning")


def _pipeline_config(tmp: Path) -> str:
    """The shipped settings, available-now, one gold file per alerts micro-batch (as the `alerted` fixture's)."""
    raw = yaml.safe_load((ROOT / "conf/pipeline.yaml").read_text())
    raw["defaults"] = {**raw["defaults"], "trigger": "available-now", "wait_for_tables": "0 seconds"}
    raw["alerts"] = {**raw["alerts"], "max_files_per_trigger": 1}
    path = tmp / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_the_gold_jobs_sigkilled_at_each_write_boundary_repeat_and_lose_nothing(
        silver_lake: str, alerted: tuple[str, list[Any]], tmp_path: Path) -> None:
    """`isrwatch pipeline run --jobs posture,slo,alerts` over the silver tables, SIGKILLed at each of the three
    jobs' kill points in turn (posture's history written, not its current table; slo's timeslices, not its status;
    the alerts job's transitions handed to the receiver, then its events, then its state committed, each before
    Spark's own commit), every run continuing from what the killed one left, then run to the end. Posture and SLO
    tables equal those of the uninterrupted run that built the silver lake, the alert transitions, alerts and
    engine state those of the `alerted` fixture's alerts job, and the receiver got every transition."""
    receiver = Receiver().start()
    try:
        lake = str(tmp_path / "lake")
        shutil.copytree(silver_lake, lake, ignore=shutil.ignore_patterns(
            "posture", "posture_history", "slo_timeslices", "slo_status", "alert_events", "alerts",
            "alerts_engine_state", "deliveries", "_checkpoints"))
        rules = rules_file(tmp_path, receiver.url)
        cmd = [str(ROOT / "isrwatch/cli.py"), "pipeline", "run", "--jobs", "posture,slo,alerts", "--config",
               _pipeline_config(tmp_path), "--lakehouse", lake, "--rules", rules]
        reference = alerted[0]
        gold_rules = {r.name for r in split_by_layer(load_alert_config(rules))[1].rules}
        expected_events = [e for e in transitions(reference) if e["rule"] in gold_rules]
        # The first batch with a transition the receiver gets (a posture finding's, of severity info, is not sent).
        state_batch = min(e["eval_batch_id"] for e in expected_events if routed(e))

        def run(kill: str | None) -> None:
            done = subprocess.run([*killed_at(kill), *cmd], cwd=ROOT, capture_output=True, text=True, timeout=600,
                                  env=driver_env())
            assert done.returncode == (-9 if kill else 0), (kill, done.stderr[-3000:])

        run("posture:0:after_history")
        assert not read_rows(POSTURE, lake).num_rows and read_rows(POSTURE_HISTORY, lake).num_rows
        run("slo:0:after_timeslices")
        assert read_rows(POSTURE, lake).num_rows and read_rows(SLO_TIMESLICES, lake).num_rows
        assert not read_rows(SLO_STATUS, lake).num_rows
        # That batch, killed at each of its boundaries in turn (each run replays
        # it): delivered, nothing of it recorded; its events recorded, not gold.alerts; gold.alerts, not its state; its
        # state, not Spark's commit.
        run(f"alerts:{state_batch}:after_delivery")
        assert receiver.delivered() and not [e for e in transitions(lake) if e["eval_batch_id"] == state_batch]
        run(f"alerts:{state_batch}:after_events")
        assert state_batch in {e["eval_batch_id"] for e in transitions(lake)}
        assert all(r["batch_id"] < state_batch for r in read_rows(ALERTS_STATE, lake).to_pylist())
        run(f"alerts:{state_batch}:after_alerts")
        assert {r["updated_batch_id"] for r in read_rows(ALERTS, lake).to_pylist()} == {state_batch}
        assert all(r["batch_id"] < state_batch for r in read_rows(ALERTS_STATE, lake).to_pylist())
        run(f"alerts:{state_batch}:after_state")
        assert {r["batch_id"] for r in read_rows(ALERTS_STATE, lake).to_pylist()} == {state_batch}
        run(None)
    finally:
        receiver.stop()

    def rows(td: Any, at: str, ignore: tuple[str, ...] = ()) -> list[tuple[Any, ...]]:
        return sorted(tuple((k, repr(v)) for k, v in sorted(r.items()) if k not in ignore)
                      for r in read_rows(td, at).to_pylist())

    for td in (POSTURE, POSTURE_HISTORY, SLO_TIMESLICES, SLO_STATUS):
        got, want = rows(td, lake, ("slo_batch_id",)), rows(td, silver_lake, ("slo_batch_id",))
        assert len(got) == len(want) > 0 and got == want, td.name

    # The gold tables' commits are not the fixture's, so neither are the alerts job's batches: compared without them.
    def key(e: dict[str, Any]) -> tuple[Any, ...]:
        return (e["rule"], e["fingerprint"], e["status"], e["ts"], e["value"])

    expected, got = sorted(key(e) for e in expected_events), sorted(key(e) for e in transitions(lake))
    assert len(expected) >= 10 and got == expected
    for td in (ALERTS, ALERTS_STATE):
        def row(r: dict[str, Any]) -> list[tuple[str, str]]:
            return sorted((k, repr(v)) for k, v in r.items() if "batch" not in k and "event_id" not in k)

        want = sorted(row(r) for r in read_rows(td, reference).to_pylist()
                      if r.get("stage", r.get("engine")) == "gold")
        have = sorted(row(r) for r in read_rows(td, lake).to_pylist())
        assert len(have) == len(want) > 0 and have == want, td.name
    # Every routed transition reached the receiver; the killed batch's again, under the same delivery ids.
    ids = {r["headers"]["X-Isrwatch-Delivery"] for r in receiver.delivered()}
    assert ids == {f"{e['event_id']}@test" for e in transitions(lake) if routed(e)}
