"""Collector benchmark: the cost of one collection interval at 3,000 partitions, and how soon a stalled broker
shows in bronze.

    .venv/bin/python bench/collect.py [--partitions 3000] [--intervals 60] [--faults 2] [--heap 512m]

On the fixture cluster (testing/kafka/: a real Kafka 4.3.1, 1 KRaft controller + 3 brokers on loopback, each
node with the Prometheus JMX exporter agent), with `--topics` topics of `--partitions` partitions in all at
RF 3 (no canary unless `--canary`), one `Collector` writes to a fresh lakehouse, stepping once per
`--interval` in a thread as `isrwatch collect` does. The bench measures:

1. intervals: `Collector.step()`'s elapsed time over `--intervals` intervals (after `--warmup`), p50/p95/max,
   with its parts: the Admin requests (`steps_ms`: metadata, elr, configs, list_offsets), the exporter scrape
   (in parallel with them), building the rows, the Delta commits and saving the collector's state, timed by
   wrapping the collector's own methods (nothing in what it does changes); and the collector process's CPU
   share over those intervals (process CPU time / wall time: the bench's main thread only waits meanwhile);
2. faults: `--faults` times, one broker SIGSTOPped until the controller fences it and a few intervals more,
   then resumed, waiting for every ISR to be whole before the next. Per repetition: the time from the
   SIGSTOP to the end of the first bronze commit whose `runs` summary and `cluster_events` show the broker
   not answering (read back from the Delta tables), beside the broker's fencing time (SIGSTOP until it
   leaves the Metadata broker list, polled every 100 ms by the bench on its own connection) and the commit
   of the collector's own `fenced` event.

Figures are printed beside the targets (interval p95 <= 250 ms at 3,000 partitions; fault -> first commit
<= fencing + 1.5 s), never asserted. Other Kafka JVMs on the machine (another test run) share its 2 cores:
the bench names them and, with `--wait-quiet S`, waits up to S s for them to go before it starts. Every JVM
the bench starts is stopped at the end, also on Ctrl-C or failure.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


from bench.collect_cluster import (
    Probe,
    create_topics,
    fault_figures,
    inject_faults,
    log,
    others,
    out_of_memory,
    wait_quiet,
    wait_until,
)
from bench.percentiles import percentile
from collector.collect_loop import Collector, CollectSettings
from testing.kafka import KafkaCluster

INTERVAL_TARGET_P95_MS = 250.0
FAULT_SLACK_S = 1.5
STEP_PARTS = ("metadata", "elr", "configs", "list_offsets", "scrape", "rows", "commit", "state")


# ---- the collector, instrumented -----------------------------------------------------------------------

class Instrumented:
    """Runs a Collector in a thread as `Collector.run` does and times its parts per batch by wrapping its own
    methods (the wrappers only read the clock around the call)."""

    def __init__(self, collector: Collector) -> None:
        self.collector = collector
        self.parts: dict[int, dict[str, float]] = {}
        self.commit_done: dict[int, float] = {}      # batch id -> monotonic time its Delta commits ended
        self.statuses: list[dict[str, Any]] = []
        self.stopping = threading.Event()
        self.failed: BaseException | None = None
        self.closed = False
        self.started: dict[int, float] = {}          # batch id -> monotonic time its cluster read began
        self._wrap(collector, "_scrape", "scrape")
        original_read = collector.reader.read

        def read(now_ms: int) -> Any:
            self.started[self.collector.batch_id] = time.monotonic()
            return original_read(now_ms)

        collector.reader.read = read  # type: ignore[method-assign]
        self._wrap(collector, "_tables", "rows")
        self._wrap(collector.memory, "save", "state")
        original_write = collector.sink.write_batch

        def write_batch(batch_id: int, tables: Any) -> Any:
            t = time.perf_counter()
            try:
                return original_write(batch_id, tables)
            finally:
                self.parts.setdefault(batch_id, {})["commit"] = (time.perf_counter() - t) * 1000
                self.commit_done[batch_id] = time.monotonic()

        collector.sink.write_batch = write_batch  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self._run, name="bench-collector", daemon=True)

    def _wrap(self, owner: Any, method: str, part: str) -> None:
        original = getattr(owner, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            batch = self.collector.batch_id
            t = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.parts.setdefault(batch, {})[part] = (time.perf_counter() - t) * 1000

        setattr(owner, method, timed)

    def _run(self) -> None:
        try:
            self.collector.run(on_step=lambda s: self.statuses.append({**s, "done_at": time.monotonic()}),
                               should_stop=self.stopping.is_set)
        except BaseException as e:  # reported by the main thread
            self.failed = e

    def start(self) -> Instrumented:
        self.thread.start()
        return self

    def batches(self) -> int:
        if self.failed is not None:
            raise RuntimeError(f"the collector failed: {self.failed!r}") from self.failed
        return len(self.statuses)

    def wait_batches(self, n: int, timeout_s: float) -> None:
        wait_until(lambda: self.batches() >= n, timeout_s, f"{n} collector batches", poll_s=0.05)

    def stop(self) -> None:
        """Stop the loop (its last batch is marked final) and close the collector; safe to call twice."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(60)
        if not self.closed:
            self.closed = True
            self.collector.close()


# ---- phase 1: intervals --------------------------------------------------------------------------------

def measure_intervals(run: Instrumented, warmup: int, intervals: int, interval_s: float) -> dict[str, Any]:
    run.wait_batches(warmup, 120)
    first = run.batches()
    cpu0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    log(f"measuring {intervals} intervals at {interval_s:g} s (after {first} warm-up batches)")
    next_report = first + 10
    while run.batches() < first + intervals:
        time.sleep(0.05)
        if run.batches() >= next_report:
            done = run.statuses[first:run.batches()]
            log(f"  {len(done)} intervals: last {done[-1]['elapsed_ms']:.0f} ms, "
                f"p50 so far {statistics.median(s['elapsed_ms'] for s in done):.0f} ms")
            next_report += 10
    cpu1, wall1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    steps = run.statuses[first:first + intervals]
    user, system = cpu1.ru_utime - cpu0.ru_utime, cpu1.ru_stime - cpu0.ru_stime
    return {"steps": steps, "parts": {s["batch"]: {**run.parts.get(s["batch"], {}), **s["steps_ms"]} for s in steps},
            "wall_s": wall1 - wall0, "cpu_user_s": user, "cpu_sys_s": system,
            "partitions": steps[-1]["partitions"] if steps else 0}


# ---- the report ----------------------------------------------------------------------------------------

def seconds(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def print_report(args: argparse.Namespace, setup: dict[str, Any], iv: dict[str, Any] | None,
                 faults: list[dict[str, Any]], profile_text: str | None) -> None:
    print()
    print(f"collector bench: Kafka 4.3.1 fixture, 1 controller + 3 brokers (heap {args.heap} each), "
          f"{args.partitions} partitions in {args.topics} topics at RF 3, canary {'on' if args.canary else 'off'}, "
          f"interval {args.interval:g} s, request timeout {args.timeout:g} s")
    print(f"machine: {os.cpu_count()} cores; load average at start {setup['load_start']:.2f}, at end "
          f"{os.getloadavg()[0]:.2f}; other Kafka JVMs: {setup['others_start']} at start, "
          f"{setup['others_intervals']} during the intervals, {setup['others_end']} at the end"
          + ("  (TIMINGS CONTAMINATED: someone else's Kafka shares the 2 cores)"
             if setup["others_intervals"] or setup["others_end"] else ""))
    print(f"set-up: cluster started in {setup['cluster_s']:.0f} s, topics created and led in {setup['topics_s']:.0f} s"
          + (f"; OUT OF MEMORY on nodes {setup['oom']} (raise --heap)" if setup.get("oom") else ""))
    if iv is not None:
        steps = iv["steps"]
        elapsed = [s["elapsed_ms"] for s in steps]
        p95 = percentile(elapsed, 95)
        print()
        print(f"1. one collection interval (Collector.step elapsed), {len(steps)} intervals, "
              f"{iv['partitions']} partitions seen")
        print(f"  {'part':<14}{'p50 ms':>9}{'p95 ms':>9}{'max ms':>9}{'mean ms':>9}{'runs':>6}")
        print(f"  {'interval':<14}{percentile(elapsed, 50):>9.1f}{p95:>9.1f}{max(elapsed):>9.1f}"
              f"{statistics.fmean(elapsed):>9.1f}{len(elapsed):>6}")
        for part in STEP_PARTS:
            values = [p[part] for p in iv["parts"].values() if part in p]
            if values:
                print(f"  {'  ' + part:<14}{percentile(values, 50):>9.1f}{percentile(values, 95):>9.1f}"
                      f"{max(values):>9.1f}"
                      f"{statistics.fmean(values):>9.1f}{len(values):>6}")
        if iv.get("floor"):
            floor = iv["floor"]
            print(f"  {'commit floor':<14}{percentile(floor, 50):>9.1f}{percentile(floor, 95):>9.1f}{max(floor):>9.1f}"
                  f"{statistics.fmean(floor):>9.1f}{len(floor):>6}")
        print("  (scrape runs beside metadata..list_offsets; configs is the every-30-intervals refresh of topic "
              "configs, features and log start offsets; commit floor: the same sink appending the seven tables with "
              "no rows, as many batches, one per interval, with the cluster still up)")
        print(f"  target: p95 <= {INTERVAL_TARGET_P95_MS:.0f} ms at 3,000 partitions -> p95 {p95:.1f} ms: "
              f"{'met' if p95 <= INTERVAL_TARGET_P95_MS else 'NOT met'}")
        cpu = iv["cpu_user_s"] + iv["cpu_sys_s"]
        print(f"  collector CPU: {cpu:.1f} s ({iv['cpu_user_s']:.1f} user + {iv['cpu_sys_s']:.1f} sys) over "
              f"{iv['wall_s']:.1f} s wall = {cpu / iv['wall_s'] * 100:.1f}% of one core")
    if faults:
        print()
        print(f"2. a SIGSTOPped broker: fault -> end of the first bronze commit showing it (broker.session.timeout.ms "
              f"{args.session_timeout_ms})")
        print(f"  {'rep':<4}{'broker':>7}{'fenced s':>10}{'not-answering':>15}{'batch':>7}{'fenced-event':>14}"
              f"{'batch':>7}{'target s':>10}  met")
        met = []
        for i, f in enumerate(faults, 1):
            target = None if f["fenced_after_s"] is None else f["fenced_after_s"] + FAULT_SLACK_S
            ok = f["silent_commit_s"] is not None and target is not None and f["silent_commit_s"] <= target
            met.append(ok)
            consistent = f["silent_batch"] == f["silent_event_batch"]
            s = seconds
            print(f"  {i:<4}{f['broker']:>7}{s(f['fenced_after_s']):>10}{s(f['silent_commit_s']):>15}"
                  f"{f['silent_batch']!s:>7}{s(f['fenced_commit_s']):>14}{f['fenced_batch']!s:>7}"
                  f"{s(target):>10}  {'yes' if ok else 'NO'}"
                  + ("" if consistent else f"  (broker_state event in batch {f['silent_event_batch']})"))

        def span(key: str) -> str:
            values = [f[key] for f in faults if f[key] is not None]
            return f"{min(values):.2f}..{max(values):.2f} s" if values else "-"

        print(f"  range: fencing {span('fenced_after_s')}; first not-answering commit {span('silent_commit_s')}; "
              f"fenced-event commit {span('fenced_commit_s')}")
        print("  fenced s: SIGSTOP until the broker left the Metadata broker list (bench probe, 100 ms polls); "
              "not-answering / fenced-event: SIGSTOP until the end of the Delta commit of the first batch whose "
              "runs summary (and broker_state event) / fenced cluster_event shows it")
        print(f"  target: first commit <= fencing + {FAULT_SLACK_S:g} s: {sum(met)} of {len(met)} met")
    if profile_text:
        print()
        print(profile_text)


# ---- main ----------------------------------------------------------------------------------------------

class InlineExecutor:
    """Runs what is submitted at once in the caller's thread, so cProfile (which follows one thread) sees it."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args))
        return future

    def map(self, fn: Callable[..., Any], *iterables: Any) -> Any:
        return [fn(*args) for args in zip(*iterables, strict=True)]

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        pass


def commit_floor(lake: str, batches: int, interval_s: float) -> list[float]:
    """ms per batch of the collector's sink (foundation.bronze_sink.DeltaSink) appending the same seven bronze tables
    with no rows at all, one batch per interval, `batches` times: what a collection interval's Delta commits cost
    before a single partition is written (the tables' log grows the same way as the collector's)."""
    from collector import bronze_rows
    from foundation.bronze_sink import DeltaSink
    from schemas import bronze

    tables = (bronze.RUNS, bronze.TOPIC_CONFIGS, bronze.PARTITION_STATE, bronze.BROKER_METRICS, bronze.CLUSTER_EVENTS,
              bronze.ACK_LEDGER, bronze.CONSUMER_PROGRESS)
    sink = DeltaSink(lake, "floor", writer="bench")
    out = []
    for batch in range(batches):
        began = time.perf_counter()
        sink.write_batch(batch, {td: bronze_rows.table(td, "floor", batch, []) for td in tables})
        out.append((time.perf_counter() - began) * 1000)
        time.sleep(max(0.0, interval_s - out[-1] / 1000))
    return out


def profile_steps(collector: Collector, steps: int) -> str:
    """cProfile of `steps` steps of a second Collector, its thread pools replaced by inline execution so that one
    thread does all the work (the parts that overlap in a real step run one after the other here)."""
    collector._pool = InlineExecutor()  # type: ignore[assignment]
    collector.reader._pool = InlineExecutor()  # type: ignore[assignment]
    prof = cProfile.Profile()
    for _ in range(steps):
        prof.enable()
        collector.step()
        prof.disable()
        time.sleep(0.2)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("cumulative").print_stats(30)
    pstats.Stats(prof, stream=buf).strip_dirs().sort_stats("tottime").print_stats(25)
    return f"3. cProfile of {steps} steps, everything in one thread, by cumulative and by own time:\n{buf.getvalue()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--partitions", type=int, default=3000, help="partitions in all, RF 3")
    ap.add_argument("--topics", type=int, default=10, help="topics the partitions are spread over")
    ap.add_argument("--create-calls", type=int, default=3, help="CreateTopics calls the topics are created in")
    ap.add_argument("--heap", default="1g",
                    help="heap of each Kafka JVM (the fixture's 384m runs out of memory within ~10 min with 3,000 "
                         "partitions per broker)")
    ap.add_argument("--intervals", type=int, default=60, help="intervals measured")
    ap.add_argument("--warmup", type=int, default=3, help="batches before the measured ones (the first reads configs)")
    ap.add_argument("--interval", type=float, default=1.0, help="collection interval, s")
    ap.add_argument("--timeout", type=float, default=0.5, help="the collector's per-broker request timeout, s")
    ap.add_argument("--faults", type=int, default=2, help="SIGSTOP repetitions (0: none)")
    ap.add_argument("--fault-brokers", default="3,2,1", help="brokers stalled, in turn")
    ap.add_argument("--hold", type=float, default=3.0,
                    help="seconds a stalled broker stays stopped after its fencing (at least until the collector has "
                         "committed a batch begun after it)")
    ap.add_argument("--session-timeout-ms", type=int, default=9000,
                    help="the controller's broker.session.timeout.ms (Kafka's default)")
    ap.add_argument("--canary", action="store_true", help="run the canary too (its topic adds 3 partitions)")
    ap.set_defaults(floor=True)  # before the flag, so that --help shows no "(default: True)" beside --no-floor
    ap.add_argument("--no-floor", dest="floor", action="store_false", default=argparse.SUPPRESS,
                    help="skip the commit floor (the Delta commits of the same batches with no rows)")
    ap.add_argument("--profile", type=int, default=0, metavar="STEPS",
                    help="after the faults, cProfile this many steps of a second collector, its thread pools "
                         "run inline so that the profile sees all the work")
    ap.add_argument("--wait-quiet", type=float, default=0.0, metavar="S",
                    help="wait up to S s (polling every 30 s) for other Kafka JVMs on the machine to go first")
    ap.add_argument("--workdir", default=None, help="keep the cluster's logs and the lakehouses there (none: a "
                                                    "temporary directory, removed at the end)")
    args = ap.parse_args()
    if args.partitions < args.topics or args.topics < 1:
        ap.error("--partitions must be at least --topics, which must be at least 1")
    fault_brokers = [int(b) for b in args.fault_brokers.split(",")]
    if not set(fault_brokers) <= {1, 2, 3}:
        ap.error("--fault-brokers takes broker ids 1..3")

    # Ctrl-C and SIGTERM end the bench through the finally below, which stops every JVM it started (SIGINT's
    # handler is set too: a shell starting the bench in the background would have it ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.wait_quiet > 0:
        wait_quiet(args.wait_quiet)
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="isrwatch-bench-collect-"))
    lake = str(workdir / "lakehouse")
    setup: dict[str, Any] = {"load_start": os.getloadavg()[0], "others_start": len(others(None))}
    if setup["others_start"]:
        log(f"warning: {setup['others_start']} Kafka JVMs of someone else are running: timings will be contaminated")
    cluster = KafkaCluster(workdir / "kafka", brokers=3, heap=args.heap,
                           controller_config={"broker.session.timeout.ms": str(args.session_timeout_ms)})
    run: Instrumented | None = None
    iv: dict[str, Any] | None = None
    faults: list[dict[str, Any]] = []
    profile_text = None
    try:
        began = time.monotonic()
        log(f"starting Kafka (1 controller + 3 brokers, heap {args.heap}) under {workdir}")
        cluster.start()
        setup["cluster_s"] = time.monotonic() - began
        began = time.monotonic()
        probe = Probe({b: cluster.nodes[b].address for b in cluster.broker_ids()})
        try:
            create_topics(cluster, probe, args.partitions, args.topics, args.create_calls, {})
        finally:
            probe.close()
        setup["topics_s"] = time.monotonic() - began
        canary_factory = None
        if args.canary:
            from collector.canary_feed import canary_for_collector

            canary_factory = canary_for_collector(cluster.bootstrap_servers, lakehouse=lake, topic="__isrwatch_canary",
                                                  rate_per_partition=10.0)
        settings = CollectSettings(cluster.bootstrap_servers.split(","), lake,
                                   metrics_urls={None: cluster.metrics_urls}, interval_s=args.interval,
                                   timeout_s=args.timeout)
        run = Instrumented(Collector(settings, canary_factory=canary_factory)).start()
        log(f"collector started (run {run.collector.run_id}), writing to {lake}")
        iv = measure_intervals(run, args.warmup, args.intervals, args.interval)
        setup["others_intervals"] = len(others(cluster))
        if args.faults:
            faults = inject_faults(cluster, run, args.faults, fault_brokers, args.hold, args.session_timeout_ms / 1000)
            time.sleep(2 * args.interval)
        run.stop()
        faults = fault_figures(lake, run.collector.run_id, run, faults) if faults else []
        if args.floor and iv is not None:
            batches = args.warmup + len(iv["steps"])
            log(f"commit floor: {batches} batches of the seven bronze tables with no rows, one per interval")
            iv["floor"] = commit_floor(str(workdir / "lakehouse-floor"), batches, args.interval)[args.warmup:]
        if args.profile:
            log(f"profiling {args.profile} steps of a second collector")
            second = Collector(CollectSettings(settings.bootstrap_servers, str(workdir / "lakehouse-profile"),
                                               metrics_urls=settings.metrics_urls, interval_s=args.interval,
                                               timeout_s=args.timeout))
            try:
                second.step()  # the first step reads the configs
                profile_text = profile_steps(second, args.profile)
            finally:
                second.close()
        setup["others_end"] = len(others(cluster))
        setup["oom"] = out_of_memory(cluster)
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        if run is not None:
            run.stop()
        log("stopping Kafka")
        cluster.stop()
        left = cluster.running_processes()
        if left:
            log(f"warning: JVMs still running: {left}")
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    setup.setdefault("others_intervals", 0)
    print_report(args, setup, iv, faults, profile_text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
