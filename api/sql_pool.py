"""The SQL worker processes behind `POST /api/v1/query`: a fixed number of slots, each holding one worker
process (api/sql_worker.py) that runs one query at a time.

Untrusted SQL runs where it cannot hurt the server: a query that overflows DataFusion's stack or runs out of
the worker's memory ends the worker, not the server; a query past its time limit has its worker killed
(DataFusion cannot be interrupted), so the slot is free again at once. Either way the slot gets a new worker
and the client an answer saying what happened.

A worker is a fresh interpreter (`python -c "…sql_worker…"` through subprocess) that inherits none of the
server's threads, sockets or locks, and talks over a socket pair with multiprocessing's `Connection` (pickled
messages). Not multiprocessing's `spawn`: it runs the parent's main script again in every worker (which broke
under `python -`, and would start a server from a launcher script without a `__main__` guard), and starts a
resource-tracker process. Forking from a warm parent would be quicker, but pyarrow's jemalloc and numpy start
threads at import, and a fork of a threaded process may deadlock.

A new worker takes about a second to import DataFusion and open the tables (several on a busy machine), so
the pool keeps one spare worker started ahead: it takes the place of one that ends, and a new spare starts.
A query waits for its worker when it is not ready yet. The pool is started and stopped with the app
(api/app.py's lifespan), so no process outlives it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import anyio.to_thread

import api
from api.sql_query import QueryFailed, QueryRejected, QueryResult, QueryTimeout

# The worker imports the same `api` package as the server, wherever that is.
_PROJECT_ROOT = str(Path(api.__file__).resolve().parent.parent)
_WORKER_MAIN = "from api.sql_worker import main_from_argv; main_from_argv()"
_START_TIMEOUT_S = 60.0
_JOIN_TIMEOUT_S = 5.0
_EXIT_GRACE_S = 1.0    # a worker whose pipe closed is ending: its own exit code says why
_CRASH_HINTS = {signal.SIGSEGV: "a stack overflow: a too deeply nested query?",
                signal.SIGABRT: "out of memory past api.query_worker_memory_mb?",
                signal.SIGKILL: "killed from outside"}


class WorkersUnavailable(RuntimeError):
    """Raised when no worker can run the query: all busy, not running, or the worker died (HTTP 503)."""


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    conn: Connection
    ready: bool = False


@dataclass
class _Slot:
    worker: _Worker | None = None


class SqlWorkerPool:
    def __init__(self, root: str, *, workers: int, memory_mb: int, refresh_s: float, spare: bool = True,
                 start_timeout_s: float = _START_TIMEOUT_S) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if memory_mb < 0:
            raise ValueError(f"memory_mb must be >= 0, got {memory_mb}")
        self.root = root
        self.size = workers
        self.memory_bytes = memory_mb * 1024 * 1024
        self.refresh_s = refresh_s
        self.start_timeout_s = start_timeout_s
        self.keeps_spare = spare
        self.replaced = 0           # workers started in place of one that died or was killed
        self._slots = [_Slot() for _ in range(workers)]
        self._spare: _Worker | None = None      # started ahead, to take the place of one that ends
        self._idle: asyncio.Queue[_Slot] | None = None
        self._lock = threading.Lock()
        self._running = False

    # -- lifecycle --------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start every worker (not waiting for them to be ready: a query waits for its worker)."""
        with self._lock:
            if self._running:
                return
            self._running = True
            self._idle = asyncio.Queue()
            for slot in self._slots:
                slot.worker = self._spawn()
                self._idle.put_nowait(slot)
            self._spare = self._spawn() if self.keeps_spare else None

    def stop(self) -> None:
        """Kill every worker and wait for each to end. A query in flight answers 503."""
        with self._lock:
            self._running = False
            self._idle = None
            workers = [w for w in [*(s.worker for s in self._slots), self._spare] if w is not None]
            for slot in self._slots:
                slot.worker = None
            self._spare = None
        for worker in workers:
            _end(worker)

    def pids(self) -> list[int]:
        """The workers' process ids, the spare's last."""
        with self._lock:
            workers = [*(s.worker for s in self._slots), self._spare]
            return [w.process.pid for w in workers if w is not None]

    # -- queries ----------------------------------------------------------------------------------------
    async def run(self, sql: str, max_rows: int, timeout_s: float, wait_s: float) -> QueryResult:
        """Run `sql` (already checked read-only) on a free worker, waiting at most `wait_s` for one."""
        idle = self._idle
        if idle is None:
            raise WorkersUnavailable("SQL workers are not running")
        try:
            slot = idle.get_nowait()
        except asyncio.QueueEmpty:
            try:
                slot = await asyncio.wait_for(idle.get(), wait_s)
            except TimeoutError:
                raise WorkersUnavailable(f"all SQL workers busy ({self.size}, api.query_workers); "
                                         f"none was free within {wait_s:g} s") from None
        slot = _prefer_ready(idle, slot)
        try:
            # Not abandoned on cancellation: the slot goes back only once its worker is done or replaced.
            return await anyio.to_thread.run_sync(self._exchange, slot, sql, max_rows, timeout_s)
        finally:
            if self._idle is idle:
                idle.put_nowait(slot)

    def _exchange(self, slot: _Slot, sql: str, max_rows: int, timeout_s: float) -> QueryResult:
        worker = self._ready_worker(slot)
        began = time.perf_counter()
        try:
            worker.conn.send((sql, max_rows))
            done = worker.conn.poll(timeout_s)
            reply = worker.conn.recv() if done else None
        except (EOFError, OSError):
            raise WorkersUnavailable(self._replace(slot, worker, "died running the query", _EXIT_GRACE_S)) from None
        if reply is None:
            self._replace(slot, worker, "killed past the time limit", 0)
            raise QueryTimeout(f"query ran longer than {timeout_s:g} s")
        elapsed_ms = (time.perf_counter() - began) * 1000
        kind = reply[0]
        if kind == "ok":
            _, columns, rows, truncated = reply
            return QueryResult(columns, rows, truncated, elapsed_ms)
        if kind == "rejected":
            raise QueryRejected(reply[1])
        assert kind == "failed", f"unknown reply {kind!r} from SQL worker {worker.process.pid}"
        raise QueryFailed(reply[1])

    def _ready_worker(self, slot: _Slot) -> _Worker:
        """The slot's worker once it is ready. One that died before the query reached it (killed while idle or
        while starting) is replaced, once: the query did not cause that."""
        for retry in (True, False):
            worker = slot.worker
            if worker is None:
                raise WorkersUnavailable("SQL workers are stopping")
            if not worker.ready:
                try:
                    if not worker.conn.poll(self.start_timeout_s):
                        raise WorkersUnavailable(self._replace(
                            slot, worker, f"did not start within {self.start_timeout_s:g} s", 0))
                    kind, _pid = worker.conn.recv()
                except (EOFError, OSError):
                    what = self._replace(slot, worker, "ended while starting", _EXIT_GRACE_S)
                    if not retry:
                        raise WorkersUnavailable(what) from None
                    continue
                assert kind == "ready", f"SQL worker {worker.process.pid} sent {kind!r} before ready"
                worker.ready = True
            # Its "ready" may have been read after it died: whether it still runs is the process's answer.
            if worker.process.poll() is None:
                return worker
            what = self._replace(slot, worker, "died while idle", 0)
            if not retry:
                raise WorkersUnavailable(what)
        raise AssertionError("unreachable: the second pass returns or raises")

    # -- processes --------------------------------------------------------------------------------------
    def _spawn(self) -> _Worker:
        ours, theirs = socket.socketpair()
        config = json.dumps({"fd": theirs.fileno(), "root": self.root, "refresh_s": self.refresh_s,
                             "memory_bytes": self.memory_bytes})
        pythonpath = os.pathsep.join(p for p in (_PROJECT_ROOT, os.environ.get("PYTHONPATH")) if p)
        try:
            process = subprocess.Popen([sys.executable, "-c", _WORKER_MAIN, config], pass_fds=(theirs.fileno(),),
                                       stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": pythonpath})
        finally:
            theirs.close()
        return _Worker(process, Connection(ours.detach()))

    def _replace(self, slot: _Slot, worker: _Worker, what: str, grace_s: float) -> str:
        """End `worker` (after `grace_s` to end by itself), give its slot a new one unless the pool is stopping;
        what happened, for the client."""
        code = _end(worker, grace_s)
        with self._lock:
            if slot.worker is worker:
                slot.worker = None
                if self._running:
                    # The spare has had a head start (unless it died meanwhile); a new spare starts in its place.
                    spare, self._spare = self._spare, None
                    if spare is not None and spare.process.poll() is not None:
                        _end(spare)
                        spare = None
                    slot.worker = spare or self._spawn()
                    self._spare = self._spawn() if self.keeps_spare else None
                    self.replaced += 1
        return f"SQL worker {what} ({_describe(code)}); a new one was started"


def _prefer_ready(idle: asyncio.Queue[_Slot], slot: _Slot) -> _Slot:
    """`slot`, or an idle slot whose worker is ready if `slot`'s is still starting (after a kill, a query
    need not wait for the new worker while another is free)."""
    if _ready(slot):
        return slot
    others = []
    while not idle.empty():
        others.append(idle.get_nowait())
    chosen = next((s for s in others if _ready(s)), slot)
    for s in [*others, slot]:
        if s is not chosen:
            idle.put_nowait(s)
    return chosen


def _ready(slot: _Slot) -> bool:
    worker = slot.worker
    if worker is None or worker.ready:
        return worker is not None
    # Its "ready" may be waiting in the pipe: poll(0) does not block. A pipe at its end (True) or closed by
    # stop() counts as ready: the exchange reports it.
    try:
        return worker.conn.poll(0)
    except OSError:
        return True


def _end(worker: _Worker, grace_s: float = 0) -> int | None:
    """Kill the worker unless it ends within `grace_s`, and reap it; its exit code (negative: the signal)."""
    try:
        return worker.process.wait(grace_s) if grace_s > 0 else _kill(worker)
    except subprocess.TimeoutExpired:
        return _kill(worker)
    finally:
        worker.conn.close()


def _kill(worker: _Worker) -> int | None:
    if worker.process.poll() is None:
        worker.process.kill()
    try:
        return worker.process.wait(_JOIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None


def _describe(code: int | None) -> str:
    if code is None:
        return "still running"
    if code >= 0:
        return f"exit code {code}"
    sig = signal.Signals(-code)
    hint = _CRASH_HINTS.get(sig)
    return f"{sig.name}, {hint}" if hint else sig.name
