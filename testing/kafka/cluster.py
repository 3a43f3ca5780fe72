"""A real Apache Kafka KRaft cluster on loopback: one controller and N brokers, each its own JVM.

For the collector's tests, its bench and `make demo-kafka`. The jars come from `make kafka-jars`
(jvm/kafka/pom.xml). Each broker runs the Prometheus JMX exporter as a Java agent, so its metrics are
scraped the way a production cluster's are. Every JVM is started in its own process group with a parent-death
signal, so it dies with the Python process that started it even when that process is killed; `stop()`
(also run by `with` and at interpreter exit) terminates and reaps them all.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collector.canary_topic import quiet_librdkafka_logger
from testing.kafka.jvm import JVM_PREEXEC, KafkaFixtureError, free_port, java, kafka_jars
from testing.kafka.processes import reap
from testing.kafka.secure_listeners import (
    MTLS_LISTENER,
    SASL_SSL_LISTENER,
    SecureListeners,
    scram_format_args,
    secure_listener_config,
)
from testing.kafka.standalone_exporters import (
    StandaloneExporter,
    start_standalone_exporters,
    stop_standalone_exporters,
)

CONTROLLER_ID = 3000   # the node id the emulator also records controller metrics under

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

# The exporter's rules, also shipped as conf/jmx_exporter.yaml for a real cluster: every Kafka meter and gauge as
# `kafka_<domain>_<type>_<name>` with the MBean's other keys (topic, request, error, ...) as labels and the JMX
# attribute (Count or Value) as `attribute`. The collector maps these names back to MBean names.
JMX_EXPORTER_CONFIG = (Path(__file__).resolve().parents[2] / "conf" / "jmx_exporter.yaml")

LOG4J2_CONFIG = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
"""


@dataclass
class Node:
    node_id: int
    role: str                       # "controller" or "broker"
    port: int
    rack: str | None
    metrics_port: int | None
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False
    jmx_port: int | None = None     # remote JMX on loopback, opened when the node has standalone exporters
    exporters: dict[str, StandaloneExporter] = field(default_factory=dict)   # rules name -> its exporter

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        return None if self.metrics_port is None else f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def exporter_urls(self) -> dict[str, str]:
        """Rules name -> the metrics URL of the node's standalone exporter under those rules."""
        return {name: exporter.url for name, exporter in self.exporters.items()}


@dataclass
class KafkaCluster:
    """`with KafkaCluster(workdir, brokers=3) as cluster:` starts it and waits until every broker is unfenced."""

    workdir: Path
    brokers: int = 3
    racks: tuple[str, ...] = ("rack-a", "rack-b", "rack-c")
    heap: str = "384m"
    # Broker settings for every broker (str values, Kafka's names). Tests shorten the lag and session times.
    broker_config: dict[str, str] = field(default_factory=dict)
    # Controller settings, e.g. broker.session.timeout.ms (how long a silent broker stays unfenced).
    controller_config: dict[str, str] = field(default_factory=dict)
    # The rules of the JMX exporter agent every node runs: the project's, or those of another stack (Strimzi's, as
    # tests/collector/data transcribes them) to watch a cluster exporting the way operators' clusters do.
    exporter_rules: Path = JMX_EXPORTER_CONFIG
    # TLS and SASL listeners besides PLAINTEXT; their addresses: bootstrap_for(SASL_SSL_LISTENER or MTLS_LISTENER).
    secure_listeners: SecureListeners | None = None
    listener_ports: dict[int, dict[str, int]] = field(default_factory=dict, init=False)   # broker -> name -> port
    nodes: dict[int, Node] = field(default_factory=dict, init=False)
    cluster_id: str = field(default="", init=False)
    # Every JVM ever launched (restarts too): each leads its own process group, whose id is its pid.
    launched_pids: list[int] = field(default_factory=list, init=False)
    # Node id -> rules name -> exporter rules file: that node also runs the JMX exporter as its own process under
    # each (StandaloneExporter), started with the node and stopped with the cluster. A rules file without
    # `hostPort` (the fixture adds the node's remote-JMX address).
    extra_exporters: dict[int, dict[str, Path]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0, attempts: int = 3) -> KafkaCluster:
        """Start every node and wait until the brokers are unfenced. A node that exits while starting (most
        often a port that another process took between `free_port` and the JVM's bind) starts the whole
        cluster again, on fresh ports and a fresh directory, up to `attempts` times."""
        for attempt in range(1, attempts + 1):
            try:
                return self._start_once(self.workdir / f"attempt-{attempt}", timeout_s)
            except KafkaFixtureError:
                if attempt == attempts:
                    raise
        raise AssertionError("unreachable")

    def _start_once(self, directory: Path, timeout_s: float) -> KafkaCluster:
        jars = kafka_jars()
        directory.mkdir(parents=True, exist_ok=True)
        self.nodes = {}
        # A random cluster id of Kafka's format: 16 bytes, URL-safe base64 without padding; kafka-storage's
        # argument parser takes one starting with '-' for an option, so draw again.
        self.cluster_id = "-"
        while self.cluster_id.startswith("-"):
            self.cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        cport = free_port()
        self.nodes[CONTROLLER_ID] = Node(CONTROLLER_ID, "controller", cport, None, free_port(),
                                         directory / "controller")
        for i in range(1, self.brokers + 1):
            rack = self.racks[(i - 1) % len(self.racks)] if self.racks else None
            self.nodes[i] = Node(i, "broker", free_port(), rack, free_port(), directory / f"broker-{i}")
        (self.workdir / "log4j2.properties").write_text(LOG4J2_CONFIG)
        atexit.register(self.stop)
        try:
            for node in self.nodes.values():
                self._write_config(node)
            self._format_all(jars)
            for node in self.nodes.values():
                self._launch(node, jars)
            self.wait_until_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the brokers, then the controller (a broker's controlled shutdown asks the controller; stopped
        together, brokers wait for it until their timeout), and reap them all."""
        for role in ("broker", "controller"):
            nodes = [n for n in self.nodes.values() if n.role == role and n.process is not None]
            for node in nodes:
                assert node.process is not None
                if node.process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(node.process.pid, signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
                        os.killpg(node.process.pid, signal.SIGTERM)
            for node in nodes:
                assert node.process is not None
                reap(node.process, 20)
                node.process = None
        stop_standalone_exporters(self.nodes.values())
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)

    # ---- faults ------------------------------------------------------------------------------------

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: the broker stops answering, heartbeating and fetching, as in a long GC pause."""
        node = self._running(broker_id)
        os.killpg(node.process.pid, signal.SIGSTOP)  # type: ignore[union-attr]
        node.paused = True

    def resume(self, broker_id: int) -> None:
        node = self._running(broker_id)
        os.killpg(node.process.pid, signal.SIGCONT)  # type: ignore[union-attr]
        node.paused = False

    def kill(self, broker_id: int) -> None:
        """SIGKILL: the process is gone at once, with whatever it had not flushed."""
        node = self._running(broker_id)
        os.killpg(node.process.pid, signal.SIGKILL)  # type: ignore[union-attr]
        node.process.wait(timeout=10)  # type: ignore[union-attr]
        node.process = None
        node.paused = False

    def restart(self, broker_id: int, timeout_s: float = 60.0) -> None:
        node = self.nodes[broker_id]
        if node.process is not None and node.process.poll() is None:
            os.killpg(node.process.pid, signal.SIGCONT)
            os.killpg(node.process.pid, signal.SIGTERM)
            node.process.wait(timeout=30)
        self._launch(node, kafka_jars())
        self.wait_until_ready(timeout_s)

    # ---- addresses ---------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes.values() if n.role == "broker")

    @property
    def metrics_urls(self) -> list[str]:
        return [n.metrics_url for n in self.nodes.values() if n.metrics_url is not None]

    def bootstrap_for(self, listener: str) -> str:
        """The brokers' addresses on one listener: PLAINTEXT, or SASL_SSL_LISTENER / MTLS_LISTENER."""
        if listener == "PLAINTEXT":
            return self.bootstrap_servers
        brokers = [n.node_id for n in self.nodes.values() if n.role == "broker"]
        if any(listener not in self.listener_ports.get(b, {}) for b in brokers):
            raise KafkaFixtureError(f"no {listener} listener: start the cluster with secure_listeners")
        return ",".join(f"127.0.0.1:{self.listener_ports[b][listener]}" for b in brokers)

    def broker_ids(self) -> list[int]:
        return [n.node_id for n in self.nodes.values() if n.role == "broker"]

    def admin_client(self, **config: object) -> AdminClient:
        """An AdminClient on the cluster whose librdkafka log lines go nowhere: librdkafka writes straight to
        file descriptor 2 otherwise, past pytest's capture, and a client still alive while the cluster stops
        prints a connection error every 50 ms."""
        from confluent_kafka.admin import AdminClient

        settings: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers, "logger": quiet_librdkafka_logger(),
                                    **config}
        return AdminClient(settings)

    def running_processes(self) -> list[int]:
        return [n.process.pid for n in self.nodes.values() if n.process is not None and n.process.poll() is None]

    def leftover_process_groups(self) -> list[int]:
        """The process groups of every JVM this cluster ever launched that still have a live member (the JVM
        or anything it started): empty once `stop()` has run."""
        alive = []
        for pgid in self.launched_pids:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            alive.append(pgid)
        return alive

    # ---- readiness ---------------------------------------------------------------------------------

    def wait_until_ready(self, timeout_s: float) -> None:
        """Until every running, unpaused broker is registered and unfenced (it answers DescribeCluster
        and appears in the cluster's broker list)."""
        deadline = time.monotonic() + timeout_s
        want = {n.node_id for n in self.nodes.values()
                if n.role == "broker" and n.process is not None and not n.paused}
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                admin = self.admin_client(**{"socket.timeout.ms": 2000})
                described = admin.describe_cluster(request_timeout=3).result(timeout=5)
                seen = {n.id for n in described.nodes}
                if want <= seen:
                    return
                last_error = f"brokers registered: {sorted(seen)}, waiting for {sorted(want - seen)}"
            except Exception as e:  # the cluster is still starting: any admin error means "not yet"
                last_error = str(e)
            time.sleep(0.5)
        raise KafkaFixtureError(f"Kafka cluster not ready within {timeout_s:.0f} s: {last_error}; "
                                f"logs under {self.workdir}")

    def _check_alive(self) -> None:
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is not None:
                log = node.directory / "logs" / "server.log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
                raise KafkaFixtureError(f"{node.role} {node.node_id} exited with {node.process.returncode}:\n{tail}")

    def _running(self, broker_id: int) -> Node:
        node = self.nodes[broker_id]
        if node.process is None or node.process.poll() is not None:
            raise KafkaFixtureError(f"broker {broker_id} is not running")
        return node

    # ---- set-up ------------------------------------------------------------------------------------

    def _write_config(self, node: Node) -> None:
        controller = self.nodes[CONTROLLER_ID]
        node.directory.mkdir(parents=True, exist_ok=True)
        common = {
            "node.id": str(node.node_id),
            "controller.quorum.voters": f"{CONTROLLER_ID}@{controller.address}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(node.directory / "data"),
        }
        if node.role == "controller":
            props = {**common, "process.roles": "controller", "listeners": f"CONTROLLER://{node.address}",
                     **self.controller_config}
        else:
            rf = str(min(3, self.brokers))
            props = {
                **common,
                "process.roles": "broker",
                "listeners": f"PLAINTEXT://{node.address}",
                "advertised.listeners": f"PLAINTEXT://{node.address}",
                "inter.broker.listener.name": "PLAINTEXT",
                "offsets.topic.replication.factor": rf,
                "transaction.state.log.replication.factor": rf,
                "transaction.state.log.min.isr": "1",
                "group.initial.rebalance.delay.ms": "0",
                "num.partitions": "1",
                **({"broker.rack": node.rack} if node.rack else {}),
                **self._secure_listeners(node),
                **self.broker_config,
            }
        (node.directory / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _secure_listeners(self, node: Node) -> dict[str, str]:
        """The SASL_SSL and SSL listeners' settings, on fresh ports, with the broker's PEM stores written."""
        if self.secure_listeners is None:
            return {}
        ports = self.listener_ports[node.node_id] = {SASL_SSL_LISTENER: free_port(), MTLS_LISTENER: free_port()}
        return secure_listener_config(self.secure_listeners, node.address, node.directory, ports)

    def _java(self, jars: Path, node: Node) -> list[str]:
        logs = node.directory / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        # C1 only: a fixture's node lives minutes under a light load, and C2's compilations cost its start more than
        # they return (1 controller + 3 brokers ready in 27-30 s tiered, 19-21 s C1 alone, idle).
        return [java(), f"-Xmx{self.heap}", f"-Xms{self.heap}", "-XX:+UseG1GC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true",
                f"-Dkafka.logs.dir={logs}", f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
                "-cp", f"{jars}/*"]

    def _format_all(self, jars: Path) -> None:
        """kafka-storage format of every node, the JVMs side by side."""
        running = []
        for node in self.nodes.values():
            cmd = [*self._java(jars, node), "kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                   "-c", str(node.directory / "server.properties"), "--ignore-formatted"]
            if self.secure_listeners is not None and node.role == "controller":
                cmd += scram_format_args(self.secure_listeners)
            running.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                                   preexec_fn=JVM_PREEXEC)))
        failed = []
        for node, process in running:
            try:
                out, err = process.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                out, err = process.communicate()
            if process.returncode != 0:
                failed.append(f"node {node.node_id}: {err.strip() or out.strip()}")
        if failed:
            raise KafkaFixtureError(f"kafka-storage format failed for {'; '.join(failed)}")

    def _launch(self, node: Node, jars: Path) -> None:
        cmd = self._java(jars, node)
        if node.metrics_port is not None:
            agent = next(jars.glob("jmx_prometheus_javaagent-*.jar"))
            cmd.insert(1, f"-javaagent:{agent}=127.0.0.1:{node.metrics_port}:{self.exporter_rules}")
        rules = self.extra_exporters.get(node.node_id, {})
        if rules:
            if node.jmx_port is None:
                node.jmx_port = free_port()
            # The RMI registry and the connector on one loopback port: a remote client needs no other port.
            cmd[1:1] = [f"-Dcom.sun.management.jmxremote.port={node.jmx_port}",
                        f"-Dcom.sun.management.jmxremote.rmi.port={node.jmx_port}",
                        "-Dcom.sun.management.jmxremote.host=127.0.0.1", "-Djava.rmi.server.hostname=127.0.0.1",
                        "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false"]
        cmd += ["kafka.Kafka", str(node.directory / "server.properties")]
        out = open(node.directory / "logs" / "stdout.log", "ab")  # noqa: SIM115 - owned by the child
        node.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, preexec_fn=JVM_PREEXEC)
        self.launched_pids.append(node.process.pid)
        out.close()
        node.paused = False
        if rules:
            start_standalone_exporters(node, rules, self.launched_pids)
