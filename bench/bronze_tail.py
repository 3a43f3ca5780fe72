"""The bronze tail of bench/alert_latency.py: the peer's exporter and the incidents, from the same commits.

Every 50 ms it reads each new commit of bronze partition_state, broker_metrics and runs (bench/delta_log.py, the
commit's files read with pyarrow): the newest values become the gauges the exporter serves Prometheus, and each
rule's condition, evaluated per commit, begins an incident where it turns true. `Exporter` serves the gauges
(GET /metrics); both systems POST to receivers of their own (tests/alerts/receiver.py).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.delta_log import new_commits
from foundation.bronze_log import added_paths

TAIL_EVERY_S = 0.05


@dataclass
class Incident:
    rule: str
    entity: tuple[str, ...]     # (cluster,) or (cluster, topic, partition)
    began: float                # monotonic: when the commit that made the condition true became visible
    ended: float | None = None


def _partition_conditions(row: dict[str, Any]) -> dict[str, bool]:
    isr, replicas, offline = len(row["isr"] or ()), len(row["replicas"] or ()), row["leader"] < 0
    return {"UnderMinIsr": isr < row["effective_min_isr"] and not offline,
            "UnderReplicated": isr < replicas and not offline}


@dataclass
class BronzeTail:
    """Reads every new bronze commit of partition_state, broker_metrics and runs; keeps the newest values the
    exporter serves and the incidents the conditions make."""

    lake: str
    versions: dict[str, int] = field(default_factory=dict)
    gauges: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    incidents: list[Incident] = field(default_factory=list)
    active: dict[tuple[str, tuple[str, ...]], Incident] = field(default_factory=dict)
    measuring: bool = False
    failed: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def skip_existing(self) -> None:
        """Start from the current versions: what was written before is not measured."""
        for name in ("partition_state", "broker_metrics", "runs"):
            commits = new_commits(f"{self.lake}/bronze/{name}", -1)
            self.versions[name] = commits[-1][0] if commits else -1

    def poll(self) -> None:
        for name in ("partition_state", "broker_metrics", "runs"):
            path = f"{self.lake}/bronze/{name}"
            for version, adds in new_commits(path, self.versions.get(name, -1)):
                seen = time.monotonic()
                rows = pa.concat_tables([pq.read_table(f) for f in added_paths(path, adds)]).to_pylist() if adds else []
                if name != "runs":
                    rows.sort(key=lambda r: r["ts"])
                with self.lock:
                    getattr(self, f"_{name}")(rows, seen)
                self.versions[name] = version

    def _partition_state(self, rows: list[dict[str, Any]], seen: float) -> None:
        for row in rows:
            labels = (("cluster", row["run_id"]), ("topic", row["topic"]), ("partition", str(row["partition"])))
            for metric, value in (("isr_size", len(row["isr"] or ())),
                                  ("replication_factor", len(row["replicas"] or ())),
                                  ("effective_min_isr", row["effective_min_isr"]), ("offline", int(row["leader"] < 0))):
                self.gauges[(f"bronze_partition_{metric}", labels)] = float(value)
            for rule, holds in _partition_conditions(row).items():
                self._condition(rule, (row["run_id"], row["topic"], str(row["partition"])), holds, seen)

    def _broker_metrics(self, rows: list[dict[str, Any]], seen: float) -> None:
        sums: dict[tuple[str, str], float] = {}
        wanted = {"OfflinePartitionsCount": ("bronze_offline_partitions_count", "OfflinePartitions"),
                  "UncleanLeaderElectionsPerSec": ("bronze_unclean_leader_elections_rate", "UncleanLeaderElection")}
        ordered: list[tuple[str, str]] = []
        for row in rows:
            if row["name"] not in wanted or row["value"] is None:
                continue
            metric, rule = wanted[row["name"]]
            self.gauges[(metric, (("cluster", row["run_id"]), ("broker", str(row["broker_id"]))))] = row["value"]
            key = (rule, f"{row['run_id']}\0{row['ts'].isoformat()}")
            if key not in sums:
                ordered.append(key)
            sums[key] = sums.get(key, 0.0) + row["value"]
        for rule, at in ordered:   # per cluster and sample time, in time order: the sum over brokers
            self._condition(rule, (at.split("\0")[0],), sums[(rule, at)] > 0, seen)

    def _runs(self, rows: list[dict[str, Any]], seen: float) -> None:
        # A finished run's cluster stops reporting: its series go, as a scrape target that went away would.
        for cluster in {r["run_id"] for r in rows if r["final"]}:
            self.gauges = {k: v for k, v in self.gauges.items() if ("cluster", cluster) not in k[1]}

    def _condition(self, rule: str, entity: tuple[str, ...], holds: bool, seen: float) -> None:
        key = (rule, entity)
        open_incident = self.active.get(key)
        if holds and open_incident is None:
            incident = Incident(rule, entity, seen)
            self.active[key] = incident
            if self.measuring:
                self.incidents.append(incident)
        elif not holds and open_incident is not None:
            open_incident.ended = seen
            del self.active[key]

    def exposition(self) -> bytes:
        with self.lock:
            lines = [f"{metric}{{{','.join(f'{k}={json.dumps(v)}' for k, v in labels)}}} {value}"
                     for (metric, labels), value in sorted(self.gauges.items())]
        return ("\n".join(lines) + "\n").encode()

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.poll()
                time.sleep(TAIL_EVERY_S)
        except BaseException as e:   # the bench checks after each run: a dead tail measures nothing
            self.failed = e
            raise

    def check(self) -> None:
        if self.failed is not None:
            raise RuntimeError(f"the bronze tail failed: {self.failed!r}") from self.failed


# ---- HTTP: the exporter ---------------------------------------------------------------------------------------------

class Exporter:
    """The peer's exporter: GET /metrics serves the tail's newest gauges."""

    def __init__(self, tail: BronzeTail) -> None:
        class Handler(BaseHTTPRequestHandler):
            # A kept-alive connection, as Prometheus holds one to an exporter (every response says its length).
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                body = tail.exposition()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"
