"""Kafka's broker and controller metrics under their MBean names: the vocabulary of bronze.broker_metrics.

Whichever bronze writer produced a row (the emulator, a collector reading a real cluster), a metric key is
the MBean's `name` key, with the error code appended for the produce error meters
(`ErrorsPerSec:NOT_ENOUGH_REPLICAS`). Meters are a cumulative count plus a rate; the rest are gauges.
"""

from __future__ import annotations

# Kafka's produce error codes the metrics break out (Errors.java names).
PRODUCE_ERRORS = ("NOT_LEADER_OR_FOLLOWER", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
                  "REQUEST_TIMED_OUT")

# The node id under which controller metrics are recorded (KRaft controllers have their own node ids; the
# emulator's single active controller uses this one).
CONTROLLER_NODE_ID = 3000

MBEANS: dict[str, str] = {
    "UnderReplicatedPartitions": "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
    "UnderMinIsrPartitionCount": "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount",
    "AtMinIsrPartitionCount": "kafka.server:type=ReplicaManager,name=AtMinIsrPartitionCount",
    "PartitionCount": "kafka.server:type=ReplicaManager,name=PartitionCount",
    "LeaderCount": "kafka.server:type=ReplicaManager,name=LeaderCount",
    "IsrShrinksPerSec": "kafka.server:type=ReplicaManager,name=IsrShrinksPerSec",
    "IsrExpandsPerSec": "kafka.server:type=ReplicaManager,name=IsrExpandsPerSec",
    "FailedIsrUpdatesPerSec": "kafka.server:type=ReplicaManager,name=FailedIsrUpdatesPerSec",
    "MaxLag": "kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica",
    "MessagesInPerSec": "kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec",
    "BytesInPerSec": "kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec",
    "OfflinePartitionsCount": "kafka.controller:type=KafkaController,name=OfflinePartitionsCount",
    "ActiveControllerCount": "kafka.controller:type=KafkaController,name=ActiveControllerCount",
    "FencedBrokerCount": "kafka.controller:type=KafkaController,name=FencedBrokerCount",
    "ActiveBrokerCount": "kafka.controller:type=KafkaController,name=ActiveBrokerCount",
    "GlobalPartitionCount": "kafka.controller:type=KafkaController,name=GlobalPartitionCount",
    "UncleanLeaderElectionsPerSec": "kafka.controller:type=ControllerStats,name=UncleanLeaderElectionsPerSec",
    "LeaderElectionRateAndTimeMs": "kafka.controller:type=ControllerStats,name=LeaderElectionRateAndTimeMs",
}
for _code in PRODUCE_ERRORS:
    MBEANS[f"ErrorsPerSec:{_code}"] = (
        f"kafka.network:type=RequestMetrics,name=ErrorsPerSec,request=Produce,error={_code}")

BROKER_METERS = ("IsrShrinksPerSec", "IsrExpandsPerSec", "FailedIsrUpdatesPerSec", "MessagesInPerSec",
                 "BytesInPerSec", *(f"ErrorsPerSec:{c}" for c in PRODUCE_ERRORS))
CONTROLLER_METERS = ("UncleanLeaderElectionsPerSec", "LeaderElectionRateAndTimeMs")

# The metrics of each role: a broker registers the kafka.server and kafka.network MBeans, the active controller the
# kafka.controller ones (a KRaft controller also exports idle BrokerTopicMetrics, not counted as a broker's).
CONTROLLER_KEYS = tuple(k for k in MBEANS if MBEANS[k].startswith("kafka.controller:"))
BROKER_KEYS = tuple(k for k in MBEANS if k not in CONTROLLER_KEYS)


def metric_name(key: str) -> str:
    """The MBean `name` key of a metric (error-specific meters share the name ErrorsPerSec)."""
    return key.split(":", 1)[0]
