"""The canary reader's decoding of a Fetch answer (collector/canary_fetch.py), on record batches built the way a
broker stores them; the reader against brokers that die is tested on a real cluster (test_canary_broker_faults.py)."""

from __future__ import annotations

import pytest
from kafka.record import MemoryRecordsBuilder

from collector.canary_fetch import decode_fetched


def batch(first_offset: int, values: list[bytes]) -> bytes:
    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=first_offset)
    for value in values:
        builder.append(timestamp=1_000, key=None, value=value)
    builder.close()
    return bytes(builder.buffer())


def test_records_below_the_offset_asked_are_left_out_and_the_next_offset_is_past_the_last_batch() -> None:
    # A fetch at offset 12 is answered from the batch holding it, which starts at 10.
    data = batch(10, [b"a", b"b", b"c", b"d", b"e"]) + batch(15, [b"f", b"g"])
    fetched = decode_fetched(3, 12, data)
    assert fetched.partition == 3 and fetched.fetched_offset == 12
    assert fetched.records == ((12, b"c"), (13, b"d"), (14, b"e"), (15, b"f"), (16, b"g"))
    assert fetched.next_offset == 17


def test_an_empty_answer_reads_again_from_the_same_offset() -> None:
    assert decode_fetched(0, 40, None).records == ()
    assert decode_fetched(0, 40, b"").next_offset == 40


def test_a_batch_cut_off_at_the_answers_size_limit_is_read_whole_next_time() -> None:
    whole = batch(20, [b"x" * 100, b"y" * 100])
    cut = decode_fetched(0, 20, batch(18, [b"p", b"q"]) + whole[:-30])
    assert cut.records == () and cut.next_offset == 20
    assert decode_fetched(0, cut.next_offset, whole).records == ((20, b"x" * 100), (21, b"y" * 100))


def test_a_batch_failing_its_crc_is_refused() -> None:
    data = bytearray(batch(0, [b"value"]))
    data[-1] ^= 0xFF
    with pytest.raises(ValueError, match="at offset 0 fails its CRC check"):
        decode_fetched(0, 0, bytes(data))


def test_the_crc_check_runs_in_c() -> None:
    """kafka-python checks CRC-32C with the `crc32c` package when it is installed (a dependency), else in pure Python:
    several times slower, and the canary checks every batch it reads."""
    from kafka.record import util

    assert util.calc_crc32c.__defaults__ is not None
    assert util.calc_crc32c.__defaults__[0] is util.crc32c_c is not None
    assert util.calc_crc32c(b"123456789") == 0xE3069283   # the CRC-32C check value
