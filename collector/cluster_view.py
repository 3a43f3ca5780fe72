"""What a Kafka cluster says about itself in one collection interval, asked broker by broker.

Per interval: a Metadata request to every broker (the one that gave the last view while it answers, else the
lowest id that answers, gives the partition view; the others' answers say they are alive),
DescribeTopicPartitions to that broker for the eligible leader replicas when ELR is on (Metadata does not carry
them; its answer, leader, ISR and ELR of one moment, replaces the Metadata's for the partitions it covers),
ListOffsets to each leader for its partitions' high watermarks, and ListOffsets as a debugging replica (replica
id -2) to every broker for the log end offset of each replica it hosts: Kafka answers that one from a follower's
own log too, with the log end offset rather than the high watermark. The requests grow with brokers, not
partitions. Topic configs (DescribeConfigs), the cluster's finalized features (ApiVersions) and the leaders' log
start offsets are read at start, when a topic appears, and every `config_every` intervals.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kafka.protocol.admin.configs import DescribeConfigsRequest, DescribeConfigsResponse
from kafka.protocol.admin.topics import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse

from collector.client_security import PLAINTEXT_SECURITY, ClientSecurity
from collector.kafka_wire import BrokerConnection, BrokerSecurityError, BrokerUnavailable, PreEncoded
from collector.metadata_key import metadata_key, metadata_key_checked

METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 8
DESCRIBE_CONFIGS_VERSION = 4
API_VERSIONS_VERSION = 3
LATEST_OFFSET = -1
EARLIEST_OFFSET = -2
CONSUMER_REPLICA_ID = -1     # answered by the leader only: LATEST is the high watermark
DEBUGGING_REPLICA_ID = -2    # answered by any replica from its own log: LATEST is its log end offset
TOPIC_RESOURCE = 2
ELR_FEATURE = "eligible.leader.replicas.version"
# The topic settings bronze.topic_configs records; DescribeConfigs gives each one's effective value
# (the topic's own, else the broker's, else Kafka's default).
TOPIC_CONFIG_KEYS = ("min.insync.replicas", "unclean.leader.election.enable", "segment.bytes", "retention.ms",
                     "flush.messages")

TopicPartition = tuple[str, int]


class CollectorError(Exception):
    """The cluster cannot be read at all (no broker answers, or an address is wrong)."""


@dataclass(frozen=True)
class Partition:
    topic: str
    partition: int
    leader: int                      # -1 when offline
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True)
class Broker:
    node_id: int
    address: str
    rack: str | None


@dataclass(frozen=True)
class TopicConfig:
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    unclean_leader_election_enable: bool
    segment_bytes: int
    retention_ms: int
    flush_messages: int

    @property
    def effective_min_isr(self) -> int:
        """Kafka caps min.insync.replicas at the replication factor (the effectiveMinIsr of Partition.scala)."""
        return min(self.min_insync_replicas, self.replication_factor)


@dataclass
class ClusterView:
    ts_ms: int
    cluster_id: str
    brokers: dict[int, Broker]                 # registered brokers the metadata lists (fenced ones are not)
    not_answering: dict[int, str]              # node id -> why its Metadata request failed
    partitions: dict[TopicPartition, Partition]
    high_watermarks: dict[TopicPartition, int]  # only partitions whose leader answered ListOffsets
    log_end_offsets: dict[TopicPartition, dict[int, int]]   # replica (broker id) -> its LEO, where it answered
    log_start_offsets: dict[TopicPartition, int]            # the leader's, when read this interval
    elr_enabled: bool
    step_ms: dict[str, float] = field(default_factory=dict)


class ClusterReader:
    """Reads the cluster every interval through one connection per broker, each request under `timeout_s`."""

    def __init__(self, bootstrap_servers: Iterable[str], *, timeout_s: float = 0.5, config_every: int = 30,
                 security: ClientSecurity = PLAINTEXT_SECURITY) -> None:
        self.bootstrap = [a.strip() for a in bootstrap_servers if a.strip()]
        if not self.bootstrap:
            raise CollectorError("no bootstrap server given: pass --bootstrap-servers HOST:PORT[,HOST:PORT…]")
        for address in self.bootstrap:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit():
                raise CollectorError(f"bootstrap server {address!r} is not HOST:PORT")
        self.timeout_s = timeout_s
        self.config_every = config_every
        self.security = security
        self.connections: dict[int, BrokerConnection] = {}
        self.addresses: dict[int, str] = {}
        self.cluster_id = ""
        self.topic_configs: dict[str, TopicConfig] = {}
        self.elr_enabled = False
        self._reads = 0
        self.log_start_offsets: dict[TopicPartition, int] = {}
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="isrwatch-collect")
        self._offset_requests: dict[tuple[int, int, int], tuple[list[TopicPartition], PreEncoded]] = {}
        self._last_metadata: tuple[bytes, Any] | None = None   # (metadata_key, decoded) of the last full answer
        self._last_partitions: tuple[Any, dict[TopicPartition, Partition]] | None = None
        self._primary: int | None = None   # the broker whose Metadata answer gave the last view
        self._unanswered: dict[int, Future[Any]] = {}   # node -> its last Metadata request, not answered

    def close(self) -> None:
        for conn in self.connections.values():
            conn.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---- start -------------------------------------------------------------------------------------

    def connect(self) -> None:
        """Learn the brokers from the first bootstrap address that answers; a clear error if none does."""
        errors: list[str] = []
        for address in self.bootstrap:
            conn = BrokerConnection(address, self.timeout_s * 4, self.security)
            try:
                meta = conn.request(MetadataRequest(topics=[], allow_auto_topic_creation=False),
                                    MetadataResponse, METADATA_VERSION)
            except BrokerSecurityError as e:
                # The other bootstrap brokers would refuse the same settings: say so at once.
                raise CollectorError(f"cannot connect to Kafka: {e}") from None
            except BrokerUnavailable as e:
                errors.append(str(e))
                continue
            finally:
                conn.close()
            self.cluster_id = meta.cluster_id or ""
            self._learn_brokers(meta)
            self._read_features()
            return
        raise CollectorError("no Kafka broker answered at " + ", ".join(self.bootstrap) + ": " + "; ".join(errors))

    def _learn_brokers(self, meta: Any) -> dict[int, Broker]:
        brokers = {}
        for b in meta.brokers:
            address = f"{b.host}:{b.port}"
            brokers[b.node_id] = Broker(b.node_id, address, b.rack or None)
            if self.addresses.get(b.node_id) != address:
                if b.node_id in self.connections:
                    self.connections[b.node_id].close()
                self.addresses[b.node_id] = address
                self.connections[b.node_id] = BrokerConnection(address, self.timeout_s, self.security)
        return brokers

    # ---- one interval ------------------------------------------------------------------------------

    def read(self, now_ms: int) -> ClusterView:
        steps: dict[str, float] = {}
        t0 = time.perf_counter()
        nodes = sorted(self.connections)
        # One broker is asked for every topic; the others only for the broker list (a liveness answer that
        # costs them, and us, nothing per partition). It is the one that gave the last view while it answers
        # (a broker's metadata lags the controller's by its own fetches: switching brokers can step back in
        # time), else the lowest id that answers, asked again for the topics.
        wanted = self._primary if self._primary in self.connections else nodes[0]
        answers = self._metadata_answers(nodes, wanted)
        not_answering = {n: a for n, a in answers.items() if isinstance(a, str)}
        answered = [n for n in nodes if n not in not_answering]
        if not answered:
            steps["metadata"] = (time.perf_counter() - t0) * 1000
            return ClusterView(now_ms, self.cluster_id, {}, not_answering, {}, {}, {}, {}, self.elr_enabled, steps)
        primary = wanted if wanted in answered else answered[0]
        meta = answers[primary]
        if primary != wanted:
            meta = self._metadata(primary, True)
            if isinstance(meta, str):
                not_answering[primary] = meta
                steps["metadata"] = (time.perf_counter() - t0) * 1000
                return ClusterView(now_ms, self.cluster_id, {}, not_answering, {}, {}, {}, {}, self.elr_enabled, steps)
        steps["metadata"] = (time.perf_counter() - t0) * 1000
        self._primary = primary
        brokers = self._learn_brokers(meta)
        partitions = self._partitions_of(meta)
        self._reads += 1
        new_topics = {tp[0] for tp in partitions} - set(self.topic_configs)
        alive = set(answered)
        if new_topics or self._reads % self.config_every == 1 or self.config_every == 1:
            t = time.perf_counter()
            self._read_features(primary)
            self._read_topic_configs(primary, {tp[0] for tp in partitions}, partitions)
            self.log_start_offsets.update(self._offsets_by_leader(partitions, alive, CONSUMER_REPLICA_ID,
                                                                  EARLIEST_OFFSET))
            steps["configs"] = (time.perf_counter() - t) * 1000
        if self.elr_enabled and partitions:
            t = time.perf_counter()
            partitions = self._with_elr(primary, partitions)
            steps["elr"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        # High watermarks first, log end offsets after: a leader's LEO read later is at least the HW read
        # before it (the HW never passes the leader's LEO), so the pair in a row is one Kafka could show.
        hws = self._offsets_by_leader(partitions, alive, CONSUMER_REPLICA_ID, LATEST_OFFSET)
        leos = self._log_end_offsets(partitions, alive)
        steps["list_offsets"] = (time.perf_counter() - t) * 1000
        starts = {tp: self.log_start_offsets[tp] for tp in partitions if tp in self.log_start_offsets}
        return ClusterView(now_ms, self.cluster_id, brokers, not_answering, partitions, hws, leos, starts,
                           self.elr_enabled, steps)

    def _metadata_answers(self, nodes: list[int], wanted: int) -> dict[int, Any]:
        """Each node's Metadata answer, or why not. A node that did not answer the last interval does not hold this
        one: it is asked beside the others and counts as answering if its answer is back once theirs are, or if the
        request an earlier interval gave up on has been answered since; while that request is still out it is not
        asked again. (A stalled broker otherwise cost every interval its full request timeout, and the view of a
        fenced broker's partitions reached bronze that much later.)"""
        waited = {n: self._pool.submit(self._metadata, n, n == wanted) for n in nodes
                  if n == wanted or n not in self._unanswered}
        late = {n: self._unanswered[n] for n in nodes if n not in waited}
        for n, request in late.items():
            if request.done() and isinstance(request.result(), str):
                late[n] = self._pool.submit(self._metadata, n, False)
        answers = {n: future.result() for n, future in waited.items()}
        for n, request in late.items():
            answers[n] = request.result() if request.done() else (
                f"broker {self.addresses.get(n, n)}: no answer yet (nor to the last interval's request)")
        requests = {**waited, **late}
        self._unanswered = {n: requests[n] for n, answer in answers.items() if isinstance(answer, str)}
        return {n: answers[n] for n in nodes}

    def _metadata(self, node: int, all_topics: bool) -> Any:
        """The node's Metadata answer (every topic, or none: topics=[] asks only for the brokers), or why not.
        An answer for every topic that is byte for byte the previous one is the previous decoded answer."""
        request = MetadataRequest(topics=None if all_topics else [], allow_auto_topic_creation=False)
        try:
            if not all_topics:
                return self.connections[node].request(request, MetadataResponse, METADATA_VERSION)
            body = self.connections[node].request_bytes(request, METADATA_VERSION)
        except BrokerUnavailable as e:
            return str(e)
        # Decoding an answer for 3,000 partitions costs ~20 ms of Python and building the partitions from it ~15
        # ms; most intervals the answer is the previous one. KRaft brokers put a random broker in controller_id,
        # so the answers are compared without it (metadata_key).
        key = metadata_key(body)
        if self._last_metadata is not None and self._last_metadata[0] == key:
            return self._last_metadata[1]
        meta = MetadataResponse.decode(body, version=METADATA_VERSION, header=True)
        self._last_metadata = (key if metadata_key_checked(body, meta) else b"", meta)
        return meta

    def _partitions_of(self, meta: Any) -> dict[TopicPartition, Partition]:
        """_partitions(meta), kept for the last answer: the same decoded answer gives the same partitions."""
        if self._last_partitions is None or self._last_partitions[0] is not meta:
            self._last_partitions = (meta, self._partitions(meta))
        return dict(self._last_partitions[1])

    @staticmethod
    def _partitions(meta: Any) -> dict[TopicPartition, Partition]:
        out: dict[TopicPartition, Partition] = {}
        for t in meta.topics:
            if t.is_internal or t.error_code != 0:
                continue
            for p in t.partitions:
                out[(t.name, p.partition_index)] = Partition(
                    t.name, p.partition_index, p.leader_id, max(p.leader_epoch, 0), tuple(p.replica_nodes),
                    tuple(p.isr_nodes), (), tuple(p.offline_replicas))
        return dict(sorted(out.items()))

    def _with_elr(self, node: int, partitions: dict[TopicPartition, Partition]) -> dict[TopicPartition, Partition]:
        # Only the topics where a partition can have eligible leader replicas are asked. Kafka's controller
        # (PartitionChangeBuilder.maybePopulateTargetElr) clears the ELR whenever the ISR is at least
        # min.insync.replicas and otherwise takes it from the previous ISR and ELR less the new ISR: a partition
        # whose ISR holds every replica and reaches the topic's min ISR has none, and asking for it (3,000
        # partitions decoded again in Python, ~30 ms) would only return the empty ELR the Metadata view has.
        topics = sorted({tp[0] for tp, p in partitions.items() if len(p.isr) < max(
            len(p.replicas), self._min_isr(tp[0]))})
        if not topics:
            return partitions
        # The answer carries each partition's leader, epoch, replicas and ISR beside its ELR, from one moment of the
        # broker's metadata: they replace the Metadata answer's, which is older (the other brokers' Metadata
        # answers, up to a timeout, are waited for in between). An ELR from one answer beside an ISR from the other
        # could show a replica in both, which Kafka never does.
        fresh: dict[TopicPartition, Partition] = {}
        cursor = None
        try:
            while True:
                req = DescribeTopicPartitionsRequest(
                    topics=[DescribeTopicPartitionsRequest.TopicRequest(name=t) for t in topics],
                    response_partition_limit=2000, cursor=cursor)
                resp = self.connections[node].request(req, DescribeTopicPartitionsResponse, 0)
                for t in resp.topics:
                    if t.error_code != 0:
                        continue
                    for p in t.partitions:
                        if p.error_code == 0:
                            fresh[(t.name, p.partition_index)] = Partition(
                                t.name, p.partition_index, p.leader_id, max(p.leader_epoch, 0),
                                tuple(p.replica_nodes), tuple(p.isr_nodes), tuple(p.eligible_leader_replicas or ()),
                                tuple(p.offline_replicas or ()))
                if resp.next_cursor is None:
                    break
                cursor = DescribeTopicPartitionsRequest.Cursor(topic_name=resp.next_cursor.topic_name,
                                                               partition_index=resp.next_cursor.partition_index)
        except BrokerUnavailable:
            return partitions  # ELR unknown this interval: reported empty rather than guessed
        return {tp: fresh.get(tp, p) for tp, p in partitions.items()}

    def _min_isr(self, topic: str) -> int:
        config = self.topic_configs.get(topic)
        return config.min_insync_replicas if config is not None else 2**31  # unknown: always asked

    def _offsets_by_leader(self, partitions: dict[TopicPartition, Partition], alive: set[int], replica_id: int,
                           timestamp: int) -> dict[TopicPartition, int]:
        """One ListOffsets per answering leader for the partitions it leads."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, p in partitions.items():
            if p.leader in alive and p.leader in self.connections:
                by_leader.setdefault(p.leader, []).append(tp)
        out: dict[TopicPartition, int] = {}
        for result in self._pool.map(lambda item: self._list_offsets(item[0], item[1], replica_id, timestamp),
                                     sorted(by_leader.items())):
            out.update(result)
        return out

    def _log_end_offsets(self, partitions: dict[TopicPartition, Partition],
                         alive: set[int]) -> dict[TopicPartition, dict[int, int]]:
        """One ListOffsets per answering broker, as a debugging replica, for every replica it hosts."""
        hosted: dict[int, list[TopicPartition]] = {}
        for tp, p in partitions.items():
            for b in p.replicas:
                if b in alive and b in self.connections:
                    hosted.setdefault(b, []).append(tp)
        brokers = sorted(hosted)
        results = self._pool.map(lambda b: self._list_offsets(b, hosted[b], DEBUGGING_REPLICA_ID, LATEST_OFFSET),
                                 brokers)
        out: dict[TopicPartition, dict[int, int]] = {}
        for b, result in zip(brokers, results, strict=True):
            for tp, leo in result.items():
                out.setdefault(tp, {})[b] = leo
        return out

    def _list_offsets(self, broker: int, tps: list[TopicPartition], replica_id: int,
                      timestamp: int) -> dict[TopicPartition, int]:
        # The same broker is asked for the same partitions interval after interval: the request is built and
        # encoded again only when its partitions change (one cached request per broker and kind of offset).
        key = (broker, replica_id, timestamp)
        cached = self._offset_requests.get(key)
        if cached is not None and cached[0] == tps:
            req = cached[1]
        else:
            topics: dict[str, list[int]] = {}
            for topic, partition in tps:
                topics.setdefault(topic, []).append(partition)
            lt = ListOffsetsRequest.ListOffsetsTopic
            req = PreEncoded(ListOffsetsRequest(replica_id=replica_id, isolation_level=0, topics=[
                lt(name=t, partitions=[lt.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in ps])
                for t, ps in topics.items()]), LIST_OFFSETS_VERSION)
            self._offset_requests[key] = (list(tps), req)
        try:
            resp = self.connections[broker].request(req, ListOffsetsResponse, LIST_OFFSETS_VERSION)
        except BrokerUnavailable:
            return {}
        # A partition whose leadership moved since the Metadata answer gets an error: no offset this interval.
        return {(t.name, p.partition_index): p.offset for t in resp.topics for p in t.partitions if p.error_code == 0}

    # ---- configs and features ----------------------------------------------------------------------

    def _read_features(self, node: int | None = None) -> None:
        conns = [self.connections[node]] if node is not None else list(self.connections.values())
        for conn in conns:
            try:
                resp = conn.request(ApiVersionsRequest(client_software_name="isrwatch", client_software_version="1"),
                                    ApiVersionsResponse, API_VERSIONS_VERSION)
            except BrokerUnavailable:
                continue
            levels = {f.name: f.max_version_level for f in (resp.finalized_features or [])}
            self.elr_enabled = levels.get(ELR_FEATURE, 0) >= 1
            return

    def _read_topic_configs(self, node: int, topics: set[str], partitions: dict[TopicPartition, Partition]) -> None:
        if not topics:
            return
        resource = DescribeConfigsRequest.DescribeConfigsResource
        req = DescribeConfigsRequest(resources=[resource(resource_type=TOPIC_RESOURCE, resource_name=t,
                                                         configuration_keys=list(TOPIC_CONFIG_KEYS))
                                                for t in sorted(topics)],
                                     include_synonyms=False, include_documentation=False)
        try:
            resp = self.connections[node].request(req, DescribeConfigsResponse, DESCRIBE_CONFIGS_VERSION)
        except BrokerUnavailable:
            return
        counts: dict[str, int] = {}
        rf: dict[str, int] = {}
        for (topic, _), p in partitions.items():
            counts[topic] = counts.get(topic, 0) + 1
            rf[topic] = max(rf.get(topic, 0), len(p.replicas))
        for r in resp.results:
            if r.error_code != 0 or r.resource_name not in counts:
                continue
            values = {c.name: c.value for c in r.configs}
            self.topic_configs[r.resource_name] = TopicConfig(
                partitions=counts[r.resource_name], replication_factor=rf[r.resource_name],
                min_insync_replicas=int(values.get("min.insync.replicas") or 1),
                unclean_leader_election_enable=(values.get("unclean.leader.election.enable") or "false") == "true",
                segment_bytes=int(values.get("segment.bytes") or 1073741824),
                retention_ms=int(values.get("retention.ms") or 604800000),
                flush_messages=int(values.get("flush.messages") or 9223372036854775807))
