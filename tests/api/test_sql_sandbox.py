"""Untrusted SQL runs where it cannot hurt the server: `isrwatch serve` in a subprocess, over a real socket, with
short time limits. A query that would crash or outrun DataFusion ends or loses only its worker process, which is
replaced; the limits answer before any worker is involved; one client cannot hold every worker.

The lakehouse is the dashboards' small hand-written one (tests/dashboards/lake.py, no Spark): gold.alerts holds 5
alerts. Clients are told apart by their address: 127.0.0.2 and 127.0.0.3 reach the server on 127.0.0.1 too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from api.app import TOKEN_ENV, create_app
from foundation.settings import load_settings
from tests.dashboards.lake import build_lake

TOKEN = "sandbox-token-0123456789"
RUNAWAY = "SELECT count(*) FROM generate_series(1, 10000000000) a"
DEEP = "SELECT " + " + ".join(["1"] * 20_000)          # 80 kB; overflowed the server's stack before workers
START_S = 60.0           # bound on the server's start-up (imports, dashboards warm-up) on a busy machine


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def client(self, source: str = "127.0.0.1", token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30,
                            transport=httpx.HTTPTransport(local_address=source))

    def worker_pids(self) -> set[int]:
        """The server's SQL worker processes (its children running api.sql_worker)."""
        pids = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == self.process.pid and b"api.sql_worker" in cmdline and _state(int(entry.name)) != "Z":
                pids.add(int(entry.name))
        return pids


def _state(pid: int) -> str | None:
    """The process's state letter (Z: its main thread ended, not reaped yet), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _ended(pid: int) -> bool:
    """Whether every thread of the process has ended (a zombie's other threads may still be exiting)."""
    try:
        return _state(pid) in (None, "Z") and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(attempt: Callable[[], Any], done: Callable[[Any], bool], deadline_s: float, what: str) -> Any:
    """`attempt()` again until `done(result)`, at most `deadline_s`; the last result."""
    deadline = time.monotonic() + deadline_s
    while True:
        result = attempt()
        if done(result):
            return result
        assert time.monotonic() < deadline, f"{what}: not within {deadline_s} s, last {result!r}"
        time.sleep(0.02)


@contextmanager
def serving(lake: Path, work: Path, **api: Any) -> Iterator[Server]:
    """`isrwatch serve` on a free port with these `api.*` settings and the token in its environment; stopped
    (and its workers with it) even when the test fails."""
    config = work / "pipeline.yaml"
    config.write_text(json.dumps({"api": {"dashboard_prebuild": "0 seconds", **api}}))   # JSON is YAML
    port = _free_port()
    log = work / "serve.log"
    isrwatch = Path(sys.executable).with_name("isrwatch")
    with log.open("wb") as out:
        process = subprocess.Popen([str(isrwatch), "serve", "--config", str(config), "--lakehouse", str(lake),
                                    "--port", str(port)], stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, TOKEN_ENV: TOKEN})
    server = Server(f"http://127.0.0.1:{port}", process, log)
    workers: set[int] = set()
    try:
        def healthz() -> int | None:
            assert process.poll() is None, f"isrwatch serve exited {process.returncode}: {log.read_text()}"
            try:
                return httpx.get(f"{server.url}/healthz", timeout=1).status_code
            except httpx.TransportError:
                return None

        _until(healthz, lambda status: status == 200, START_S, "isrwatch serve answering /healthz")
        yield server
    finally:
        workers = server.worker_pids()
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        left = {pid for pid in workers if _state(pid) not in (None, "Z")}
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    assert not left, f"SQL workers {left} outlived the server"


@pytest.fixture(scope="module")
def small_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_lake(tmp_path_factory.mktemp("sandbox") / "lakehouse")


@pytest.fixture(scope="module")
def sandbox(small_lake: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Default limits, a 3 s time limit, one query per client, 1 s for a free worker (short, with room for a
    busy machine)."""
    with serving(small_lake, tmp_path_factory.mktemp("sandbox-serve"), query_timeout="3 seconds",
                 query_max_per_client=1, query_wait="1 seconds", query_workers=2) as server:
        yield server


@pytest.fixture(scope="module")
def guarded(small_lake: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The token required for queries (api.query_auth), and limits raised so that a deep query reaches a worker."""
    lake = Path(shutil.copytree(small_lake, tmp_path_factory.mktemp("guarded") / "lakehouse"))  # silences written
    with serving(lake, tmp_path_factory.mktemp("guarded-serve"), query_auth=True, query_max_bytes=100_000,
                 query_max_operators=100_000, query_timeout="30 seconds", query_workers=2) as server:
        yield server


def query(client: httpx.Client, sql: str) -> httpx.Response:
    return client.post("/api/v1/query", json={"sql": sql})


def answered_at(client: httpx.Client, sql: str, sent: threading.Event) -> tuple[httpx.Response, float]:
    """The answer and when it came; `sent` is set once the request's body is on the wire."""
    def trace(event: str, info: dict[str, Any]) -> None:
        if event == "http11.send_request_body.complete":
            sent.set()

    response = client.post("/api/v1/query", json={"sql": sql}, extensions={"trace": trace})
    return response, time.monotonic()


def test_a_20000_term_query_is_refused_and_the_server_lives(sandbox: Server) -> None:
    with sandbox.client() as c:
        r = query(c, DEEP)
        assert r.status_code == 413, r.text
        assert r.json() == {"detail": "rejected: query is 80004 bytes, more than api.query_max_bytes (65536)"}
        assert c.get("/healthz").json() == {"status": "ok"}
        after = query(c, "SELECT 1 + 1 AS two")
    assert after.status_code == 200, after.text
    assert (after.json()["columns"], after.json()["rows"]) == (["two"], [[2]])
    assert sandbox.process.poll() is None


def test_nesting_and_operator_limits_name_the_limit(sandbox: Server) -> None:
    with sandbox.client() as c:
        operators = query(c, "SELECT " + " + ".join(["1"] * 2_000))
        nested = query(c, "SELECT " + "(" * 40 + "1" + ")" * 40)
    assert (operators.status_code, operators.json()) == (
        400, {"detail": "rejected: query has more than 500 operators (api.query_max_operators)"})
    assert (nested.status_code, nested.json()) == (
        400, {"detail": "rejected: query nests brackets more than 32 deep (api.query_max_nesting)"})


def test_runaway_queries_are_killed_and_their_workers_replaced(sandbox: Server) -> None:
    before = sandbox.worker_pids()
    assert len(before) == 3      # two workers and a spare
    with (sandbox.client("127.0.0.1") as a, sandbox.client("127.0.0.2") as b, sandbox.client("127.0.0.3") as c,
          ThreadPoolExecutor(2) as pool):
        sent = [threading.Event(), threading.Event()]
        runaways = [pool.submit(answered_at, client, RUNAWAY, event)
                    for client, event in zip((a, b), sent, strict=True)]
        assert all(event.wait(10) for event in sent), "the runaway queries were not sent"
        # While both workers run away, a third client waits api.query_wait and hears why...
        busy = _until(lambda: c.post("/api/v1/query", json={"sql": "SELECT 1"}), lambda r: r.status_code != 200,
                      5, "a query refused while both workers are busy")
        assert (busy.status_code, busy.json()) == (
            503, {"detail": "all SQL workers busy (2, api.query_workers); none was free within 1 s"})
        # ... and a query over a limit is answered at once: the limits involve no worker.
        too_big = query(c, DEEP)   # (a query needing a worker would get the 503 above)
        assert too_big.status_code == 413 and "api.query_max_bytes" in too_big.json()["detail"]
        answers = [f.result() for f in runaways]
        # Right after: answered in a query's normal time (a new worker at most), not after the runaways' end.
        after = query(c, "SELECT 40 + 2 AS n")
    for r, _ in answers:
        assert (r.status_code, r.json()) == (408, {"detail": "query ran longer than 3 s"})
    assert after.status_code == 200, after.text
    assert after.json()["rows"] == [[42]]
    after_pids = sandbox.worker_pids()
    assert len(after_pids) == 3 and len(before - after_pids) == 2, (before, after_pids)   # the spare stepped in


def test_one_client_runs_one_query_at_a_time(sandbox: Server) -> None:
    with (sandbox.client("127.0.0.1") as a, sandbox.client("127.0.0.1") as a_again,
          sandbox.client("127.0.0.2") as b, ThreadPoolExecutor(1) as pool):
        for _ in range(3):
            sent = threading.Event()
            runaway = pool.submit(answered_at, a, RUNAWAY, sent)
            assert sent.wait(10), "the runaway query was not sent"
            refused = a_again.post("/api/v1/query", json={"sql": "SELECT 1"})
            if refused.status_code != 200:
                break
            # Rarely, the second request is read before the first: then the first one is refused. Again.
            assert runaway.result()[0].status_code == 429
        assert (refused.status_code, refused.json()) == (
            429, {"detail": "this client already runs 1 query (api.query_max_per_client); wait for it to end"})
        assert refused.headers["retry-after"] == "1"
        other = query(b, "SELECT 1 AS one")
        other_answered = time.monotonic()
        assert (other.status_code, other.json()["rows"]) == (200, [[1]])
        first, first_answered = runaway.result()
        assert first.status_code == 408
        # The other client was answered while the first query still ran.
        assert other_answered < first_answered
        again = query(a, "SELECT 1 AS one")
    assert (again.status_code, again.json()["rows"]) == (200, [[1]])


def test_a_worker_that_crashes_or_is_killed_is_replaced(guarded: Server) -> None:
    with guarded.client(token=TOKEN) as c:
        crashed = query(c, DEEP)
        assert crashed.status_code == 503, crashed.text
        assert crashed.json()["detail"].startswith("SQL worker died running the query (SIGSEGV")
        assert crashed.json()["detail"].endswith("; a new one was started")
        assert c.get("/healthz").json() == {"status": "ok"}
        after = query(c, "SELECT 1 + 1 AS two")
        assert (after.status_code, after.json()["rows"]) == (200, [[2]])
        # Killed from outside while idle: the next query waits for a new worker instead of failing.
        killed = guarded.worker_pids()
        assert len(killed) == 3      # the spare too
        for pid in killed:
            os.kill(pid, signal.SIGKILL)
        for pid in killed:
            _until(lambda pid=pid: _ended(pid), bool, 10, f"worker {pid} ended")
        answers = [query(c, "SELECT count(*) AS n FROM gold.alerts") for _ in range(3)]
    assert [r.status_code for r in answers] == [200] * 3, [r.text for r in answers]
    assert [r.json()["rows"] for r in answers] == [[[5]]] * 3
    replaced = guarded.worker_pids()
    assert len(replaced) == 3 and not replaced & killed
    assert guarded.process.poll() is None


def test_query_and_silences_need_the_token_over_the_socket(guarded: Server) -> None:
    sql = {"sql": "SELECT status, count(*) AS n FROM gold.alerts GROUP BY status ORDER BY status"}
    with guarded.client() as anonymous, guarded.client(token="wrong-token-0123") as wrong, \
            guarded.client(token=TOKEN) as holder:
        assert (anonymous.post("/api/v1/query", json=sql).json()) == {"detail": "missing or wrong bearer token"}
        assert anonymous.post("/api/v1/query", json=sql).status_code == 401
        assert wrong.post("/api/v1/query", json=sql).status_code == 401
        answered = holder.post("/api/v1/query", json=sql)
        assert answered.status_code == 200, answered.text
        assert answered.json()["rows"] == [["firing", 3], ["pending", 1], ["resolved", 1]]
        # Reads stay open (api.read_auth is off): the alerts list needs no token.
        assert anonymous.get("/api/v1/alerts").status_code == 200
        ends = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        silence = {"matchers": [{"name": "topic", "value": "orders"}], "endsAt": ends, "createdBy": "ops",
                   "comment": "over the socket"}
        assert anonymous.post("/api/v1/silences", json=silence).status_code == 401
        assert wrong.post("/api/v1/silences", json=silence).status_code == 401
        created = holder.post("/api/v1/silences", json=silence)
        assert created.status_code == 201, created.text
        listed = anonymous.get("/api/v1/silences").json()["items"]
    assert [(s["id"], s["comment"], s["status"]) for s in listed] == [
        (created.json()["silenceID"], "over the socket", {"state": "active"})]


def test_workers_start_and_stop_with_the_app(small_lake: Path) -> None:
    settings = load_settings(overrides={"lakehouse": str(small_lake), "api.dashboard_prebuild": "0 seconds",
                                        "api.query_spare_worker": False})
    app = create_app(settings)
    assert app.state.sql_pool.pids() == []
    with TestClient(app) as c:
        pids = app.state.sql_pool.pids()
        assert len(pids) == 2 and all(_state(pid) not in (None, "Z") for pid in pids)
        r = c.post("/api/v1/query", json={"sql": "SELECT count(*) AS n FROM gold.alerts"})
        assert (r.status_code, r.json()["rows"]) == (200, [[5]])
    assert app.state.sql_pool.pids() == []
    assert [_state(pid) for pid in pids] == [None, None]    # ended and reaped
