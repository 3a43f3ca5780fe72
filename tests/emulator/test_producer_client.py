"""The emulated producer client follows librdkafka and the Java client (issue 23, items 1 and 2).

Six partitions, all led by broker 1 (followers 2 and 3), one acks=all producer at 1,000 records/s.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker_emulator.producer_client import LOCAL_MSG_TIMED_OUT, LOCAL_TIMED_OUT, ProducerClient
from broker_emulator.simulation import Simulation
from tests.emulator.helpers import events, simulate

SCENARIO = """
name: client
duration: {duration}
cluster: {{brokers: 3}}
topics:
  - {{name: t, partitions: 6, replication.factor: 3, config: {{min.insync.replicas: 2}},
     assignment: [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 3]]}}
workload:
  producers:
    - {{name: w, topic: t, acks: all, rate: 1000, linger.ms: 5, {client}}}
faults:
{faults}
"""


def scenario(faults: str, *, duration: str = "60s", client: str = "retries: 2147483647") -> Simulation:
    return simulate(SCENARIO.format(duration=duration, faults=faults, client=client))


def rejected(sim: Simulation, since_ms: int = 0) -> Counter[tuple[int, str]]:
    return Counter((e[3], e[7]) for e in events(sim, "produce_rejected") if e[0] >= since_ms)


def in_flight_peaks(sim: Simulation) -> dict[int, int]:
    """The most requests ever unanswered on each leader connection, seen at every send."""
    client: ProducerClient = sim.produce.client
    peaks: dict[int, int] = {}
    send = client._send

    def counting(index: int, st: Any, leader: int, batches: list[Any]) -> None:
        send(index, st, leader, batches)
        peaks[leader] = max(peaks.get(leader, 0), len(st.in_flight[leader]))

    client._send = counting  # type: ignore[method-assign]
    return peaks


def test_a_partition_below_min_isr_is_retried_once_per_backoff_not_once_per_linger() -> None:
    """RecordAccumulator.drain (a partition whose first batch is backing off is skipped; one batch per partition
    a request) and Sender.sendProducerData (max.in.flight.requests.per.connection): brokers 2 and 3 stalled for
    60 s. Until their fencing broker 1 takes writes it cannot commit; with the HW frozen under min ISR (KIP-966)
    its five requests in flight wait in purgatory for request.timeout.ms (30 s), and nothing more is sent. Then
    it refuses each partition's writes with NOT_ENOUGH_REPLICAS about once per retry.backoff.max.ms (1 s) until
    they return: the real cluster counted 200-211 in such a run; the emulator used to count 29,157 (every 5 ms
    linger batch sent and failed on its own)."""
    sim = scenario("  - {at: 5s, kind: pause, brokers: [2, 3], duration: 60s}", duration="80s")
    peaks = in_flight_peaks(sim)
    s = sim.run()
    fenced = sorted(e[0] for e in events(sim, "fenced"))
    assert len(fenced) == 2 and 12_000 < fenced[0] <= fenced[1] < 15_000
    timed_out = [e[0] for e in events(sim, "produce_rejected") if e[7] == "REQUEST_TIMED_OUT"]
    assert 1 <= len(timed_out) <= 5 * 6 and 35_000 <= min(timed_out) <= max(timed_out) < 35_100
    refused = rejected(sim)[(1, "NOT_ENOUGH_REPLICAS")]
    # From the timeouts to the resume at 65 s: per partition one refusal a second once the backoff has doubled
    # from 100 ms to its 1 s ceiling (100, 200, 400, 800 ms first: a few more), each ±20 %.
    window_s = (65_000 - min(timed_out)) / 1000
    assert 6 * window_s * 0.8 <= refused <= 6 * (window_s / 0.8 + 5), refused
    assert s["produce_errors"]["NOT_ENOUGH_REPLICAS"] == refused == s["client_errors"]["NOT_ENOUGH_REPLICAS"]
    assert peaks[1] <= 5
    # Nothing acknowledged was lost, and every record was delivered once the ISR was whole again.
    assert s["records"]["lost"] == {} and s["records"]["failed"] == {}


def test_requests_a_paused_leader_holds_time_out_and_are_not_replayed_at_resume() -> None:
    """librdkafka rd_kafka_broker_timeout_scan: a ProduceRequest unanswered after socket.timeout.ms fails its
    connection and every request in flight on it ("Timed out 5 in-flight"); the batches are retried at the
    leader metadata names next. Broker 1 paused for 30 s: with socket.timeout.ms 12 s the client gives its five
    held requests up before the resume, and the resumed broker answers none of them (the emulator used to
    replay them all, a burst of NOT_LEADER_OR_FOLLOWER); with 60 s, longer than the pause, the held requests
    are still read at the resume, and refused as the old leader's, at most five requests' worth."""
    short = scenario("  - {at: 5s, kind: pause, broker: 1, duration: 30s}", client="socket.timeout.ms: 12s")
    peaks = in_flight_peaks(short)
    s = short.run()
    assert 5 <= s["client_errors"][LOCAL_TIMED_OUT] <= 5 * 6   # five requests, one to six batches each
    assert rejected(short, since_ms=35_000)[(1, "NOT_LEADER_OR_FOLLOWER")] == 0
    assert peaks[1] == 5 and s["records"]["lost"] == {} and s["records"]["failed"] == {}

    long = scenario("  - {at: 5s, kind: pause, broker: 1, duration: 30s}", client="socket.timeout.ms: 60s")
    s = long.run()
    assert LOCAL_TIMED_OUT not in s["client_errors"]
    stale = rejected(long, since_ms=35_000)[(1, "NOT_LEADER_OR_FOLLOWER")]
    assert 1 <= stale <= 5 * 6 and s["records"]["lost"] == {} and s["records"]["failed"] == {}


def test_batches_fail_at_the_delivery_timeout_and_not_before() -> None:
    """Sender/RecordAccumulator expiry (delivery.timeout.ms; librdkafka's message.timeout.ms): with every replica
    down, records wait in the accumulator and on retries; each batch fails delivery.timeout.ms (5 s) after it
    was created, and the ledger counts its records failed, not lost."""
    sim = scenario("  - {at: 10s, kind: crash, brokers: [1, 2, 3], duration: 20s}",
                   client="delivery.timeout.ms: 5s")
    sim.run_until(14_900)
    assert sim.ledger.totals.failed == {} and LOCAL_MSG_TIMED_OUT not in sim.produce.client.errors
    sim.run_until(16_000)
    assert sim.ledger.totals.failed["all"] > 0 and sim.produce.client.errors[LOCAL_MSG_TIMED_OUT] > 0
    s = sim.run()
    assert s["records"]["failed"]["all"] >= 15 * 1000 * 0.9 and s["records"]["lost"] == {}
