"""Fetches a network partition cuts off: their answers wait for the heal, or the follower's request times out."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker_emulator.fetch_session import FetchRequest


class CutFetches:
    """The part of Replication that holds a parked fetch's answer across a network cut (TCP retransmits it)."""

    sim: Any
    parked: dict[tuple[int, int], FetchRequest]
    cut_off: dict[tuple[int, int], FetchRequest]
    session_fetch_ms: dict[tuple[int, int], int]

    def respond(self, req: FetchRequest) -> None: ...
    def retry_after_backoff(self, key: tuple[int, int]) -> None: ...

    def network_cut(self) -> None:
        """A network partition: a fetch parked at a leader its follower no longer reaches gets no answer across it.

        The leader's answer waits in TCP's retransmissions: it arrives once the network heals (`network_healed`),
        unless the follower's request timed out first, replica.socket.timeout.ms after it was sent (the fetcher's
        NetworkClient then disconnects, and AbstractFetcherThread retries after replica.fetch.backoff.ms).
        """
        sim = self.sim
        now, cfg = sim.clock.now_ms, sim.cfg
        for key in sorted(self.parked):
            if sim.network.reachable(*key):
                continue
            req = self.parked.pop(key)
            sent = self.session_fetch_ms.get(key, now) - cfg.network_latency_ms
            self.cut_off[key] = req
            sim.queue.schedule(max(now, sent + cfg.replica_socket_timeout_ms), "fetch_timeout",
                               (key, req.request_id))

    def network_healed(self) -> None:
        """The answers held by the cut arrive (their requests had not timed out yet)."""
        for key in sorted(self.cut_off):
            if not self.sim.network.reachable(*key):
                continue
            req = self.cut_off.pop(key)
            if self.sim.brokers.running(key[1]):
                self.respond(req)
            else:   # the leader went down meanwhile: the connection is gone, the follower retries
                self.retry_after_backoff(key)

    def fetch_timeout(self, payload: tuple[tuple[int, int], int]) -> None:
        key, request_id = payload
        req = self.cut_off.get(key)
        if req is not None and req.request_id == request_id:
            del self.cut_off[key]
            self.retry_after_backoff(key)
