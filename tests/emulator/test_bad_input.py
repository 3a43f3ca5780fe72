"""Malformed scenarios and impossible configurations: a clear error naming file, key and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_emulator.errors import ScenarioError
from broker_emulator.scenario import load_scenario
from isrwatch.cli import main

GOOD = """
name: ok
duration: 10s
cluster: {brokers: 3}
topics:
  - {name: t, partitions: 2, replication.factor: 3}
workload:
  producers: [{topic: t, acks: all, rate: 10}]
"""


@pytest.mark.parametrize(("replace", "key", "value"), [
    ("replication.factor: 3", "topics[0].replication.factor", "4"),
    ("cluster: {brokers: 3}", "cluster.config.replica.fetch.wait.max.ms", "30001"),
    ("acks: all", "workload.producers[0].acks", "2"),
    ("duration: 10s", "duration", "'soon'"),
    ("partitions: 2", "topics[0].partitions", "0"),
    ("name: ok", "colour", "'blue'"),
])
def test_invalid_values_name_file_key_and_value(tmp_path: Path, replace: str, key: str, value: str) -> None:
    text = GOOD
    if key == "cluster.config.replica.fetch.wait.max.ms":
        text = text.replace(replace, "cluster: {brokers: 3, config: {replica.fetch.wait.max.ms: 30001}}")
    elif key == "colour":
        text = text + "colour: blue\n"
    else:
        field = replace.split(":")[0]
        text = text.replace(replace, f"{field}: {value.strip(chr(39))}")
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {key}="), message
    assert err.value.key == key


def test_fetch_wait_equal_to_the_lag_time_is_legal_as_in_kafka(tmp_path: Path) -> None:
    """KafkaConfig.validateValues requires replica.fetch.wait.max.ms <= replica.lag.time.max.ms: equal is legal,
    one millisecond more is refused."""
    path = tmp_path / "equal.yaml"
    config = "cluster: {brokers: 3, config: {replica.fetch.wait.max.ms: %d, replica.lag.time.max.ms: 30000}}"
    path.write_text(GOOD.replace("cluster: {brokers: 3}", config % 30000))
    assert load_scenario(path).cluster.config.replica_fetch_wait_max_ms == 30000
    path.write_text(GOOD.replace("cluster: {brokers: 3}", config % 30001))
    with pytest.raises(ScenarioError, match=r"replica\.fetch\.wait\.max\.ms=30001: must be at most"):
        load_scenario(path)


def test_unknown_fault_target_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD + "faults:\n  - {at: 1s, kind: crash, broker: 9}\n")
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.broker=9: unknown fault target"):
        load_scenario(path)
    path.write_text(GOOD + "faults:\n  - {at: 1s, kind: rack_outage, rack: mars}\n")
    with pytest.raises(ScenarioError, match=r"faults\[0\]\.rack='mars': unknown fault target"):
        load_scenario(path)


def test_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"broken\.yaml: <yaml>="):
        load_scenario(path)


def test_cli_rejects_bad_scenario_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("replication.factor: 3", "replication.factor: 4"))
    lakehouse = tmp_path / "lh"
    code = main(["emulate", "--scenario", str(path), "--lakehouse", str(lakehouse), "--quiet"])
    assert code == 2
    assert "INVALID_REPLICATION_FACTOR" in capsys.readouterr().err
    assert not lakehouse.exists()


def test_cli_runs_a_scenario_and_writes_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    summary = tmp_path / "summary.json"
    code = main(["emulate", "--scenario", str(path), "--no-lakehouse", "--summary-json", str(summary), "--quiet"])
    assert code == 0
    import json

    data = json.loads(summary.read_text())
    assert data["records"]["sent"] == {"all": 100}
    assert data["records"]["acked"] == {"all": 100}
    assert "acks=all" in capsys.readouterr().out
