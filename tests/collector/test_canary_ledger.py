"""collector.canary_state's ledger and collector.canary_topic's helpers on their own, with no cluster: the
evidence rules for a loss and a duplicate, the state file, the error names and the config checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from collector.canary_state import (
    CanaryState,
    CanaryStateError,
    LatencySummary,
    PartitionLedger,
    ReadOutcome,
    decode_value,
    encode_value,
)
from collector.canary_topic import CanaryConfig, kafka_error_name, rotated_assignment


def ledger_with(*acks: tuple[int, int], leader: int = 1) -> PartitionLedger:
    ledger = PartitionLedger(0)
    for offset, seq in acks:
        assert ledger.acked(offset, seq, 1_000 + seq, leader) == []
    return ledger


def test_ack_at_a_lower_offset_loses_every_remembered_record_from_there() -> None:
    ledger = ledger_with(*((10 + i, i) for i in range(6)))      # seqs 0-5 at offsets 10-15
    assert ledger.read(10, 0, 2_000).outcome is ReadOutcome.CONFIRMED
    assert ledger.read(11, 1, 2_000).outcome is ReadOutcome.CONFIRMED
    lost = ledger.acked(11, 9, 3_000, leader=2)
    assert [(x.first_offset, x.first_seq, x.count, x.leader, x.read_back, x.evidence) for x in lost] == [
        (11, 1, 5, 1, 1, "acked_at_lower_offset")]
    assert list(ledger.acked_records()) == [(10, 0), (11, 9)]
    assert ledger.read(10, 0, 3_000).outcome is ReadOutcome.RECONFIRMED


def test_another_record_at_an_acknowledged_offset_loses_it_and_the_older_ones_above() -> None:
    ledger = ledger_with(*((i, i) for i in range(5)))
    result = ledger.read(2, 7, 2_000)                           # a newer canary record where seq 2 was
    assert result.outcome is ReadOutcome.OTHER_RECORD
    assert [list(x.records()) for x in result.lost] == [[(2, 2), (3, 3), (4, 4)]]
    assert [x.evidence for x in result.lost] == ["other_record_at_offset"]
    foreign = ledger_with(*((i, i) for i in range(5)))
    result = foreign.read(2, None, 2_000)                       # not a canary record: only that offset is known
    assert [list(x.records()) for x in result.lost] == [[(2, 2)]]
    assert list(foreign.acked_records()) == [(0, 0), (1, 1), (3, 3), (4, 4)]


def test_a_record_read_at_another_offset_than_acknowledged_is_a_duplicate() -> None:
    ledger = ledger_with((0, 0), (1, 1))
    result = ledger.read(5, 1, 2_000)
    assert result.outcome is ReadOutcome.UNKNOWN
    assert result.duplicate is not None
    assert (result.duplicate.acked_offset, result.duplicate.read_offset) == (1, 5)


def test_an_acknowledgement_without_an_offset_is_remembered_where_its_record_is_read() -> None:
    ledger = ledger_with((0, 0), (2, 2))
    assert ledger.place(1, 1, 5_000, leader=3)
    assert ledger.read(1, 1, 6_000).outcome is ReadOutcome.CONFIRMED
    assert list(ledger.acked_records()) == [(0, 0), (1, 1), (2, 2)]
    assert not ledger.place(5, 1, 5_000, leader=3)             # seq 1 cannot sit above seq 2
    assert ledger.acked(1, 7, 7_000, leader=2)[0].leader == 3   # and it can be lost like any other


def test_reading_past_unread_records_keeps_them_unconfirmed_and_expiry_counts_them_unverified() -> None:
    ledger = ledger_with(*((i, i) for i in range(4)))
    assert ledger.read(2, 2, 2_000).outcome is ReadOutcome.CONFIRMED
    assert ledger.unconfirmed == 3
    assert ledger.forget_below(1) == 1                          # offset 0: deleted by retention, never read
    assert ledger.expire(cutoff_ms=10_000) == 2                 # offsets 1 and 3 forgotten unread
    assert ledger.remembered == 0


def test_state_round_trips_through_json_and_a_corrupt_file_is_named(tmp_path: Path) -> None:
    state = CanaryState("cluster", "topic", "topic-id", "00112233aabbccdd")
    state.ledgers[0] = ledger_with((5, 0), (6, 1), (9, 2))
    state.ledgers[0].next_seq = 3
    state.ledgers[0].read_next = 7
    path = tmp_path / "canary_state.json"
    state.save(path)
    again = CanaryState.load(path)
    assert again is not None
    assert again.to_json() == state.to_json()
    assert CanaryState.load(tmp_path / "absent.json") is None
    path.write_text('{"format": 1, "instance_id": "xyz"}')
    with pytest.raises(CanaryStateError, match=r"canary_state\.json"):
        CanaryState.load(path)


def test_values_error_names_latencies_and_config_checks() -> None:
    value = encode_value("00112233aabbccdd", 2, 41, 1_700_000_000_000)
    assert decode_value(value) == ("00112233aabbccdd", 2, 41, 1_700_000_000_000)
    assert decode_value(b"something else") is None
    assert kafka_error_name(KafkaError(6)) == "NOT_LEADER_OR_FOLLOWER"
    assert kafka_error_name(KafkaError(19)) == "NOT_ENOUGH_REPLICAS"
    assert kafka_error_name(KafkaError(KafkaError._MSG_TIMED_OUT)) == "_MSG_TIMED_OUT"
    assert LatencySummary.of(list(range(1, 101))) == LatencySummary(100, 50.0, 99.0, 100.0)
    assert LatencySummary.of([]) is None
    assert rotated_assignment([1, 2, 3], 3, 1) == [2, 3, 1]
    with pytest.raises(ValueError, match="records_per_second"):
        CanaryConfig("127.0.0.1:9092", records_per_second=0)
    with pytest.raises(ValueError, match="min_insync_replicas"):
        CanaryConfig("127.0.0.1:9092", topic_config={"min.insync.replicas": "1"})
