"""A broker that stops answering holds one collection interval, not each of them: once it has missed an interval, the
next ones ask it beside the other brokers and go on without its answer (a stalled broker otherwise cost every
interval the request timeout, and the controller's view of its fence reached bronze that much later)."""

from __future__ import annotations

import threading
import time
from typing import Any

from collector.cluster_view import ClusterReader
from collector.kafka_wire import BrokerUnavailable
from tests.collector.test_stale_answers import Broker


class StallingBroker(Broker):
    """Answers until `stall()`; then its first request times out and the next ones hang until `resume()`."""

    def __init__(self, epoch: int) -> None:
        super().__init__(epoch)
        self.stalled = False
        self.released = threading.Event()
        self.requests_while_stalled = 0
        self.hanging = 0

    def stall(self) -> None:
        self.stalled = True
        self.released.clear()

    def resume(self) -> None:
        self.stalled = False
        self.released.set()

    def request(self, message: Any, response_class: Any, version: int) -> Any:
        if self.stalled:
            self.requests_while_stalled += 1
            if self.requests_while_stalled == 1:
                raise BrokerUnavailable("broker 3: timed out")
            self.hanging += 1
            # A hang guard only: a reader that waited for this answer would block its interval until here.
            if not self.released.wait(60):
                raise BrokerUnavailable("broker 3: timed out")
            self.hanging -= 1
        return super().request(message, response_class, version)


def test_a_silent_broker_holds_one_interval_and_is_asked_once_while_its_request_is_out() -> None:
    brokers: dict[int, Broker] = {1: Broker(epoch=4), 2: Broker(epoch=4)}
    stalling = brokers[3] = StallingBroker(epoch=4)
    reader = ClusterReader(["127.0.0.1:9001"])
    reader.connections = dict(brokers)  # type: ignore[arg-type]
    reader.addresses = {b: f"127.0.0.1:{9000 + b}" for b in brokers}
    try:
        assert reader.read(1).not_answering == {}
        stalling.stall()
        # The interval it first misses waits for its timeout (here at once); the next one asks it again, beside the
        # others, and ends while that request hangs.
        assert sorted(reader.read(2).not_answering) == [3]
        assert stalling.requests_while_stalled == 1
        views = [reader.read(now) for now in range(3, 8)]
        assert [sorted(v.not_answering) for v in views] == [[3]] * 5
        assert stalling.hanging == 1 and stalling.requests_while_stalled == 2, \
            "one request out to it at a time, and every interval ended without its answer"
        assert all(len(v.partitions) == len(views[0].partitions) > 0 for v in views), \
            "the cluster is still read from the other brokers"
        assert "no answer yet" in views[-1].not_answering[3]
        stalling.resume()
        # Its hanging request is answered: an interval after that counts the answer (the broker is alive again).
        for now in range(8, 1_000):
            if reader.read(now).not_answering == {}:
                break
            time.sleep(0.01)
        else:
            raise AssertionError("broker 3 never counted as answering once it answered again")
    finally:
        stalling.resume()
        reader.close()
