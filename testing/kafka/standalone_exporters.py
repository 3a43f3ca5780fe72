"""The JMX exporter as processes of their own beside a node: the node seen through other exporter rules (Strimzi's,
Confluent's, the agent's defaults) at the same moment as through the agent's conf/jmx_exporter.yaml."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from testing.kafka.jvm import JARS_DIR, JVM_PREEXEC, KafkaFixtureError, free_port, java
from testing.kafka.processes import reap

if TYPE_CHECKING:
    from testing.kafka.cluster import Node


@dataclass
class StandaloneExporter:
    """The JMX exporter as a process of its own (jmx_prometheus_httpserver), reading one node's MBeans over remote
    JMX under other rules than the agent's. (A second javaagent in the broker's JVM cannot do it: both agents share
    one metrics registry and the second refuses to start, "Can't register jmx_exporter_build because a metric with
    that name is already registered".)"""

    rules: str                      # a name for the rules, e.g. "strimzi"
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"


def standalone_exporter_jar() -> Path:
    jar = next((JARS_DIR / "standalone").glob("jmx_prometheus_httpserver-*.jar"), None)
    if jar is None:
        raise KafkaFixtureError(f"the JMX exporter's standalone server not found in {JARS_DIR / 'standalone'}: "
                                "run `make kafka-jars`")
    return jar


def start_standalone_exporters(node: Node, rules: dict[str, Path], launched_pids: list[int]) -> None:
    """One standalone exporter per rules file, reading `node` over remote JMX; kept across the node's restarts
    (it reconnects at its next scrape; while the node is down its answer has no Kafka series). Each process's pid is
    added to `launched_pids`."""
    jar = standalone_exporter_jar()
    for name, rules_file in rules.items():
        exporter = node.exporters.get(name)
        if exporter is not None and exporter.process is not None and exporter.process.poll() is None:
            continue
        if exporter is None:
            exporter = node.exporters[name] = StandaloneExporter(name, free_port())
        config = yaml.safe_load(rules_file.read_text())
        if not isinstance(config, dict) or "hostPort" in config or "jmxUrl" in config:
            raise KafkaFixtureError(f"{rules_file}: expected exporter rules without hostPort or jmxUrl")
        config_file = node.directory / f"exporter-{name}.yaml"
        config_file.write_text(yaml.safe_dump({"hostPort": f"127.0.0.1:{node.jmx_port}", **config},
                                              sort_keys=False))
        out = open(node.directory / "logs" / f"exporter-{name}.log", "ab")  # noqa: SIM115 - owned by the child
        exporter.process = subprocess.Popen(
            [java(), "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", str(jar),
             f"127.0.0.1:{exporter.port}", str(config_file)],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=JVM_PREEXEC)
        launched_pids.append(exporter.process.pid)
        out.close()


def stop_standalone_exporters(nodes: Iterable[Node]) -> None:
    for node in nodes:
        for exporter in node.exporters.values():
            if exporter.process is None:
                continue
            if exporter.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(exporter.process.pid, signal.SIGTERM)
            reap(exporter.process, 10)
            exporter.process = None
