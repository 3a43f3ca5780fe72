"""A controlled shutdown as `isrwatch collect` sees it on a real Kafka 4.3 cluster (the package's shared cluster,
tests/collector/conftest.py): when Kafka begins it, not when the broker leaves the metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, TopicPartition

from collector.collect_loop import Collector, CollectSettings
from schemas.bronze import CLUSTER_EVENTS
from testing.kafka import KafkaCluster
from tests.collector.real_cluster import TOPIC, Load, Running, isr_of, leaders_of, wait_for
from tests.collector.test_collect_real_kafka import TIMEOUT_S, of_run

pytestmark = pytest.mark.kafka


@pytest.fixture
def cluster(collect_cluster: KafkaCluster) -> KafkaCluster:
    return collect_cluster


def test_a_controlled_shutdown_is_seen_when_kafka_begins_it_not_when_the_broker_leaves(cluster: KafkaCluster,
                                                                                         tmp_path: Path) -> None:
    """Broker 2 restarted with SIGTERM (a controlled shutdown: Kafka moves its leaderships and takes it out of every
    ISR, seconds before it leaves the metadata) while the collector runs. The controlled shutdown is recorded at the
    view that shows the ISR removals, before the broker is fenced, once; its removals are the controller's (no
    isr_shrink of broker 2, nothing for IsrThrash); it is unfenced when it is back."""
    if not any(leader == 2 for leader, _ in leaders_of(cluster, TOPIC).values()):
        admin = cluster.admin_client()
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, p) for p in range(6)]).result(30)
    wait_for(lambda: any(leader == 2 for leader, _ in leaders_of(cluster, TOPIC).values()), 60,
             "broker 2 leading a partition", lambda: str(leaders_of(cluster, TOPIC)))
    lake = str(tmp_path / "lake")
    collector = Collector(CollectSettings(cluster.bootstrap_servers.split(","), lake, interval_s=1.0,
                                          timeout_s=TIMEOUT_S))
    with Load(cluster.bootstrap_servers), Running(collector) as running:
        wait_for(lambda: len(running.steps) >= 3, 60, "three intervals")
        cluster.restart(2)
        wait_for(lambda: all(len(isr) == 3 for isr in isr_of(cluster).values()), 120, "the ISR to be whole again")
        whole = len(running.steps)
        wait_for(lambda: len(running.steps) >= whole + 2, 60, "two intervals with the ISR whole")
    events = of_run(CLUSTER_EVENTS, lake, collector.run_id).sort_values(["ts", "seq"])
    mine = events[events["broker_id"] == 2]
    shutdown = mine[(mine["event_type"] == "broker_state") & (mine["cause"] == "controlled_shutdown")]
    fenced = mine[mine["event_type"] == "fenced"]
    unfenced = mine[mine["event_type"] == "unfenced"]
    assert len(shutdown) == 1 and len(fenced) == 1 and len(unfenced) == 1, mine[["ts", "event_type", "cause"]]
    assert shutdown["ts"].iloc[0] < fenced["ts"].iloc[0] < unfenced["ts"].iloc[0]
    removals = events[events["event_type"].isin(["isr_shrink", "isr_change_controller"])]
    removed_2 = removals[removals["detail"].map(
        lambda d: 2 in json.loads(d).get("removed", []) or 2 in set(json.loads(d).get("previous_isr", []))
        - set(json.loads(d)["isr"]))]
    assert len(removed_2) >= 6 and set(removed_2["event_type"]) == {"isr_change_controller"}, removed_2
    assert set(removed_2["cause"]) == {"controlled_shutdown"}
    assert removed_2["ts"].min() == shutdown["ts"].iloc[0], "seen in the view that shows the removals"
