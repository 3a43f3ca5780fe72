"""The emulated producer client follows librdkafka and the Java client (issue 23, items 1 and 2).

Six partitions, all led by broker 1 (followers 2 and 3), one acks=all producer at 1,000 records/s.
"""

from __future__ import annotations

import itertools
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


def sends(sim: Simulation) -> list[tuple[int, int, list[int], int]]:
    """Every request the client sends, as (time, leader, partitions, records of the partition in flight before)."""
    client: ProducerClient = sim.produce.client
    out: list[tuple[int, int, list[int], int]] = []
    send = client._send

    def recording(index: int, st: Any, leader: int, batches: list[Any]) -> None:
        before = max(st.records_in_flight[b.p] for b in batches)
        out.append((sim.clock.now_ms, leader, [b.p for b in batches], before))
        send(index, st, leader, batches)

    client._send = recording  # type: ignore[method-assign]
    return out


def test_the_broker_reads_a_connections_next_request_only_after_answering_the_one_before() -> None:
    """SocketServer's Processor mutes a connection once it has read a request, until that request's answer has
    gone out. Brokers 2 and 3 stall: the first request broker 1 read waits in purgatory for request.timeout.ms
    (30 s, the HW frozen under min ISR), and the four sent behind it on the same connection are read only then,
    when the ISR (fenced down to broker 1) is below min ISR: one REQUEST_TIMED_OUT, the rest NOT_ENOUGH_REPLICAS
    in the same millisecond, not five timeouts."""
    sim = scenario("  - {at: 5s, kind: pause, brokers: [2, 3], duration: 60s}", duration="80s")
    sim.run()
    timed_out = [e for e in events(sim, "produce_rejected") if e[7] == "REQUEST_TIMED_OUT"]
    assert len(timed_out) == 1 and 35_000 <= timed_out[0][0] < 35_100
    at_once = [e for e in events(sim, "produce_rejected") if e[0] == timed_out[0][0] and e[7] == "NOT_ENOUGH_REPLICAS"]
    assert len(at_once) >= 4


def test_a_client_keeps_writing_to_a_paused_leader_and_moves_when_it_answers() -> None:
    """The client's metadata is its own (librdkafka's rd_kafka_toppar_leader_unavailable and fast leader query;
    the Java client's Metadata.requestUpdate): it asks who leads on NOT_LEADER_OR_FOLLOWER, on a failed
    connection, and every metadata.max.age.ms. A paused leader's connection stays open and its requests hang
    (socket.timeout.ms 60 s is longer than the 30 s pause), so although the controller moves leadership to broker
    2 when broker 1's session expires (~9 s), nothing is sent to broker 2 before broker 1 resumes and answers
    NOT_LEADER_OR_FOLLOWER, whose answer names the new leader (KIP-951): then at once."""
    sim = scenario("  - {at: 5s, kind: pause, broker: 1, duration: 30s}")
    sent = sends(sim)
    sim.run()
    moved = [e[0] for e in events(sim, "election") if e[3] == 2]
    assert moved and moved[0] < 16_000
    to_two = [t for t, leader, _, _ in sent if leader == 2]
    assert to_two and 35_000 <= to_two[0] <= 35_010
    refused = [e[0] for e in events(sim, "produce_rejected") if e[3] == 1 and e[7] == "NOT_LEADER_OR_FOLLOWER"]
    assert refused and min(refused) >= 35_000


def test_after_a_crash_the_client_asks_again_until_it_finds_the_new_leader() -> None:
    """A crashed leader closes its connections (_TRANSPORT): the client asks who leads at once, and again every
    retry.backoff.max.ms (1 s) while the leader it knows cannot be reached, so it writes to the new leader within
    a second of the election's metadata, not at metadata.max.age.ms."""
    sim = scenario("  - {at: 5s, kind: crash, broker: 1, duration: 40s}")
    sent = sends(sim)
    s = sim.run()
    assert s["client_errors"]["_TRANSPORT"] >= 1
    to_two = [t for t, leader, _, _ in sent if leader == 2]
    fenced = [e[0] for e in events(sim, "fenced") if e[3] == 1]
    assert fenced and to_two and fenced[0] <= to_two[0] <= fenced[0] + 1_300


def test_an_idempotent_producer_keeps_fewer_than_five_records_in_flight_before_sending_more() -> None:
    """librdkafka's rd_kafka_toppar_producer_serve caps an idempotent partition's requests by
    RD_KAFKA_IDEMP_MAX_INFLIGHT (5) less rktp_msgs_inflight, a count of records: a partition sends its next
    batch only while fewer than five of its records are unanswered. Without idempotence only the connection's
    max.in.flight.requests.per.connection limits it."""
    stall = "  - {at: 2s, kind: pause, brokers: [2, 3], duration: 3s}"   # writes wait in purgatory meanwhile
    idem = scenario(stall, duration="8s", client="enable.idempotence: true")
    sent = sends(idem)
    idem.run()
    assert len(sent) > 1_000 and all(before < 5 for *_, before in sent)
    plain = scenario(stall, duration="8s")
    sent = sends(plain)
    plain.run()
    assert max(before for *_, before in sent) >= 5


UNCLEAN = """
name: unclean
duration: 60s
cluster: {{brokers: 3}}
topics:
  - {{name: t, partitions: 1, replication.factor: 3,
     config: {{min.insync.replicas: 1, unclean.leader.election.enable: true}}, assignment: [[1, 2, 3]]}}
workload:
  producers:
    - {{name: w, topic: t, acks: all, rate: 500, linger.ms: 5, enable.idempotence: {idempotent}}}
faults:
  - {{at: 10s, kind: pause, broker: 3, duration: 15s}}
  - {{at: 25s, kind: crash, brokers: [1, 2]}}
"""


def test_an_unclean_election_that_loses_acknowledged_sequences_is_fatal_to_an_idempotent_producer() -> None:
    """Broker 3 falls 15 s behind, then is the only replica left and is elected uncleanly. Its log's producer
    state ends at a sequence number far below what the client saw acknowledged, so the head-of-line batch is
    refused (ProducerAppendInfo.checkSequence: OUT_OF_ORDER_SEQUENCE_NUMBER), which librdkafka's idempotent
    producer treats as fatal (rd_kafka_handle_idempotent_Produce_error, r == 0): every record it holds fails and
    it produces no more. Without idempotence the same producer writes on to the new leader."""
    idem = simulate(UNCLEAN.format(idempotent="true"))
    s = idem.run()
    assert s["client_errors"]["OUT_OF_ORDER_SEQUENCE_NUMBER"] == 1 and s["client_errors"]["_FATAL"] >= 1
    refused = [e for e in events(idem, "produce_rejected") if e[7] == "OUT_OF_ORDER_SEQUENCE_NUMBER"]
    assert len(refused) == 1 and refused[0][3] == 3
    totals = idem.ledger.totals
    assert totals.sent["all"] == totals.acked["all"] + totals.failed["all"]
    assert 12_000 <= totals.acked["all"] <= 12_600 and totals.sent["all"] < 25_000   # it stopped at the fatal error
    assert s["records"]["lost"]["all"] > 7_000   # what broker 3 never had of the 15 s it lagged

    plain = simulate(UNCLEAN.format(idempotent="false"))
    s = plain.run()
    assert "OUT_OF_ORDER_SEQUENCE_NUMBER" not in s["client_errors"] and "_FATAL" not in s["client_errors"]
    assert plain.ledger.totals.acked["all"] > 25_000 and s["records"]["lost"]["all"] > 7_000


DUPLICATE = """
name: duplicate
duration: 30s
cluster: {{brokers: 3}}
topics:
  - {{name: t, partitions: 1, replication.factor: 3, config: {{min.insync.replicas: 2}}, assignment: [[1, 2, 3]]}}
workload:
  producers:
    - {{name: w, topic: t, acks: all, rate: 200, linger.ms: 5, socket.timeout.ms: 2s,
       enable.idempotence: {idempotent}}}
faults:
  - {{at: 10s, kind: pause, brokers: [2, 3], duration: 5s}}
"""


def test_a_retried_batch_the_leader_already_wrote_is_answered_as_a_duplicate_not_written_twice() -> None:
    """Followers stall for 5 s (shorter than their session): broker 1 writes what it is sent but cannot commit
    it, and the client gives its requests up after socket.timeout.ms (2 s) and sends the batches again. With
    idempotence the leader finds each batch's sequence numbers already in its log and answers with the first
    write's offsets (ProducerStateManager's batch metadata, DUPLICATE_SEQUENCE_NUMBER taken as success by
    librdkafka): the log holds every record once. Without it the retried batches are written again."""
    idem = simulate(DUPLICATE.format(idempotent="true"))
    s = idem.run()
    assert s["client_errors"]["_TIMED_OUT"] >= 1
    totals = idem.ledger.totals
    assert int(idem.table.leo[0].max()) == totals.acked["all"] and totals.sent["all"] - totals.acked["all"] <= 5
    plain = simulate(DUPLICATE.format(idempotent="false"))
    s = plain.run()
    assert s["client_errors"]["_TIMED_OUT"] >= 1
    assert int(plain.table.leo[0].max()) > plain.ledger.totals.sent["all"]


def test_librdkafkas_sticky_partitioner_moves_every_sticky_partitioning_linger_ms() -> None:
    """librdkafka (sticky.partitioning.linger.ms, 10 ms by default) gives keyless records a new random partition
    every 10 ms; the Java client's adaptive partitioner only after a full batch (batch.size: 16 KB of 512-byte
    records at 1,000 records/s, every 32 ms). Each switch draws among all six partitions, the same one included."""

    def switches(client: str) -> int:
        sim = scenario("", duration="2s", client=client)
        chosen: list[int] = []
        sent = sim.ledger.sent

        def noting(p: int, acks: int, records: int) -> None:
            chosen.append(p)
            sent(p, acks, records)

        sim.ledger.sent = noting  # type: ignore[method-assign]
        sim.run()
        return sum(1 for a, b in itertools.pairwise(chosen) if a != b)

    # 200 draws in 2 s, 5 in 6 of them a different partition; 62 draws for the Java client.
    assert 140 <= switches("sticky.partitioning.linger.ms: 10") <= 190
    assert 35 <= switches("retries: 2147483647") <= 62


HANDLED = """
name: handled
duration: 5s
cluster: {{brokers: 3, config: {{request.handling.ms: {handling}}}}}
topics:
  - {{name: t, partitions: 1, replication.factor: 3, assignment: [[1, 2, 3]]}}
workload:
  producers:
    - {{name: w, topic: t, acks: all, rate: 20, linger.ms: 5}}
"""


def round_trips(handling: int) -> Counter[int]:
    """Each acks=all request's time from send to answer, one record every 50 ms (nothing queues behind another)."""
    sim = simulate(HANDLED.format(handling=handling))
    client: ProducerClient = sim.produce.client
    send, respond = client._send, client.response
    sent: dict[int, int] = {}
    took: Counter[int] = Counter()

    def sending(index: int, st: Any, leader: int, batches: list[Any]) -> None:
        sent[client.next_request_id] = sim.clock.now_ms
        send(index, st, leader, batches)

    def answered(request: Any) -> None:
        took[sim.clock.now_ms - sent[request.request_id]] += 1
        respond(request)

    client._send = sending  # type: ignore[method-assign]
    client.response = answered  # type: ignore[method-assign]
    sim.run()
    return took


def test_request_handling_time_stretches_the_acks_all_round_trip_by_three_broker_hops() -> None:
    """An acks=all write is answered once the followers' next fetches pass it: the leader handles the produce
    request, each follower the fetch answer that carries the record, the leader the fetch that acknowledges it.
    One-way latency 1 ms: 4 ms without handling time, 4 + 3 x 5 ms with request.handling.ms 5 (what the fidelity
    bench sets to match this machine's brokers)."""
    fast, handled = round_trips(0), round_trips(5)
    assert list(fast) == [4] and fast[4] >= 98   # one record every 50 ms for 5 s
    assert list(handled) == [19] and handled[19] >= 98
