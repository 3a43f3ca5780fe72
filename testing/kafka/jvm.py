"""What every JVM of the fixture cluster needs: the jars, a free loopback port, `java`, and a launch that dies with
the Python process that started it."""

from __future__ import annotations

import shutil
import signal
import socket
from pathlib import Path

from testing.kafka.processes import own_group_dying_with_parent

JARS_DIR = Path(__file__).resolve().parents[2] / "jvm" / "kafka" / "jars"

# Each JVM in its own process group (signals to the test runner's group do not reach it twice), SIGKILLed when the
# Python process that started it dies, so no JVM outlives a killed test run.
JVM_PREEXEC = own_group_dying_with_parent(signal.SIGKILL)


class KafkaFixtureError(RuntimeError):
    pass


def kafka_jars() -> Path:
    if not any(JARS_DIR.glob("kafka_2.13-*.jar")):
        raise KafkaFixtureError(f"Kafka jars not found in {JARS_DIR}: run `make kafka-jars`")
    return JARS_DIR


def java() -> str:
    found = shutil.which("java")
    if found is None:
        raise KafkaFixtureError("java not found on PATH (OpenJDK 17 runs Kafka 4.3)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
