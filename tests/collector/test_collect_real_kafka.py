"""`isrwatch collect` against a real Kafka 4.3 cluster (testing/kafka/), through validate and the alerts job.

The cluster is the package's (tests/collector/conftest.py's collect_cluster): 1 controller + 3 brokers on loopback,
replica.lag.time.max.ms 3 s so a stalled follower leaves the ISR within seconds. The collector runs in a thread
while the test stalls and kills brokers; then the pipeline runs available-now over what it wrote, and the
assertions read gold.alert_events.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from bench.fidelity import HEARTBEAT_S, within
from bench.fidelity_measures import Window, measure
from bench.fidelity_runs import emulate
from collector.canary import Canary
from collector.canary_feed import CanaryFeed
from collector.canary_state import CanaryState
from collector.canary_topic import CanaryConfig
from collector.collect_loop import Collector, CollectSettings
from foundation import object_store
from foundation.delta_io import read_rows
from schemas.bronze import BROKER_METRICS, CLUSTER_EVENTS, PARTITION_STATE, RUNS
from schemas.gold import ALERT_EVENTS
from schemas.silver import QUARANTINE_TABLES, SILVER_TABLES
from schemas.table import TableDef
from testing.kafka import KafkaCluster
from testing.s3proxy import S3Proxy
from tests.alerts.test_alerts_job import run_in_process
from tests.collector.kafka_logs import read_log
from tests.collector.real_cluster import TOPIC, Load, Running, isr_of, leaders_of, wait_for
from tests.pipeline.test_validate import validate

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 0.5
# Intervals with broker 3 paused (each at least the collector's 1 s): past its fence (~9 s), BrokerNotReporting's
# 15 s of silence and UnderReplicated's 30 s.
PAUSED_INTERVALS = 40


@pytest.fixture(scope="module")
def cluster(collect_cluster: KafkaCluster) -> KafkaCluster:
    return collect_cluster


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One lakehouse for the module's collector runs (each its own run id, so its own cluster in the alerts):
    validate and the alerts job run once over all of them."""
    return str(tmp_path_factory.mktemp("collected") / "lakehouse")


@pytest.fixture(scope="module")
def stalled_follower_run(cluster: KafkaCluster, lake: str) -> dict[str, Any]:
    """Collect while broker 3 is SIGSTOPped for 40 s, then until every ISR is whole again."""
    collector = Collector(CollectSettings(cluster.bootstrap_servers.split(","), lake,
                                          metrics_urls={None: cluster.metrics_urls}, interval_s=1.0,
                                          timeout_s=TIMEOUT_S))
    with Load(cluster.bootstrap_servers), Running(collector) as running:
        # Broker 3 must have reported before it stalls: BrokerNotReporting is about a broker gone silent, and
        # on a loaded machine its exporter's first answers can miss the 0.5 s timeout for a few intervals.
        wait_for(lambda: 3 in collector.metrics_urls and not collector.unassigned_urls, 60,
                 "every node's exporter answering")
        seen_at = len(running.steps)
        wait_for(lambda: len(running.steps) >= seen_at + 3, 30, "three intervals with broker 3 reporting")
        cluster.pause(3)
        try:   # the package's other tests share this cluster: it is given back whole even when the wait fails
            paused_at, paused_wall = time.monotonic(), time.time()
            # Counted in the collector's intervals, not in seconds of a machine the suite shares.
            first = len(running.steps)
            wait_for(lambda: sum(3 in s["not_answering"] for s in running.steps[first:]) >= PAUSED_INTERVALS, 300,
                     f"{PAUSED_INTERVALS} intervals with broker 3 paused")
        finally:
            cluster.resume(3)
        resumed_at, resumed_wall = time.monotonic(), time.time()
        wait_for(lambda: all(len(isr) == 3 for isr in isr_of(cluster).values()), 60, "the ISR to be whole again")
        whole = len(running.steps)
        wait_for(lambda: len(running.steps) >= whole + 5, 60, "five intervals with the ISR whole")
    return {"lake": lake, "steps": running.steps, "paused": (paused_at, resumed_at),
            "paused_wall": (paused_wall, resumed_wall), "run_id": collector.run_id}


def test_a_stalled_broker_does_not_stall_a_collection_interval(stalled_follower_run: dict[str, Any]) -> None:
    paused, resumed = stalled_follower_run["paused"]
    during = [s for s in stalled_follower_run["steps"] if paused < s["at"] < resumed]
    # Broker 3 answers nothing: each interval gives up on it (Metadata and the scrape side by side, each within its
    # request timeout) and still reads the cluster from the other brokers, every partition of it.
    assert sum(3 in s["not_answering"] for s in during) >= PAUSED_INTERVALS
    assert all(s["partitions"] == during[0]["partitions"] > 0 for s in during), during


def of_run(table: TableDef, lake: str, run_id: str) -> Any:
    frame = read_rows(table, lake).to_pandas()
    return frame[frame["run_id"] == run_id]


def test_the_collector_writes_the_emulators_tables_and_the_pipeline_fires_under_replicated(
        stalled_follower_run: dict[str, Any], pipelined: list[dict[str, Any]]) -> None:
    lake, run_id = stalled_follower_run["lake"], stalled_follower_run["run_id"]
    runs = of_run(RUNS, lake, run_id).sort_values("batch_id").to_dict("records")
    assert {list(r["broker_ids"]) == [1, 2, 3] for r in runs} == {True}
    assert list(runs[-1]["controller_ids"]) == [3000] and runs[-1]["final"]
    state = of_run(PARTITION_STATE, lake, run_id)
    # Until broker 3 resumed, only it left the ISR. After, on a loaded machine, a follower the CPU starved can
    # lag replica.lag.time.max.ms (3 s) and leave for a moment too: that is the cluster's doing, recorded as is.
    # A row's ts is when its interval began, and its answers may come after the resume: the rows of the last 2 s
    # before it (an interval and its request timeout) may already show the cluster after it (one CI run: ISR [3]).
    resumed = pd.Timestamp(stalled_follower_run["paused_wall"][1], unit="s", tz="UTC")
    stalled_until = resumed - pd.Timedelta(seconds=2)
    stalled = state[state["ts"] < stalled_until]
    shrunk = stalled[stalled["isr"].map(len) < 3]
    assert len(shrunk) >= 6 and set(shrunk["topic"]) == {TOPIC}
    assert (shrunk["isr"].map(lambda isr: 3 not in isr)).all(), shrunk
    # Replica log end offsets come from each broker (null while broker 3 does not answer); the HW never passes
    # the leader's.
    online = state[state["leader"] >= 0]
    leader_leo = online.apply(lambda r: r["replica_leos"][list(r["replicas"]).index(r["leader"])], axis=1)
    known = leader_leo.notna()
    assert known.mean() > 0.9 and (online["high_watermark"][known] <= leader_leo[known]).all()
    events = of_run(CLUSTER_EVENTS, lake, run_id)
    assert {"isr_expand", "broker_state"} <= set(events["event_type"])
    # Broker 3 leaves the ISR either by its leaders (replica.lag.time.max.ms, 3 s: `isr_shrink`) or, when the
    # controller fences it first (6 s session; a loaded machine delays the leaders' AlterPartition), by the
    # controller (`isr_change_controller`, cause fenced). Either way the event names broker 3 alone.
    stalled_events = events[events["ts"] < stalled_until]
    by_leader = stalled_events[stalled_events["event_type"] == "isr_shrink"]
    by_controller = stalled_events[(stalled_events["event_type"] == "isr_change_controller")
                                   & (stalled_events["cause"] == "fenced")]
    removed = {tuple(json.loads(d)["removed"]) for d in by_leader["detail"]}
    removed |= {tuple(sorted(set(json.loads(d)["previous_isr"]) - set(json.loads(d)["isr"])))
                for d in by_controller["detail"]}
    assert len(by_leader) + len(by_controller) >= 1 and removed == {(3,)}, stalled_events
    metrics = of_run(BROKER_METRICS, lake, run_id)
    assert {1, 2, 3, 3000} == set(metrics["broker_id"])
    # The leaders' IsrShrinksPerSec (it counts a shrink only when the controller's answer beats the metadata record,
    # Partition.submitAlterPartition: one run counted 0 of 6) is a counter of brokers never restarted: never down.
    shrinks = metrics[metrics["name"] == "IsrShrinksPerSec"].sort_values("ts")
    assert {1, 2} <= set(shrinks["broker_id"])
    for broker in (1, 2):
        counts = shrinks.loc[shrinks["broker_id"] == broker, "count"]
        assert len(counts) > 10 and counts.is_monotonic_increasing, counts.tolist()

    assert len(of_run(SILVER_TABLES["partition_state"], lake, run_id)) == len(state)
    alerts = [a for a in pipelined if a["labels"]["cluster"] == run_id]
    under = [a for a in alerts if a["rule"] == "UnderReplicated"]
    fired = {a["fingerprint"] for a in under if a["status"] == "firing"}
    assert len(fired) >= 4, "UnderReplicated fired for the partitions broker 3 follows"
    assert {a["labels"]["topic"] for a in under} == {TOPIC}
    resolved = {a["fingerprint"] for a in under if a["status"] == "resolved"}
    assert resolved == fired, "and each resolved once the ISR was whole"
    not_reporting = [a["labels"].get("broker_id") for a in alerts
                     if a["rule"] == "BrokerNotReporting" and a["status"] == "firing"]
    assert not_reporting == ["3"]


def test_a_bad_bootstrap_address_exits_non_zero_with_a_clear_message(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "isrwatch.cli", "collect", "--bootstrap-servers", "127.0.0.1:1",
                           "--lakehouse", str(tmp_path / "lake"), "--no-canary"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "no Kafka broker answered at 127.0.0.1:1" in done.stderr
    bad = subprocess.run([sys.executable, "-m", "isrwatch.cli", "collect", "--bootstrap-servers", "localhost",
                          "--lakehouse", str(tmp_path / "lake"), "--no-canary"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "bootstrap server 'localhost' is not HOST:PORT" in bad.stderr
    assert not (tmp_path / "lake").exists(), "nothing was written"


def test_the_collector_writes_its_tables_to_an_object_store_and_keeps_its_memory_on_local_disk(
        cluster: KafkaCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24: `isrwatch collect --lakehouse s3a://…` with a local `--state-dir`. Its bronze tables land as objects
    on an S3-compatible server (s3proxy on loopback) through delta-rs and read back there as the cluster was; the
    collector's memory stays on the local disk. (The canary's ack ledger goes through the same sink; the emulator's
    ack_ledger on the store is tested in tests/test_object_store.py.)"""
    with S3Proxy(tmp_path / "s3proxy") as s3:
        for key, value in s3.environment.items():   # the AWS SDK's variables, as a user sets them
            monkeypatch.setenv(key, value)
        object_store.use(None)
        try:
            lake, state = s3.uri("collected"), tmp_path / "state"
            collector = Collector(CollectSettings(cluster.bootstrap_servers.split(","), lake, state_dir=str(state),
                                                  metrics_urls={None: cluster.metrics_urls}, interval_s=1.0,
                                                  timeout_s=TIMEOUT_S))
            with Running(collector) as running:
                wait_for(lambda: len(running.steps) >= 3, 60, "three intervals")
            run_id = collector.run_id
            runs = of_run(RUNS, lake, run_id).sort_values("batch_id")
            assert len(runs) == len(running.steps) and runs["final"].tolist()[-1]
            assert {list(r) == [1, 2, 3] for r in runs["broker_ids"]} == {True}
            state_rows = of_run(PARTITION_STATE, lake, run_id)
            per_batch = state_rows[state_rows["topic"] == TOPIC].groupby("batch_id")["partition"].apply(sorted)
            assert len(per_batch) == len(runs) and {tuple(p) for p in per_batch} == {tuple(range(6))}
            assert {1, 2, 3, 3000} <= set(of_run(BROKER_METRICS, lake, run_id)["broker_id"])
            # Objects on the store, not files on a local path; the memory on the local disk, none on the store.
            stored = s3.folder / "data" / "lake" / "collected"
            assert (stored / "bronze" / "partition_state" / "_delta_log").is_dir()
            assert not (stored / "_collector").exists()
            assert [p.name for p in state.glob("_collector/*/*.json")] == ["partitions.json"]
        finally:
            object_store.use(None)


# ---- the canary through the pipeline: refused writes, then acknowledged records lost ----------------------

REFUSE_TOPIC = "canary-refuse"
BRONZE_TABLES = ("broker_metrics", "partition_state", "cluster_events", "runs", "topic_configs", "ack_ledger")
ALERT_RULES = ("UnderReplicated", "BrokerNotReporting", "UnderMinIsr", "ProduceNotEnoughReplicas", "AckedRecordsLost",
               "UncleanLeaderElection")
UNCLEAN_TOPIC = "canary-unclean"


class CanaryTotals:
    """The canary's intervals as the collector took them, summed per partition (on_step runs after each)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.acked: Counter[int] = Counter()
        self.failed: dict[int, Counter[str]] = {}
        self.lost: Counter[int] = Counter()
        self.intervals = 0

    def add(self, _status: dict[str, Any]) -> None:
        self.intervals += 1
        feed = self.collector.canary
        assert isinstance(feed, CanaryFeed)
        for p in feed.last.partitions if feed.last is not None else ():
            self.acked[p.partition] += p.records_acked
            self.failed.setdefault(p.partition, Counter()).update(p.failed_by_error)
            self.lost[p.partition] += p.records_lost


def canary_collector(cluster: KafkaCluster, lake: str, topic: str, **canary: Any) -> Collector:
    def start(_run_id: str, _state_dir: Path) -> CanaryFeed:
        config = CanaryConfig(cluster.bootstrap_servers, topic=topic, records_per_second=20.0, leader_grace_ms=2_000,
                              metadata_interval_ms=500, **canary)
        return CanaryFeed(Canary(config, lake).start())

    return Collector(CollectSettings(cluster.bootstrap_servers.split(","), lake,
                                     metrics_urls={None: cluster.metrics_urls}, interval_s=1.0, timeout_s=TIMEOUT_S),
                     canary_factory=start)


@pytest.fixture(scope="module")
def refusal_then_loss_run(cluster: KafkaCluster, lake: str) -> dict[str, Any]:
    """Two collector runs into one lakehouse, each with its canary:
    1. canary topic min ISR 2: brokers 2 and 3 paused until every partition refuses writes, then resumed;
    2. canary topic min ISR 1 with unclean elections: brokers 2 and 3 paused, broker 1 acknowledges alone and
       is killed, 2 and 3 resumed: the unclean election loses what broker 1 alone acknowledged."""
    first = canary_collector(cluster, lake, REFUSE_TOPIC)
    refusal = CanaryTotals(first)
    with Running(first, on_step=refusal.add):
        wait_for(lambda: min(refusal.acked[p] for p in range(3)) >= 10, 30, "canary writes acknowledged")
        cluster.pause(2)
        cluster.pause(3)
        try:   # given back whole even when the wait fails: the package's other tests share the cluster
            wait_for(lambda: all(refusal.failed.get(p, Counter())["NOT_ENOUGH_REPLICAS"] >= 3 for p in range(3)),
                     45, "NOT_ENOUGH_REPLICAS on every canary partition")
        finally:
            cluster.resume(2)
            cluster.resume(3)
        acked_at_resume = dict(refusal.acked)
        wait_for(lambda: all(len(isr) == 3 for isr in isr_of(cluster, REFUSE_TOPIC).values())
                 and all(refusal.acked[p] >= acked_at_resume[p] + 10 for p in range(3)), 60,
                 "the canary's ISR whole and writes acknowledged again")
        seen = refusal.intervals
        wait_for(lambda: refusal.intervals >= seen + 2, 60, "two more intervals: the collector records the ISR whole")

    second = canary_collector(cluster, lake, UNCLEAN_TOPIC, min_insync_replicas=1,
                              topic_config={"unclean.leader.election.enable": "true"})
    loss = CanaryTotals(second)
    try:
        with Running(second, on_step=loss.add):
            wait_for(lambda: min(loss.acked[p] for p in range(3)) >= 10, 30, "canary writes acknowledged")
            cluster.pause(2)
            cluster.pause(3)
            acked_at_pause = loss.acked[0]
            wait_for(lambda: loss.acked[0] >= acked_at_pause + 30, 30, "30 records acknowledged by broker 1 alone")
            cluster.kill(1)
            time.sleep(1.0)   # the delivery reports of what broker 1 answered before it died
            feed = second.canary
            assert isinstance(feed, CanaryFeed)
            acknowledged = CanaryState.load(feed.canary.save_state())
            cluster.resume(2)
            cluster.resume(3)
            # The controller fences broker 1 (6 s) and unfences 2 and 3 once they have caught up with the metadata
            # log; only then is one of them elected and the canary's writes acknowledged below what broker 1 acked.
            # With the suite's other worker on the same two cores that took over 45 s once.
            wait_for(lambda: loss.lost[0] > 0, 120, "the canary's loss on partition 0",
                     lambda: f"leaders and ISRs {leaders_of(cluster, UNCLEAN_TOPIC)}, acknowledged {dict(loss.acked)}, "
                             f"failed {loss.failed}")
            seen = loss.intervals   # the losses of the other partitions, reported in the same or the next interval
            wait_for(lambda: loss.intervals >= seen + 2, 60, "two more intervals after the first loss")
        assert acknowledged is not None
        log = read_log(cluster, UNCLEAN_TOPIC, [0, 1, 2], acknowledged.instance_id)
        truly_lost = {p: sum(1 for o, s in acknowledged.ledger(p).acked_records() if log[p].get(o) != s)
                      for p in range(3)}
    finally:
        # Whatever happened above, the module's other tests get the whole cluster back.
        for broker in (2, 3):
            if cluster.nodes[broker].paused:
                cluster.resume(broker)
        cluster.restart(1)
    return {"lake": lake, "runs": (first.run_id, second.run_id), "refusal": refusal, "loss": loss,
            "truly_lost": truly_lost}


@pytest.fixture(scope="module")
def pipelined(spark: Any, lake: str, stalled_follower_run: dict[str, Any], refusal_then_loss_run: dict[str, Any],
              tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """validate, then the alerts job, over every collector run of the module: nothing quarantined; the
    alert transitions, labels as a dict."""
    validate(spark, lake, BRONZE_TABLES)
    for name in BRONZE_TABLES:
        rejected = read_rows(QUARANTINE_TABLES[name], lake).to_pylist()
        assert rejected == [], f"collected {name} rows quarantined: {rejected[:3]}"
    raw = yaml.safe_load((ROOT / "conf/alerts.yaml").read_text())
    raw["rules"] = [r for r in raw["rules"] if r["name"] in ALERT_RULES]
    kept = {r["name"] for r in raw["rules"]}   # an inhibitor left out inhibits nothing
    for r in raw["rules"]:
        r["inhibited_by"] = [i for i in r.get("inhibited_by", []) if i["rule"] in kept]
    raw["receivers"] = []
    rules = tmp_path_factory.mktemp("rules") / "alerts.yaml"
    rules.write_text(yaml.safe_dump(raw))
    run_in_process(spark, lake, str(rules))
    return [{**a, "labels": dict(a["labels"])} for a in read_rows(ALERT_EVENTS, lake).to_pylist()]


def test_canary_refusals_and_unclean_losses_reach_the_ack_ledger_and_fire_alerts(
        refusal_then_loss_run: dict[str, Any], pipelined: list[dict[str, Any]]) -> None:
    lake = refusal_then_loss_run["lake"]
    refusal_run, loss_run = refusal_then_loss_run["runs"]
    ledger = read_rows(SILVER_TABLES["ack_ledger"], lake).to_pandas()
    assert set(ledger["acks"]) == {"all"} and set(ledger["run_id"]) == {refusal_run, loss_run}

    refused = ledger[ledger["run_id"] == refusal_run].groupby("partition")[
        ["records_acked", "records_failed", "records_lost"]].sum()
    refusal: CanaryTotals = refusal_then_loss_run["refusal"]
    assert refused["records_acked"].to_dict() == dict(refusal.acked), "every interval's counts reached silver"
    assert (refused["records_failed"] > 0).all() and refused["records_lost"].sum() == 0
    events = read_rows(SILVER_TABLES["cluster_events"], lake).to_pandas()
    rejections = events[(events["run_id"] == refusal_run) & (events["event_type"] == "produce_rejected")]
    assert set(rejections.loc[rejections["cause"] == "NOT_ENOUGH_REPLICAS", "partition"]) == {0, 1, 2}

    lost = ledger[(ledger["run_id"] == loss_run) & (ledger["records_lost"] > 0)]
    truly_lost = refusal_then_loss_run["truly_lost"]
    assert truly_lost[0] > 0, "broker 1 alone acknowledged records the unclean election lost"
    assert lost.groupby("partition")["records_lost"].sum().to_dict() == {p: n for p, n in truly_lost.items() if n}
    assert set(lost["lost_by"]) == {"unclean_election"}
    causes = events[(events["run_id"] == loss_run) & (events["event_type"] == "records_lost")]
    assert set(causes["cause"]) == {"unclean_election"} and causes["records"].sum() == sum(truly_lost.values())

    def firing(rule: str, run_id: str, topic: str | None = None) -> set[str]:
        return {a["labels"].get("partition") or a["labels"].get("broker_id") or "" for a in pipelined
                if a["rule"] == rule and a["status"] == "firing" and a["labels"]["cluster"] == run_id
                and (topic is None or a["labels"].get("topic") == topic)}

    assert firing("UnderMinIsr", refusal_run, REFUSE_TOPIC) == {"0", "1", "2"}
    assert "1" in firing("ProduceNotEnoughReplicas", refusal_run), "broker 1 refused acks=all writes"
    assert firing("AckedRecordsLost", refusal_run) == set()
    assert firing("AckedRecordsLost", loss_run, UNCLEAN_TOPIC) == {str(p) for p, n in truly_lost.items() if n}
    assert firing("UncleanLeaderElection", loss_run) != set()


def test_ctrl_c_ends_the_interval_marks_the_last_batch_final_and_exits_zero(cluster: KafkaCluster,
                                                                            tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    process = subprocess.Popen([sys.executable, "-m", "isrwatch.cli", "collect", "--bootstrap-servers",
                                cluster.bootstrap_servers, "--lakehouse", str(lake), "--no-canary",
                                *[a for url in cluster.metrics_urls for a in ("--metrics-url", url)]],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert process.stdout is not None
        progress = [process.stdout.readline() for _ in range(4)]   # the banner and three intervals
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert progress[0].startswith(f"isrwatch collect: cluster {cluster.cluster_id}, run kafka-")
    assert [line.split(":")[0] for line in progress[1:]] == ["collect batch 0", "collect batch 1", "collect batch 2"]
    assert "stopping after this interval" in err
    batches = int(out.strip().splitlines()[-1].split("stopped after ")[1].split(" batches")[0])
    runs = sorted(read_rows(RUNS, str(lake)).to_pylist(), key=lambda r: r["batch_id"])
    assert [r["batch_id"] for r in runs] == list(range(batches))
    assert [r["final"] for r in runs] == [False] * (batches - 1) + [True]
    state = read_rows(PARTITION_STATE, str(lake)).to_pandas()
    assert set(state["batch_id"]) == set(range(batches)) and TOPIC in set(state["topic"])


def test_the_emulator_agrees_with_this_cluster_on_a_stalled_follower(stalled_follower_run: dict[str, Any],
                                                                      tmp_path: Path) -> None:
    """bench/fidelity.py's stall-follower row, fast: the emulator, given this cluster's topology, settings and
    fault times, fences broker 3, drops it from the ISR, moves its leaderships, keeps the HW moving and takes it
    back as the real cluster did: times within one heartbeat interval (2 s; the collector read the cluster once
    a second), the same under-replicated gauges and leader changes."""
    lake, run_id = stalled_follower_run["lake"], stalled_follower_run["run_id"]
    state = of_run(PARTITION_STATE, lake, run_id)
    t0_ms = int(state["ts"].min().value // 1_000_000_000) * 1000   # a scenario starts on a whole second
    end_ms = int(state["ts"].max().value // 1_000_000)
    paused_ms, resumed_ms = (int(t * 1000) for t in stalled_follower_run["paused_wall"])
    first = state[state["ts"] == state["ts"].min()].sort_values("partition")
    scenario = {
        "name": "fidelity-fast", "seed": 1, "duration": f"{end_ms - t0_ms}ms",
        "metric_interval": "1s", "start_time": pd.Timestamp(t0_ms, unit="ms").strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cluster": {"brokers": 3, "racks": ["rack-a", "rack-b", "rack-c"],
                    "config": {"replica.lag.time.max.ms": 3000, "broker.session.timeout.ms": 6000}},
        "topics": [{"name": TOPIC, "partitions": 6, "replication.factor": 3, "config": {"min.insync.replicas": 2},
                    "assignment": [[int(b) for b in r] for r in first["replicas"]]}],
        "workload": {"producers": [{"name": "load", "topic": TOPIC, "acks": 1, "rate": 300, "record.bytes": 100,
                                    "linger.ms": 5}]},
        "faults": [{"at": f"{paused_ms - t0_ms}ms", "kind": "pause", "broker": 3,
                    "duration": f"{resumed_ms - paused_ms}ms"}],
    }
    emulated_run, _summary = emulate(scenario, tmp_path / "emulated")
    window = Window((3,), paused_ms, resumed_ms)
    real = measure(lake, run_id, window, min_isr=2)
    emulated = measure(str(tmp_path / "emulated"), emulated_run, window, min_isr=2)
    # The bench holds times to one heartbeat interval on an idle machine. Here the rest of the suite shares the two
    # cores: a starved broker only ever acts later (CI once saw broker 3 back in every ISR 3.7 s after its resume,
    # against 0.6-1.9 s idle), never earlier, so the real cluster may trail the emulator by one interval more.
    for name in ("fence_s", "shrink_s", "rejoin_s"):
        assert within(name, [emulated[name]], [real[name]]) or (
            0 <= real[name] - emulated[name] <= 2 * HEARTBEAT_S), (name, real[name], emulated[name])
    for name in ("leader_changes", "hw_advance_under_min_isr"):
        assert emulated[name] == real[name], (name, real[name], emulated[name])
    # Per broker, a gauge that stayed 0 reads as one never reported (as the bench reads them): a collector read
    # stamped at its interval's start can reach the stalled broker just before its pause or just after its resume.
    for name in ("max UnderReplicatedPartitions", "max UnderMinIsrPartitionCount"):
        emulated_max, real_max = ({b: v for b, v in m[name].items() if v} for m in (emulated, real))
        assert emulated_max == real_max, (name, real[name], emulated[name])


