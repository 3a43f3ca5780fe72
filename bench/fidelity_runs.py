"""The fidelity bench's runs: one fault plan on a real Kafka 4.3 cluster (watched by `isrwatch collect`) and in
the emulator, with the same topology, settings, workload and fault times, each into its own bronze lake.

Both sides: 1 controller + 3 brokers with Kafka's defaults (racks a, b, c), one topic of 6 partitions, RF 3,
leaders alternating between brokers 1 and 2 (broker 3 follows everywhere), one idempotent acks=all producer
(librdkafka on the real side, the emulator's model of it on the other) at 500 records/s of 100 bytes.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.fidelity_measures import Window

TOPIC = "fidelity"
PARTITIONS = 6
ASSIGNMENT = [[1, 2, 3] if p % 2 == 0 else [2, 1, 3] for p in range(PARTITIONS)]
RATE = 500
RECORD_BYTES = 100
# The producer's settings, the same on both sides (librdkafka's names; the emulator reads the Java ones).
PRODUCER = {"acks": "all", "enable.idempotence": True, "linger.ms": 5, "message.timeout.ms": 120_000,
            "socket.timeout.ms": 60_000, "request.timeout.ms": 30_000, "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1_000}
# The emulated brokers' time on each produce and fetch request (the emulator's request.handling.ms). This
# machine's real brokers, four JVMs and the collector on two cores, answer the producer's acks=all requests in
# 35-80 ms (p50, librdkafka's statistics) in the seconds before a fault, and its batches hold 5-7 records;
# 5 ms a request gives the emulated producer 52 ms and 4.3 records. The bench prints the real figures of every
# run (`producer before the fault`); batch sizes decide how many requests a stalled leader holds.
REQUEST_HANDLING_MS = 5


@dataclass(frozen=True)
class Plan:
    name: str
    description: str
    steps: tuple[tuple[float, str, tuple[int, ...]], ...]   # (seconds from start, pause|resume|kill|restart, brokers)
    duration_s: float
    window: tuple[tuple[int, ...], float, float]             # faulted brokers, fault at, healed at (seconds)
    topic_config: dict[str, str] = field(default_factory=lambda: {"min.insync.replicas": "2"})

    @property
    def min_isr(self) -> int:
        return int(self.topic_config["min.insync.replicas"])


PLANS = (
    Plan("stall-follower", "SIGSTOP broker 3 (a follower everywhere) for 40 s",
         ((10, "pause", (3,)), (50, "resume", (3,))), 75, ((3,), 10, 50)),
    Plan("kill-restart-follower", "SIGKILL broker 3, start it again 30 s later",
         ((10, "kill", (3,)), (40, "restart", (3,))), 80, ((3,), 10, 40)),
    Plan("stall-two", "SIGSTOP brokers 2 (leads half) and 3 for 40 s: below min ISR",
         ((10, "pause", (2, 3)), (50, "resume", (2, 3))), 80, ((2, 3), 10, 50)),
    Plan("kill-restart-leader", "SIGKILL broker 1 (leads half), start it again 30 s later",
         ((10, "kill", (1,)), (40, "restart", (1,))), 80, ((1,), 10, 40)),
    Plan("unclean-lagging", "min ISR 1, unclean elections on: SIGSTOP broker 3 for 15 s (it falls behind), then "
         "SIGKILL brokers 1 and 2 as it resumes: only the lagging replica is left to lead",
         ((10, "pause", (3,)), (25, "kill", (1, 2)), (25.5, "resume", (3,))), 60, ((1, 2), 25, 60),
         {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}),
)


@dataclass
class Outcome:
    """One run's bronze (lake, run id), its fault window in UTC ms, and the producer's own counts."""

    lake: str
    run_id: str
    window: Window
    acked: int
    failed: int
    lost: int
    client: dict[str, int]


def window_of(plan: Plan, t0_ms: int) -> Window:
    brokers, fault_s, heal_s = plan.window
    return Window(brokers, t0_ms + int(fault_s * 1000), t0_ms + int(heal_s * 1000))


# ---- the emulator ---------------------------------------------------------------------------------------

T0_MS = 1_767_225_600_000   # the emulator's start: 2026-01-01T00:00:00Z (scenario start_time's default)
# The real producer stops at the plan's end and flushes (its last requests are answered, none is cut off): the
# emulated one stops producing there too and the run goes on this long, so it is not cut off either.
FLUSH_MS = 5_000


def scenario_of(plan: Plan, seed: int, sample_ms: int = 250,
                recovery: tuple[int, float] | None = None) -> dict[str, Any]:
    """The plan as an emulator scenario, its state and metrics written every `sample_ms` (the bench passes the
    cadence the collector reached on the real runs, so that both sides are observed alike); a restarted broker
    recovers in `recovery` (log.recovery.ms, log.recovery.jitter) when given, as long as the real ones took."""
    cluster_config: dict[str, Any] = {"request.handling.ms": REQUEST_HANDLING_MS}
    if recovery:
        cluster_config.update({"log.recovery.ms": recovery[0], "log.recovery.jitter": recovery[1]})
    kinds = {"pause": "pause", "resume": "resume", "kill": "crash", "restart": "restart"}
    topic_config: dict[str, Any] = {"min.insync.replicas": plan.min_isr}
    if plan.topic_config.get("unclean.leader.election.enable") == "true":
        topic_config["unclean.leader.election.enable"] = True
    return {
        "name": f"fidelity-{plan.name}", "seed": seed, "duration": f"{int(plan.duration_s * 1000) + FLUSH_MS}ms",
        "metric_interval": f"{sample_ms}ms", "partition_state_interval": f"{sample_ms}ms",
        "flush_every_intervals": 40,
        "cluster": {"brokers": 3, "racks": ["rack-a", "rack-b", "rack-c"],
                    "config": cluster_config},
        "topics": [{"name": TOPIC, "partitions": PARTITIONS, "replication.factor": 3, "config": topic_config,
                    "assignment": ASSIGNMENT}],
        "workload": {"producers": [{
            "name": "bench", "topic": TOPIC, "acks": "all", "rate": RATE, "record.bytes": RECORD_BYTES,
            "stop": f"{int(plan.duration_s * 1000)}ms",
            "linger.ms": PRODUCER["linger.ms"], "delivery.timeout.ms": PRODUCER["message.timeout.ms"],
            "socket.timeout.ms": PRODUCER["socket.timeout.ms"], "request.timeout.ms": PRODUCER["request.timeout.ms"],
            "retry.backoff.ms": PRODUCER["retry.backoff.ms"], "retry.backoff.max.ms": PRODUCER["retry.backoff.max.ms"],
            "max.in.flight.requests.per.connection": 5, "enable.idempotence": PRODUCER["enable.idempotence"],
            "sticky.partitioning.linger.ms": 10}]},   # librdkafka's default
        "faults": [{"at": f"{int(at * 1000)}ms", "kind": kinds[action], "brokers": list(brokers)}
                   for at, action, brokers in plan.steps],
    }


def emulate(scenario_data: dict[str, Any], lake: Path) -> tuple[str, dict[str, Any]]:
    """Run a scenario (as parsed YAML) into `lake`'s bronze tables: its run id and summary."""
    from broker_emulator.scenario import parse_scenario
    from broker_emulator.simulation import Simulation
    from foundation.bronze_sink import DeltaSink

    scenario = parse_scenario(scenario_data, f"<fidelity {scenario_data['name']}>")
    run_id = f"{scenario.name}-s{scenario.seed}"
    return run_id, Simulation(scenario, DeltaSink(str(lake), run_id)).run()


def run_emulated(plan: Plan, lake: Path, seed: int, sample_ms: int = 250,
                 recovery: tuple[int, float] | None = None) -> Outcome:
    run_id, summary = emulate(scenario_of(plan, seed, sample_ms, recovery), lake)
    records = summary["records"]
    return Outcome(str(lake), run_id, window_of(plan, T0_MS), records["acked"].get("all", 0),
                   records["failed"].get("all", 0), records["lost"].get("all", 0), summary["client_errors"])


# ---- the real cluster -----------------------------------------------------------------------------------

class Workload:
    """The bench producer. Each value is its sequence number, so the records acknowledged and not read back are
    the lost ones; no key, so librdkafka's sticky partitioner picks the partitions, as the emulator's does."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        # librdkafka's statistics each second: the produce round trip and batch sizes the bench prints.
        self.producer = Producer({"bootstrap.servers": bootstrap, "log_level": 0, **PRODUCER,
                                  "statistics.interval.ms": 1000, "stats_cb": self._stats})
        self.stats: list[tuple[float, float, float]] = []   # (time, round trip p50 ms, records a batch)
        self.acked: set[int] = set()
        self.failed: dict[str, int] = {}
        self.stop = threading.Event()
        self.fatal: str | None = None   # an idempotent producer stops for good on a fatal error
        self.thread = threading.Thread(target=self._run, daemon=True, name="fidelity-producer")

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add(int(msg.value()))
        else:
            self.failed[err.name()] = self.failed.get(err.name(), 0) + 1

    def _stats(self, raw: str) -> None:
        stats = json.loads(raw)
        rtts = [b["rtt"]["p50"] / 1000 for b in stats["brokers"].values() if b["nodeid"] >= 0 and b["rtt"]["cnt"]]
        batches = stats["topics"].get(TOPIC, {}).get("batchcnt", {})
        if rtts and batches.get("cnt"):
            self.stats.append((time.time(), statistics.median(rtts), float(batches["avg"])))

    def before(self, t_ms: int, span_s: float = 5.0) -> dict[str, float]:
        """The round trip and batch size over the `span_s` before t_ms (a fault), medians of the seconds."""
        seen = [(rtt, batch) for at, rtt, batch in self.stats if t_ms / 1000 - span_s < at <= t_ms / 1000]
        if not seen:
            return {}
        return {"round_trip_ms": statistics.median(r for r, _ in seen),
                "batch_records": statistics.median(b for _, b in seen)}

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        seq, began = 0, time.monotonic()
        try:
            while not self.stop.is_set():
                due = int((time.monotonic() - began) * RATE)
                while seq < due:
                    with contextlib.suppress(BufferError):
                        self.producer.produce(TOPIC, f"{seq:0{RECORD_BYTES}d}".encode(),
                                              on_delivery=self._delivered)
                    seq += 1
                # Every 2 ms, so that records arrive as steadily as the emulator's producer makes them (a longer
                # wait hands librdkafka bursts, and so larger batches, than the emulated client sees).
                self.producer.poll(0.002)
        except KafkaException as e:
            # After an unclean election the leader's log lacks sequence numbers the producer had acknowledged:
            # librdkafka's idempotent producer raises a fatal OUT_OF_ORDER_SEQUENCE_NUMBER and produces no more.
            self.fatal = str(e.args[0].str() if e.args else e)

    def start(self) -> Workload:
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(10)
        if self.fatal is None:
            self.producer.flush(15)
        else:
            self.producer.poll(1)   # the delivery reports of what it had sent: flush() refuses after a fatal error
            self.failed["_FATAL"] = self.failed.get("_FATAL", 0) + 1


def read_back(bootstrap: str) -> set[int]:
    """Every sequence number in the topic, read from the start to each partition's high watermark."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fidelity-read-back", "log_level": 0,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    keys: set[int] = set()
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        position = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 60
        while any(position[p] < ends[p] for p in range(PARTITIONS)) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 1.0):
                value, partition, offset = msg.value(), msg.partition(), msg.offset()
                if msg.error() is None and value is not None and partition is not None and offset is not None:
                    keys.add(int(value))
                    position[partition] = offset + 1
    finally:
        consumer.close()
    return keys


class _Collecting:
    """`isrwatch collect` in a thread, every 250 ms, until stopped."""

    def __init__(self, collector: Any) -> None:
        self.collector = collector
        self.stopping = threading.Event()
        self.intervals = 0
        self.thread = threading.Thread(target=self._run, daemon=True, name="fidelity-collector")

    def _run(self) -> None:
        def step(_status: dict[str, Any]) -> None:
            self.intervals += 1
        self.collector.run(on_step=step, should_stop=self.stopping.is_set)

    def __enter__(self) -> _Collecting:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(60)
        self.collector.close()


def _wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.25)


def _leaders_preferred(cluster: Any) -> bool:
    md = cluster.admin_client().list_topics(TOPIC, timeout=5)
    parts = md.topics[TOPIC].partitions
    return len(parts) == PARTITIONS and all(parts[p].leader == ASSIGNMENT[p][0] and len(parts[p].isrs) == 3
                                            for p in range(PARTITIONS))


def run_real(plan: Plan, workdir: Path, log: Any) -> Outcome:
    """Start a fresh cluster, create the topic, collect, produce, inject the plan's faults on time, read back."""
    from confluent_kafka.admin import NewTopic

    from collector.collect_loop import Collector, CollectSettings
    from testing.kafka import KafkaCluster

    cluster = KafkaCluster(workdir / "kafka", brokers=3)
    restarts: list[threading.Thread] = []
    try:
        cluster.start()
        admin = cluster.admin_client()
        # confluent-kafka reads num_partitions left out as "a default count", which it refuses beside an assignment.
        created = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replica_assignment=ASSIGNMENT,
                                                config=plan.topic_config)])
        created[TOPIC].result(30)
        _wait(lambda: _leaders_preferred(cluster), 60, "the topic's preferred leaders")
        lake = str(workdir / "lakehouse")
        collector = Collector(CollectSettings(cluster.bootstrap_servers.split(","), lake,
                                              metrics_urls={None: cluster.metrics_urls}, interval_s=0.25,
                                              timeout_s=0.5))
        with _Collecting(collector) as collecting:
            _wait(lambda: len(collector.metrics_urls) >= 4 and not collector.unassigned_urls, 60,
                  "every node's metrics")
            workload = Workload(cluster.bootstrap_servers).start()
            t0 = time.time()
            for at, action, brokers in plan.steps:
                time.sleep(max(0.0, t0 + at - time.time()))
                log(f"  {plan.name}: {action} {list(brokers)} at {time.time() - t0:.1f} s")
                for b in brokers:
                    if action == "restart":   # it blocks until the cluster is ready: the plan's clock goes on
                        thread = threading.Thread(target=cluster.restart, args=(b, 120.0), daemon=True)
                        thread.start()
                        restarts.append(thread)
                    else:
                        getattr(cluster, action)(b)
            time.sleep(max(0.0, t0 + plan.duration_s - time.time()))
            workload.finish()
            for thread in restarts:
                thread.join(120)
            first_fault_ms = int((t0 + plan.steps[0][0]) * 1000)
            producer = workload.before(first_fault_ms)
            if producer:
                log(f"  {plan.name}: producer before the fault: round trip p50 {producer['round_trip_ms']:.0f} ms, "
                    f"{producer['batch_records']:.1f} records a batch (emulated: request.handling.ms "
                    f"{REQUEST_HANDLING_MS})")
            log(f"  {plan.name}: {collecting.intervals} collector intervals, {len(workload.acked)} acknowledged"
                + (f"; the producer stopped: {workload.fatal}" if workload.fatal else ""))
        for b in cluster.broker_ids():   # a broker still stopped would hold the read-back
            node = cluster.nodes[b]
            if node.paused:
                cluster.resume(b)
        read = read_back(cluster.bootstrap_servers)
        return Outcome(lake, collector.run_id, window_of(plan, int(t0 * 1000)), len(workload.acked),
                       sum(workload.failed.values()), len(workload.acked - read), dict(workload.failed))
    finally:
        cluster.stop()
