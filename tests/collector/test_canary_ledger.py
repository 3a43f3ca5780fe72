"""collector.canary_state's ledger and collector.canary_topic's helpers on their own, with no cluster: the
evidence rules for a loss and a duplicate, the state file, the error names and the config checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import KafkaError

from collector.canary import Canary
from collector.canary_read import Counters
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


class _Message:
    """What the canary reads of a confluent_kafka Message (a delivery report)."""

    def __init__(self, partition: int, offset: int, value: bytes) -> None:
        self._partition, self._offset, self._value = partition, offset, value

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value


def _canary_with_in_flight(tmp_path: Path, seqs: range) -> tuple[Canary, str]:
    """A canary as start() leaves it for partition 0, with `seqs` produced and not yet acknowledged."""
    canary = Canary(CanaryConfig("127.0.0.1:9092"), tmp_path)
    instance = "00112233aabbccdd"
    canary._state = CanaryState("cluster", "canary", "topic-id", instance)
    canary._counters[0], canary._in_flight[0], canary._read_early[0], canary._unplaced[0] = Counters(), {}, {}, {}
    canary._leaders[0] = 1
    for seq in seqs:
        canary._in_flight[0][seq] = 1_000 + seq
    return canary, instance


def test_both_copies_of_a_retried_record_read_before_its_acknowledgement_make_a_duplicate(tmp_path: Path) -> None:
    """A retry written again after its first copy: the consumer reads both copies (offsets 227 and 249) before
    the producer's acknowledgement (of 249) arrives. The copy at 227 is a duplicate, not forgotten."""
    canary, instance = _canary_with_in_flight(tmp_path, range(167, 169))
    for seq, first, retried in ((167, 227, 249), (168, 228, 250)):
        value = encode_value(instance, 0, seq, 1_000 + seq)
        canary._on_record(0, first, value, 2_000)
        canary._on_record(0, retried, value, 2_001)
    for seq, retried in ((167, 249), (168, 250)):
        canary._on_delivery(None, _Message(0, retried, encode_value(instance, 0, seq, 1_000 + seq)))  # type: ignore[arg-type]
    c = canary._counters[0]
    assert [(d.seq, d.acked_offset, d.read_offset) for d in c.duplicates] == [(167, 249, 227), (168, 250, 228)]
    assert c.acked == 2 and c.confirmed == 2 and c.lost == []


def test_without_an_acknowledged_offset_the_first_copy_read_is_remembered_and_the_other_is_a_duplicate(
        tmp_path: Path) -> None:
    canary, instance = _canary_with_in_flight(tmp_path, range(5, 6))
    value = encode_value(instance, 0, 5, 1_005)
    canary._on_record(0, 10, value, 2_000)
    canary._on_record(0, 12, value, 2_001)
    canary._on_delivery(None, _Message(0, -1, value))    # type: ignore[arg-type]
    c = canary._counters[0]
    assert c.acked_without_offset == 1 and c.confirmed == 1
    assert list(canary._state.ledger(0).acked_records()) == [(10, 5)]  # type: ignore[union-attr]
    assert [(d.seq, d.acked_offset, d.read_offset) for d in c.duplicates] == [(5, 10, 12)]
