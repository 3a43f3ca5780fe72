"""One duration grammar: the settings, the alert rules, the SLOs, the scenarios and the command lines read a
duration the same way."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from broker_emulator.scenario_reader import Reader
from foundation.durations import duration_ms, parse_duration
from isrwatch.arguments import seconds_argument
from pipelines.alert_rules import parse_alert_config
from pipelines.slo_spec import parse_slos

SAME = [("30s", 30_000), ("30 seconds", 30_000), ("1 second", 1_000), ("500ms", 500), ("500 milliseconds", 500),
        ("1.5m", 90_000), ("2 minutes", 120_000), ("1h", 3_600_000), ("2 hours", 7_200_000), ("3d", 259_200_000),
        ("1 day", 86_400_000), (" 5 s ", 5_000)]


@pytest.mark.parametrize(("text", "ms"), SAME)
def test_every_reader_takes_the_short_and_the_long_unit_alike(text: str, ms: int) -> None:
    assert parse_duration(text) == dt.timedelta(milliseconds=ms)
    assert duration_ms(text) == ms
    rule = {"name": "R", "source": "partition_state", "scope": "partition", "when": "isr_size < 2",
            "value": "isr_size", "severity": "warning", "summary": "s", "for": text}
    assert parse_alert_config({"rules": [rule]}, "alerts.yaml").rule("R").for_ms == ms
    assert Reader("s.yaml", {"duration": text}, "").duration("duration") == ms
    assert seconds_argument(text) == ms / 1000


@pytest.mark.parametrize("text", ["10", "", "ten seconds", "10 secs", "5 mins", "-1s", "1s later", "1 s 2 ms"])
def test_a_duration_without_a_known_unit_is_refused_everywhere_with_the_same_examples(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected a duration such as '30s', '500ms', '5m' or '10 seconds', got"):
        parse_duration(text)
    with pytest.raises(argparse.ArgumentTypeError, match="expected a duration such as"):
        seconds_argument(text)  # a bare number on a command line is no longer taken as milliseconds


def test_a_kafka_ms_key_in_a_scenario_takes_an_integer_of_milliseconds() -> None:
    reader = Reader("s.yaml", {"linger.ms": 5, "stop": "10"}, "")
    assert reader.duration("linger.ms") == 5
    with pytest.raises(ValueError, match=r"stop.*expected a duration such as '30s', '500ms', '5m' or '10 seconds', or "
                                         r"an integer of ms"):
        reader.duration("stop")


@pytest.mark.parametrize("window", ["28d", "28 days", "672h", "672 hours"])
def test_an_slo_window_reads_the_same_grammar(window: str) -> None:
    slo = {"name": "durable", "sli": "acked_durability", "objective": 99.9, "window": window}
    assert parse_slos({"slos": [slo]}, "slos.yaml")[0].window_ms == 28 * 86_400_000
