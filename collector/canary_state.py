"""What the end-to-end canary remembers about the records it wrote, and how it keeps that across restarts.

Per canary partition a `PartitionLedger` holds the acknowledged records as runs (consecutive offsets carrying
consecutive sequence numbers, acknowledged while one broker led the partition), each with how many of its
records, from its first, the consumer has read back at their offsets. Two kinds of evidence show that an
acknowledged record is gone, and only evidence makes a loss:

- an acknowledgement at offset O: the log ended at or below O when that record was appended, so every
  remembered record at an offset >= O is no longer in it (`PartitionLedger.acked`);
- a read at offset O of another record than the one acknowledged there (`PartitionLedger.read`): that record
  is gone, and so is every remembered record at an offset >= O older than the canary record now at O (the
  producer's records land in the log in sequence order, so an older one can only sit above a newer one in a
  log that was truncated and written again).

A remembered record is kept until `expire` forgets it: its run was acknowledged more than the horizon ago. A
forgotten record that had not been read back is reported as unverified, never as lost: Kafka may still hold it.
Reading a record back does not end its watch: an unclean election can still truncate it, so read records stay
remembered for the horizon too (a loss of a record acknowledged longer ago than that goes unseen).

`CanaryState` is the whole memory (instance id, topic and topic id, one ledger per partition); `save` writes it
as JSON atomically (a temporary file, fsync, os.replace), `load` reads it back. Also here, with no Kafka client
in sight: a canary record's value (magic, instance id, partition, sequence number, produce wall time) and the
interval report `Canary.take_interval` returns (`CanaryInterval`, one `PartitionInterval` per partition).
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple

from collector.json_file import write_json_atomic

STATE_FORMAT = 1
# A run is closed once it spans this long, so that `expire` can forget a steadily written partition's old
# records run by run, and a lost record's acknowledgement time is known to within this span.
RUN_SPAN_MS = 10_000
MAX_RUNS = 100_000  # per partition; beyond it the oldest run is forgotten (as if expired)


# ---- the canary's records ----------------------------------------------------------------------

_VALUE = struct.Struct("!4s8sIQQ")   # magic, instance id, partition, seq, produce wall time (ms)
_MAGIC = b"IWC1"


class CanaryRecord(NamedTuple):
    instance_id: str
    partition: int
    seq: int
    produce_ms: int


def encode_value(instance_id: str, partition: int, seq: int, produce_ms: int) -> bytes:
    return _VALUE.pack(_MAGIC, bytes.fromhex(instance_id), partition, seq, produce_ms)


def decode_value(value: bytes | None) -> CanaryRecord | None:
    """The canary record in a message value, or None if it is not one."""
    if value is None or len(value) != _VALUE.size or not value.startswith(_MAGIC):
        return None
    _, instance, partition, seq, produce_ms = _VALUE.unpack(value)
    return CanaryRecord(instance.hex(), partition, seq, produce_ms)


class CanaryStateError(Exception):
    """Raised when a saved canary state file cannot be read back (corrupt, or of another format)."""


@dataclass
class AckRun:
    """Acknowledged records at offsets first_offset.. with sequence numbers first_seq.., one per offset."""

    first_offset: int
    first_seq: int
    count: int
    confirmed: int        # the first `confirmed` records have been read back at their offsets
    first_acked_ms: int
    last_acked_ms: int
    leader: int           # the partition's leader when they were acknowledged, as far as known (-1: unknown)

    @property
    def end_offset(self) -> int:
        return self.first_offset + self.count

    def seq_at(self, offset: int) -> int:
        return self.first_seq + (offset - self.first_offset)

    def piece(self, lo: int, hi: int) -> AckRun:
        """The records at indexes [lo, hi) of this run, as a run of their own."""
        assert 0 <= lo < hi <= self.count, (lo, hi, self.count)
        return AckRun(self.first_offset + lo, self.first_seq + lo, hi - lo,
                      min(max(self.confirmed - lo, 0), hi - lo), self.first_acked_ms, self.last_acked_ms, self.leader)

    def to_json(self) -> list[int]:
        return [self.first_offset, self.first_seq, self.count, self.confirmed, self.first_acked_ms,
                self.last_acked_ms, self.leader]

    @classmethod
    def from_json(cls, row: list[int]) -> AckRun:
        run = cls(*(int(v) for v in row))
        if run.count < 1 or not 0 <= run.confirmed <= run.count or run.first_offset < 0:
            raise ValueError(f"bad run {row!r}")
        return run


@dataclass(frozen=True)
class LostRecords:
    """Acknowledged canary records found lost: offsets first_offset.. holding sequence numbers first_seq..

    `acked_between_ms` bounds when they were acknowledged, `leader` is the broker that led the partition then
    (as far as the canary knew, -1 unknown), `read_back` how many of them the canary had read back before they
    were lost, `evidence` what showed the loss ('acked_at_lower_offset': the producer got an acknowledgement
    at `evidence_offset` <= theirs; 'other_record_at_offset': the consumer read another record at
    `evidence_offset`), `detected_ms` when."""

    partition: int
    first_offset: int
    first_seq: int
    count: int
    acked_between_ms: tuple[int, int]
    leader: int
    read_back: int
    evidence: str
    evidence_offset: int
    detected_ms: int

    def records(self) -> Iterator[tuple[int, int]]:
        """(offset, seq) of each lost record."""
        for i in range(self.count):
            yield self.first_offset + i, self.first_seq + i


@dataclass(frozen=True)
class Duplicate:
    """A canary record read at `read_offset` whose acknowledgement gave another offset, `acked_offset`."""

    partition: int
    seq: int
    acked_offset: int
    read_offset: int


class ReadOutcome(Enum):
    CONFIRMED = "confirmed"        # the acknowledged record, read back for the first time
    RECONFIRMED = "reconfirmed"    # the acknowledged record, read back again (a re-read)
    UNKNOWN = "unknown"            # not a remembered acknowledged record (failed, forgotten, or not ours)
    OTHER_RECORD = "other_record"  # another record sits where an acknowledged one was: that one is lost


@dataclass
class ReadResult:
    outcome: ReadOutcome
    lost: list[LostRecords] = field(default_factory=list)
    duplicate: Duplicate | None = None


@dataclass
class PartitionLedger:
    """One canary partition: the next sequence number, the consumer's next offset, the remembered records."""

    partition: int
    next_seq: int = 0
    read_next: int | None = None      # the next offset the consumer reads (None: it has not read yet)
    runs: list[AckRun] = field(default_factory=list)

    # ---- queries ---------------------------------------------------------------------------------

    @property
    def first_offset(self) -> int | None:
        return self.runs[0].first_offset if self.runs else None

    @property
    def remembered(self) -> int:
        return sum(r.count for r in self.runs)

    @property
    def unconfirmed(self) -> int:
        return sum(r.count - r.confirmed for r in self.runs)

    def acked_records(self) -> Iterator[tuple[int, int]]:
        """(offset, seq) of every remembered acknowledged record, in offset order."""
        for run in self.runs:
            for i in range(run.count):
                yield run.first_offset + i, run.first_seq + i

    def _run_at_offset(self, offset: int) -> int | None:
        i = bisect.bisect_right(self.runs, offset, key=lambda r: r.first_offset) - 1
        return i if i >= 0 and offset < self.runs[i].end_offset else None

    def _offset_of_seq(self, seq: int) -> int | None:
        i = bisect.bisect_right(self.runs, seq, key=lambda r: r.first_seq) - 1
        if i < 0 or seq >= self.runs[i].first_seq + self.runs[i].count:
            return None
        return self.runs[i].first_offset + (seq - self.runs[i].first_seq)

    # ---- evidence --------------------------------------------------------------------------------

    def acked(self, offset: int, seq: int, acked_ms: int, leader: int,
              run_span_ms: int = RUN_SPAN_MS) -> list[LostRecords]:
        """Remember an acknowledgement; return the remembered records it shows lost (those at offsets >= offset)."""
        if offset < 0 or seq < 0:
            raise ValueError(f"offset and seq must be >= 0, got offset={offset} seq={seq}")
        lost = self._drop(offset, None, "acked_at_lower_offset", offset, acked_ms)
        last = self.runs[-1] if self.runs else None
        if (last is not None and last.end_offset == offset and last.first_seq + last.count == seq
                and last.leader == leader and acked_ms - last.first_acked_ms < run_span_ms):
            last.count += 1
            last.last_acked_ms = max(last.last_acked_ms, acked_ms)
        else:
            if self.runs and seq <= self.runs[-1].first_seq + self.runs[-1].count - 1:
                # Sequence numbers are acknowledged in order; an older one now (after a producer restart
                # without saved state) would break the ledger's order: forget what it cannot be ordered with.
                self.runs.clear()
            self.runs.append(AckRun(offset, seq, 1, 0, acked_ms, acked_ms, leader))
            if len(self.runs) > MAX_RUNS:
                self.runs.pop(0)
        return lost

    def place(self, offset: int, seq: int, acked_ms: int, leader: int) -> bool:
        """Remember an acknowledgement that came without an offset (librdkafka reports a retry the broker found
        already written as delivered, offset unknown) at the offset its record was read at, if that fits the
        remembered order; False (not remembered) if it does not."""
        i = bisect.bisect_right(self.runs, offset, key=lambda r: r.first_offset)
        before = self.runs[i - 1] if i > 0 else None
        after = self.runs[i] if i < len(self.runs) else None
        if before is not None and (before.end_offset > offset or before.first_seq + before.count > seq):
            return False
        if after is not None and (after.first_offset <= offset or after.first_seq <= seq):
            return False
        self.runs.insert(i, AckRun(offset, seq, 1, 0, acked_ms, acked_ms, leader))
        return True

    def read(self, offset: int, seq: int | None, read_ms: int) -> ReadResult:
        """The consumer read offset `offset`: a record of this canary with sequence number `seq`, or (None)
        anything else."""
        duplicate = None
        if seq is not None:
            acked_at = self._offset_of_seq(seq)
            if acked_at is not None and acked_at != offset:
                duplicate = Duplicate(self.partition, seq, acked_at, offset)
        i = self._run_at_offset(offset)
        if i is None:
            return ReadResult(ReadOutcome.UNKNOWN, duplicate=duplicate)
        run = self.runs[i]
        index = offset - run.first_offset
        if seq == run.seq_at(offset):
            if index < run.confirmed:
                return ReadResult(ReadOutcome.RECONFIRMED)
            if index > run.confirmed:  # records before it were never read: keep them apart, unconfirmed
                self.runs[i:i + 1] = [run.piece(0, index), run.piece(index, run.count)]
                run = self.runs[i + 1]
            run.confirmed += 1
            return ReadResult(ReadOutcome.CONFIRMED)
        newer = seq is not None and seq > run.seq_at(offset)
        lost = self._drop(offset, seq if newer else None, "other_record_at_offset", offset, read_ms,
                          only_one=not newer)
        return ReadResult(ReadOutcome.OTHER_RECORD, lost, duplicate)

    def _drop(self, offset: int, below_seq: int | None, evidence: str, evidence_offset: int, now_ms: int,
              only_one: bool = False) -> list[LostRecords]:
        """Forget, as lost, the remembered records at offsets >= offset (only those with seq < below_seq if
        given; only the one at `offset` if only_one)."""
        lost: list[LostRecords] = []
        kept: list[AckRun] = []
        for run in self.runs:
            lo = max(offset - run.first_offset, 0)
            hi = run.count
            if below_seq is not None:
                hi = min(hi, below_seq - run.first_seq)
            if only_one:
                hi = min(hi, offset - run.first_offset + 1)
            if lo >= hi:
                kept.append(run)
                continue
            gone = run.piece(lo, hi)
            lost.append(LostRecords(self.partition, gone.first_offset, gone.first_seq, gone.count,
                                    (run.first_acked_ms, run.last_acked_ms), run.leader, gone.confirmed,
                                    evidence, evidence_offset, now_ms))
            if lo > 0:
                kept.append(run.piece(0, lo))
            if hi < run.count:
                kept.append(run.piece(hi, run.count))
        self.runs = kept
        return lost

    # ---- forgetting ------------------------------------------------------------------------------

    def expire(self, cutoff_ms: int) -> int:
        """Forget the runs acknowledged entirely before cutoff_ms; return how many of their records had not
        been read back (unverified: neither confirmed nor shown lost)."""
        unverified = 0
        while self.runs and self.runs[0].last_acked_ms < cutoff_ms:
            run = self.runs.pop(0)
            unverified += run.count - run.confirmed
        return unverified

    def forget_below(self, log_start_offset: int) -> int:
        """Forget the records below the log start offset (deleted by retention, not lost); return how many of
        them had not been read back."""
        unverified = 0
        kept: list[AckRun] = []
        for run in self.runs:
            if run.end_offset <= log_start_offset:
                unverified += run.count - run.confirmed
            elif run.first_offset < log_start_offset:
                cut = log_start_offset - run.first_offset
                unverified += max(cut - run.confirmed, 0)
                kept.append(run.piece(cut, run.count))
            else:
                kept.append(run)
        self.runs = kept
        return unverified

    # ---- persistence -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, object]:
        return {"next_seq": self.next_seq, "read_next": self.read_next, "runs": [r.to_json() for r in self.runs]}

    @classmethod
    def from_json(cls, partition: int, data: dict[str, Any]) -> PartitionLedger:
        runs = [AckRun.from_json(row) for row in data["runs"]]
        read_next = data.get("read_next")
        ledger = cls(partition, int(data["next_seq"]), None if read_next is None else int(read_next), runs)
        for a, b in itertools.pairwise(runs):
            if not (a.end_offset <= b.first_offset and a.first_seq + a.count <= b.first_seq):
                raise ValueError(f"partition {partition}: runs out of order: {a} then {b}")
        if runs and ledger.next_seq < runs[-1].first_seq + runs[-1].count:
            raise ValueError(f"partition {partition}: next_seq {ledger.next_seq} below a remembered record")
        return ledger


@dataclass
class CanaryState:
    """Everything a canary must remember across a restart, for one cluster and canary topic."""

    cluster_id: str
    topic: str
    topic_id: str
    instance_id: str                      # 16 hex digits, written into every record's value
    ledgers: dict[int, PartitionLedger] = field(default_factory=dict)
    saved_ms: int = 0

    def ledger(self, partition: int) -> PartitionLedger:
        if partition not in self.ledgers:
            self.ledgers[partition] = PartitionLedger(partition)
        return self.ledgers[partition]

    def to_json(self) -> dict[str, object]:
        return {"format": STATE_FORMAT, "cluster_id": self.cluster_id, "topic": self.topic,
                "topic_id": self.topic_id, "instance_id": self.instance_id, "saved_ms": self.saved_ms,
                "partitions": {str(p): ledger.to_json() for p, ledger in sorted(self.ledgers.items())}}

    def save(self, path: Path) -> None:
        write_json_atomic(path, self.to_json())

    @classmethod
    def load(cls, path: Path) -> CanaryState | None:
        """The state saved at `path`, or None if there is none; CanaryStateError if it cannot be read."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            data = json.loads(text)
            if data.get("format") != STATE_FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {STATE_FORMAT}")
            instance_id = str(data["instance_id"])
            bytes.fromhex(instance_id)
            if len(instance_id) != 16:
                raise ValueError(f"instance_id {instance_id!r} is not 16 hex digits")
            ledgers = {int(p): PartitionLedger.from_json(int(p), d) for p, d in data["partitions"].items()}
            return cls(str(data["cluster_id"]), str(data["topic"]), str(data["topic_id"]), instance_id, ledgers,
                       int(data.get("saved_ms", 0)))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CanaryStateError(f"canary state {path}: {e}") from e


# ---- interval reports ------------------------------------------------------------------------

@dataclass(frozen=True)
class LatencySummary:
    """Latency samples of one interval: how many, nearest-rank p50 and p99, and the largest, in ms."""

    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, samples_ms: list[int]) -> LatencySummary | None:
        if not samples_ms:
            return None
        ordered = sorted(samples_ms)
        n = len(ordered)

        def nearest_rank(q: float) -> float:
            return float(ordered[max(math.ceil(q * n), 1) - 1])
        return cls(n, nearest_rank(0.50), nearest_rank(0.99), float(ordered[-1]))


@dataclass(frozen=True)
class PartitionInterval:
    """One canary partition over one interval (the counts are of this interval; in flight and unconfirmed are
    the numbers at its end)."""

    partition: int
    leader: int
    records_sent: int
    records_acked: int
    records_failed: int
    failed_by_error: Mapping[str, int]
    records_lost: int
    lost: tuple[LostRecords, ...]
    records_duplicated: int
    duplicates: tuple[Duplicate, ...]
    records_confirmed: int
    records_unverified: int
    records_in_flight: int
    records_unconfirmed: int
    consumer_resets: int
    preferred_elections: int
    produce_latency_ms: LatencySummary | None
    round_trip_latency_ms: LatencySummary | None
    records_acked_without_offset: int = 0   # of records_acked: watched only once read back (see Canary)
    unacked_for_ms: int = 0   # how long the oldest record still in flight had waited when the interval was taken


@dataclass(frozen=True)
class CanaryInterval:
    """What `Canary.take_interval` returns: every canary partition over the interval ending at ts_ms."""

    ts_ms: int
    topic: str
    acks: str
    partitions: tuple[PartitionInterval, ...]
