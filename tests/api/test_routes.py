"""Every API route on a lakehouse built by a real emulator + pipeline run (tests/api/conftest.py): the
answers are checked against the Delta tables read directly with delta-rs."""

from __future__ import annotations

import gc
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from fastapi.testclient import TestClient

from api.app import create_app
from pipelines.slo_config import load_slos
from tests.api.conftest import TOKEN, api_settings

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def table(lake: str, name: str) -> list[dict[str, Any]]:
    layer, t = name.split(".")
    return DeltaTable(f"{lake}/{layer}/{t}").to_pyarrow_table().to_pylist()


def latest_snapshot(lake: str, cluster: str) -> list[dict[str, Any]]:
    rows = [r for r in table(lake, "silver.partition_state") if r["run_id"] == cluster]
    newest = max(r["ts"] for r in rows)
    return [r for r in rows if r["ts"] == newest]


def test_start_up_freezes_what_it_built_out_of_the_collectors_reach(tmp_path: Any) -> None:
    # Left to the cyclic collector, the warm-up's plotly.py objects made full collections stall requests
    # (bench/api.py: /topics p99 80-105 ms at 50 clients instead of 10-14 ms).
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with TestClient(create_app(api_settings(str(tmp_path / "lake")))) as c:
        assert gc.get_freeze_count() > 0
        assert c.get("/healthz").status_code == 200
    assert gc.get_freeze_count() == 0  # for the app's lifetime only: a later app's garbage stays collectable


def test_health_and_readiness(client: TestClient, tmp_path: Any) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and "gold.alerts" in ready.json()["tables"]
    # Sorted by name, as on an object store (where the reader probes each table isrwatch defines).
    assert ready.json()["tables"] == sorted(ready.json()["tables"]) and "bronze.runs" in ready.json()["tables"]
    assert ready.json()["dashboards"]["prebuild"] == "on"
    # The pipeline ran to the end of bronze: validate's and the lane's checkpoints say so (lakehouse_read/freshness.py).
    assert ready.json()["behind"] == []
    queries = client.get("/api/v1/freshness").json()["queries"]
    assert [(q["query"], q["status"], q["tables"]) for q in queries] == [("validate", "current", []),
                                                                        ("alert lane", "current", [])]
    with TestClient(create_app(api_settings(str(tmp_path)))) as empty:
        r = empty.get("/readyz")
    assert r.status_code == 503
    assert "gold.alerts" in r.json()["missing"] and r.json()["detail"].startswith("missing tables: ")


def test_alerts_list_equals_gold_alerts_and_filters_agree(client: TestClient, api_lake: str) -> None:
    gold = table(api_lake, "gold.alerts")
    assert gold, "the pipeline run must have raised alerts"
    everything = client.get("/api/v1/alerts", params={"limit": 1000}).json()
    assert everything["total"] == len(gold) and everything["next_offset"] is None
    assert {a["fingerprint"] for a in everything["items"]} == {a["fingerprint"] for a in gold}
    by_status = Counter(a["status"] for a in gold)
    for status, n in by_status.items():
        assert client.get("/api/v1/alerts", params={"state": status, "limit": 1000}).json()["total"] == n
    critical = client.get("/api/v1/alerts", params={"severity": "critical", "limit": 1000}).json()
    assert critical["total"] == sum(a["severity"] == "critical" for a in gold)
    topic_alerts = client.get("/api/v1/alerts", params={"topic": "orders", "limit": 1000}).json()["items"]
    assert topic_alerts and all(a["labels"]["topic"] == "orders" for a in topic_alerts)
    assert len(topic_alerts) == sum(dict(a["labels"]).get("topic") == "orders" for a in gold)
    # lose-two's broker 2 stops reporting for 30 s: BrokerNotReporting, labelled with its broker_id.
    brokers = [a for a in gold if "broker_id" in dict(a["labels"])]
    assert brokers, "the fixture's lakehouse must hold a broker-labelled alert"
    assert ("lose-two-s3", "BrokerNotReporting", "2") in {
        (a["cluster"], a["rule"], dict(a["labels"])["broker_id"]) for a in brokers}
    got = client.get("/api/v1/alerts", params={"broker": 2, "limit": 1000}).json()["items"]
    assert got
    assert {a["fingerprint"] for a in got} == {a["fingerprint"] for a in brokers
                                               if dict(a["labels"])["broker_id"] == "2"}
    assert client.get("/api/v1/alerts", params={"broker": 9, "limit": 1000}).json()["items"] == []
    # Most urgent first: critical before warning before info.
    ranks = [{"critical": 0, "warning": 1, "info": 2}[a["severity"]] for a in everything["items"]]
    assert ranks == sorted(ranks)


def test_alerts_pagination_and_time_filter(client: TestClient) -> None:
    whole = client.get("/api/v1/alerts", params={"limit": 1000}).json()["items"]
    pages, offset = [], 0
    while offset is not None:
        page = client.get("/api/v1/alerts", params={"limit": 3, "offset": offset}).json()
        pages += page["items"]
        offset = page["next_offset"]
    assert [a["fingerprint"] for a in pages] == [a["fingerprint"] for a in whole]
    cut = sorted(a["last_evaluated"] for a in whole)[len(whole) // 2]
    since = client.get("/api/v1/alerts", params={"since": cut, "limit": 1000}).json()
    assert since["total"] == sum(a["last_evaluated"] >= cut for a in whole) < len(whole) + 1


@pytest.mark.parametrize(("params", "field"), [
    ({"state": "burning"}, "state"), ({"severity": "fatal"}, "severity"), ({"limit": 0}, "limit"),
    ({"limit": 5000}, None), ({"offset": -1}, "offset"), ({"broker": "x"}, "broker"), ({"since": "yesterday"}, "since"),
    ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, None),
])
def test_alerts_bad_filters_are_422(client: TestClient, params: dict[str, Any], field: str | None) -> None:
    r = client.get("/api/v1/alerts", params=params)
    assert r.status_code == 422
    detail = r.json()["detail"]
    if field is None:
        assert isinstance(detail, str) and detail
    else:
        assert detail[0]["loc"][-1] == field


def test_alert_detail_has_transitions_and_deliveries(client: TestClient, api_lake: str) -> None:
    events = table(api_lake, "gold.alert_events")
    fp = Counter(e["fingerprint"] for e in events).most_common(1)[0][0]
    got = client.get(f"/api/v1/alerts/{fp}").json()
    expected = sorted((e for e in events if e["fingerprint"] == fp), key=lambda e: (e["eval_batch_id"], e["seq"]))
    assert [t["event_id"] for t in got["transitions"]] == [e["event_id"] for e in expected]
    assert [t["status"] for t in got["transitions"]] == [e["status"] for e in expected]
    assert got["fingerprint"] == fp and got["deliveries"] == []     # webhooks were off
    assert client.get("/api/v1/alerts/0123456789abcdef").status_code == 404
    assert client.get("/api/v1/alerts/0123456789abcdef").json() == {
        "detail": "unknown alert fingerprint '0123456789abcdef'"}
    assert client.get("/api/v1/alerts/not-a-fingerprint").status_code == 422


def test_slos_report_the_newest_status_per_cluster(client: TestClient, api_lake: str) -> None:
    status = table(api_lake, "gold.slo_status")
    got = client.get("/api/v1/slos").json()
    assert [s["name"] for s in got["items"]] == [s.name for s in load_slos()]
    for slo in got["items"]:
        for st in slo["status"]:
            mine = [r for r in status if r["slo"] == slo["name"] and r["cluster"] == st["cluster"]]
            newest = max(mine, key=lambda r: (r["ts"], r["slo_batch_id"]))
            assert st["sli_value"] == pytest.approx(newest["sli_value"])
            assert st["error_budget_remaining"] == pytest.approx(newest["error_budget_remaining"])
    one = client.get("/api/v1/slos/acked-durability", params={"cluster": "lose-two-s3", "limit": 5}).json()
    assert one["objective"] == pytest.approx(0.9999) or 0 < one["objective"] < 1
    assert len(one["history"]) == 5 and len(one["timeslices"]) == 5
    ts = [h["ts"] for h in one["history"]]
    assert ts == sorted(ts)
    newest_ts = max(r["ts"] for r in status if r["slo"] == "acked-durability" and r["cluster"] == "lose-two-s3")
    assert ts[-1] == newest_ts.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    assert client.get("/api/v1/slos/no-such-slo").status_code == 404


def test_topics_health_matches_the_newest_partition_state(client: TestClient, api_lake: str) -> None:
    got = client.get("/api/v1/topics").json()["items"]
    configs = {(r["run_id"], r["topic"]) for r in table(api_lake, "silver.topic_configs")}
    assert {(t["cluster"], t["topic"]) for t in got} == configs
    for t in got:
        snap = [p for p in latest_snapshot(api_lake, t["cluster"]) if p["topic"] == t["topic"]]
        assert t["health"]["under_min_isr"] == sum(p["leader"] != -1 and len(p["isr"]) < p["effective_min_isr"]
                                                   for p in snap)
        assert t["health"]["offline"] == sum(p["leader"] == -1 for p in snap)
        assert t["health"]["under_replicated"] == sum(p["leader"] != -1 and len(p["isr"]) < len(p["replicas"])
                                                      for p in snap)


def test_topic_detail_lists_every_partition(client: TestClient, api_lake: str) -> None:
    got = client.get("/api/v1/topics/orders", params={"cluster": "lose-two-s3"}).json()
    snap = {p["partition"]: p for p in latest_snapshot(api_lake, "lose-two-s3") if p["topic"] == "orders"}
    assert got["config"]["replication_factor"] == 3 and got["config"]["min_insync_replicas"] == 2
    assert [p["partition"] for p in got["partitions"]] == sorted(snap) == [0, 1, 2, 3]
    for p in got["partitions"]:
        s = snap[p["partition"]]
        assert (p["leader"], p["isr"], p["elr"], p["high_watermark"]) == (s["leader"], s["isr"], s["elr"],
                                                                          s["high_watermark"])
        assert [r["leo"] for r in p["replica_states"]] == s["replica_leos"]
        assert [r["rack"] for r in p["replica_states"]] and all(r["rack"] in "abc" for r in p["replica_states"])
    assert got["posture"]["topic"] == "orders" and got["posture"]["replication_factor"] == 3
    missing = client.get("/api/v1/topics/nope")
    assert missing.status_code == 404 and missing.json() == {"detail": "unknown topic 'nope'"}
    assert client.get("/api/v1/topics/orders", params={"cluster": "elsewhere"}).status_code == 404


def test_brokers_and_posture(client: TestClient, api_lake: str) -> None:
    brokers = client.get("/api/v1/brokers", params={"cluster": "lose-two-s3"}).json()["items"]
    assert [(b["broker_id"], b["role"]) for b in brokers] == [(1, "broker"), (2, "broker"), (3, "broker"),
                                                              (3000, "controller")]
    assert [b["rack"] for b in brokers] == ["a", "b", "c", None]
    assert brokers[3]["gauges"]["ActiveControllerCount"] == 1
    assert all(b["reporting"] for b in brokers)   # all three are back at the end of the run
    metrics = [r for r in table(api_lake, "silver.broker_metrics")
               if r["run_id"] == "lose-two-s3" and r["name"] == "UnderReplicatedPartitions" and r["broker_id"] == 1]
    newest = max(metrics, key=lambda r: r["ts"])
    assert brokers[0]["gauges"]["UnderReplicatedPartitions"] == newest["value"]
    assert client.get("/api/v1/brokers", params={"cluster": "elsewhere"}).status_code == 404
    posture = table(api_lake, "gold.posture")
    got = client.get("/api/v1/posture").json()
    assert got["total"] == len(posture)
    unclean = client.get("/api/v1/posture", params={"finding": "unclean_enabled"}).json()["items"]
    assert {(p["cluster"], p["topic"]) for p in unclean} == {
        (p["cluster"], p["topic"]) for p in posture if p["finding_unclean_enabled"]}
    assert unclean, "the unclean-election scenario enables unclean election"


def test_query_runs_one_select_with_a_row_cap(client: TestClient, api_lake: str) -> None:
    r = client.post("/api/v1/query", json={"sql": "SELECT status, count(*) AS n FROM gold.alerts "
                                                  "GROUP BY status ORDER BY n DESC, status"})
    assert r.status_code == 200
    body = r.json()
    counts = Counter(a["status"] for a in table(api_lake, "gold.alerts"))
    assert body["columns"] == ["status", "n"]
    assert body["rows"] == sorted(([s, n] for s, n in counts.items()), key=lambda x: (-x[1], x[0]))
    capped = client.post("/api/v1/query", json={"sql": "SELECT * FROM silver.partition_state ORDER BY ts DESC",
                                                "max_rows": 7}).json()
    assert capped["row_count"] == 7 and capped["truncated"] is True
    newest = max(r["ts"] for r in table(api_lake, "silver.partition_state"))
    assert capped["rows"][0][capped["columns"].index("ts")] == newest.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    with_cte = client.post("/api/v1/query", json={"sql": "-- comment\nWITH t AS (SELECT 2 AS x) SELECT x FROM t;"})
    assert with_cte.json()["rows"] == [[2]]


ONLY_SELECT = "rejected: only SELECT queries are allowed, got '{}'"
ONE_STATEMENT = ("rejected: This feature is not implemented: The context currently only supports a single SQL "
                 "statement")
NO_TABLE = "query failed: Error during planning: table '{}' not found"


@pytest.mark.parametrize(("sql", "detail"), [
    ("DROP TABLE gold.alerts", ONLY_SELECT.format("DROP")),
    ("DELETE FROM gold.alerts", ONLY_SELECT.format("DELETE")),
    ("INSERT INTO gold.alerts SELECT * FROM gold.alerts", ONLY_SELECT.format("INSERT")),
    ("CREATE EXTERNAL TABLE x STORED AS CSV LOCATION '/etc/passwd'", ONLY_SELECT.format("CREATE")),
    ("COPY (SELECT 1) TO '/tmp/isrwatch-x.csv'", ONLY_SELECT.format("COPY")),
    ("SELECT 1; SELECT 2", ONE_STATEMENT),
    ("SELECT 1; DROP TABLE gold.alerts", ONE_STATEMENT),
    ("SET datafusion.execution.batch_size = 1", ONLY_SELECT.format("SET")),
    # File paths are not tables: planning finds no such table.
    ("SELECT * FROM '/etc/passwd'", NO_TABLE.format("datafusion.public./etc/passwd")),
    ("SELECT * FROM \"../../../etc/passwd\"", NO_TABLE.format("datafusion.public.../../../etc/passwd")),
    ("SELECT * FROM bronze.\"../gold\"", NO_TABLE.format("datafusion.bronze.../gold")),
    ("EXPLAIN SELECT 1", ONLY_SELECT.format("EXPLAIN")),
    ("   ;  ", "rejected: empty query"),
])
def test_query_rejects_everything_but_one_select(client: TestClient, sql: str, detail: str) -> None:
    r = client.post("/api/v1/query", json={"sql": sql})
    assert r.status_code == 400, r.text
    assert r.json() == {"detail": detail}


def test_an_empty_query_is_422(client: TestClient) -> None:
    r = client.post("/api/v1/query", json={"sql": ""})
    assert r.status_code == 422, r.text
    assert r.json() == {"detail": [{"type": "string_too_short", "loc": ["body", "sql"],
                                    "msg": "String should have at least 1 character", "input": "",
                                    "ctx": {"min_length": 1}}]}


def test_a_query_past_the_time_limit_is_408(api_lake: str) -> None:
    slow = ("SELECT sum(a.x * b.y) AS s FROM (SELECT unnest(range(200000)) AS x) a "
            "CROSS JOIN (SELECT unnest(range(1000)) AS y) b")      # ~0.7 s here
    with TestClient(create_app(api_settings(api_lake, query_timeout="0.05 seconds"))) as c:
        r = c.post("/api/v1/query", json={"sql": slow})
    assert r.status_code == 408 and r.json() == {"detail": "query ran longer than 0.05 s"}


def test_query_errors_are_one_line(client: TestClient) -> None:
    r = client.post("/api/v1/query", json={"sql": "SELECT no_such_column FROM gold.alerts"})
    assert r.status_code == 400
    assert r.json()["detail"].startswith("query failed: ") and "\n" not in r.json()["detail"]


def test_silences_need_the_token_and_follow_their_lifecycle(lake_copy: str) -> None:
    ends = (datetime.now(UTC) + timedelta(hours=2)).isoformat()
    body = {"matchers": [{"name": "topic", "value": "orders"}], "endsAt": ends, "createdBy": "ops",
            "comment": "broker maintenance"}
    with TestClient(create_app(api_settings(lake_copy))) as c:
        assert c.post("/api/v1/silences", json=body).status_code == 401
        assert c.post("/api/v1/silences", json=body, headers={"Authorization": "Bearer wrong"}).status_code == 401
        created = c.post("/api/v1/silences", json=body, headers=AUTH)
        assert created.status_code == 201
        sid = created.json()["silenceID"]
        assert created.json()["status"] == {"state": "active"}
        assert [s["id"] for s in c.get("/api/v1/silences", params={"state": "active"}).json()["items"]] == [sid]
        # The alerts it matches say so; the others do not.
        alerts = c.get("/api/v1/alerts", params={"limit": 1000}).json()["items"]
        assert alerts
        assert all((a["silenced_by"] == [sid]) == (a["labels"].get("topic") == "orders") for a in alerts)
        assert c.delete(f"/api/v1/silences/{sid}").status_code == 401
        expired = c.delete(f"/api/v1/silences/{sid}", headers=AUTH)
        assert expired.status_code == 200 and expired.json()["status"] == {"state": "expired"}
        assert c.get(f"/api/v1/silences/{sid}").json()["version"] == 2
        assert c.get("/api/v1/silences", params={"state": "active"}).json()["items"] == []
        assert all(a["silenced_by"] == [] for a in c.get("/api/v1/alerts", params={"limit": 1000}).json()["items"])
        unknown = "00000000-0000-0000-0000-000000000000"
        assert c.delete(f"/api/v1/silences/{unknown}", headers=AUTH).status_code == 404
        assert c.get("/api/v1/silences/not-an-id").status_code == 422
    # Stored in the lakehouse: two versions of one silence.
    rows = DeltaTable(f"{lake_copy}/api/silences").to_pyarrow_table()
    assert sorted(rows["version"].to_pylist()) == [1, 2] and pc.unique(rows["silence_id"]).to_pylist() == [sid]


@pytest.mark.parametrize(("change", "message"), [
    ({"matchers": []}, None),
    ({"matchers": [{"name": "alertname", "value": "(", "isRegex": True}]}, "is not a valid regex"),
    ({"matchers": [{"name": "topic", "value": ".*", "isRegex": True}]}, "must not match the empty string"),
    ({"matchers": [{"name": "bad-name", "value": "x"}]}, "is not a label name"),
    ({"endsAt": "2020-01-01T00:00:00Z"}, "must be in the future"),
    ({"endsAt": "2030-01-01T00:00:00"}, None),                        # no time zone
    ({"startsAt": "2031-01-01T00:00:00Z", "endsAt": "2030-01-01T00:00:00Z"}, "must be after startsAt"),
    ({"comment": ""}, None),
])
def test_bad_silences_are_422_and_store_nothing(lake_copy: str, change: dict[str, Any], message: str | None) -> None:
    body = {"matchers": [{"name": "topic", "value": "orders"}],
            "endsAt": (datetime.now(UTC) + timedelta(hours=1)).isoformat(), "createdBy": "ops", "comment": "c"}
    with TestClient(create_app(api_settings(lake_copy))) as c:
        r = c.post("/api/v1/silences", json={**body, **change}, headers=AUTH)
        assert r.status_code == 422, r.text
        if message:
            assert message in r.json()["detail"]
        assert c.get("/api/v1/silences").json()["items"] == []


def test_read_auth_and_disabled_mutations(api_lake: str, lake_copy: str) -> None:
    with TestClient(create_app(api_settings(api_lake, read_auth=True))) as c:
        assert c.get("/api/v1/alerts").status_code == 401
        assert c.get("/api/v1/alerts", headers=AUTH).status_code == 200
        assert c.get("/healthz").status_code == 200      # probes stay open
    with TestClient(create_app(api_settings(lake_copy, token=None))) as c:
        r = c.post("/api/v1/silences", json={"matchers": [{"name": "topic", "value": "x"}],
                                             "endsAt": "2099-01-01T00:00:00Z", "createdBy": "a", "comment": "b"},
                   headers=AUTH)
        assert r.status_code == 503 and "ISRWATCH_API_TOKEN" in r.json()["detail"]


def test_no_request_reaches_outside_the_lakehouse(client: TestClient) -> None:
    for path in ("/api/v1/topics/..%2F..%2Fetc%2Fpasswd", "/api/v1/slos/..%2F..%2Fetc",
                 "/dashboards/..%2F..%2Fetc%2Fpasswd", "/static/..%2F..%2F..%2Fetc%2Fpasswd"):
        r = client.get(path)
        assert r.status_code in (404, 422), (path, r.status_code)
        assert "root:" not in r.text


def test_answers_follow_a_new_table_version(lake_copy: str) -> None:
    """Responses are cached per table version: a new commit is seen at the next request."""
    with TestClient(create_app(api_settings(lake_copy, refresh="0 seconds"))) as c:
        before = c.get("/api/v1/alerts", params={"limit": 1000}).json()
        assert c.get("/api/v1/alerts", params={"limit": 1000}).json() == before      # served again, unchanged
        rows = DeltaTable(f"{lake_copy}/gold/alerts").to_pyarrow_table()
        extra = rows.slice(0, 1).to_pylist()[0] | {"fingerprint": "ffffffffffffffff", "status": "firing"}
        write_deltalake(f"{lake_copy}/gold/alerts", pa.Table.from_pylist([extra], schema=rows.schema), mode="append")
        after = c.get("/api/v1/alerts", params={"limit": 1000}).json()
        assert after["total"] == before["total"] + 1
        assert "ffffffffffffffff" in {a["fingerprint"] for a in after["items"]}
        assert c.get("/api/v1/alerts/ffffffffffffffff").json()["status"] == "firing"


def test_a_repeated_request_is_answered_before_fastapi_until_its_basis_changes(lake_copy: str) -> None:
    """The response-cache middleware answers a URL it has seen with the same bytes, and stops the moment a
    silence or a table version changes what the answer was computed from."""
    with TestClient(create_app(api_settings(lake_copy, refresh="0 seconds"))) as c:
        cache = c.app.state.responses   # type: ignore[attr-defined]
        url = "/api/v1/alerts?limit=1000"
        first = c.get(url)
        assert first.status_code == 200 and cache.url_hits == 0
        again = c.get(url)
        assert again.content == first.content and again.headers["content-type"] == "application/json"
        assert int(again.headers["content-length"]) == len(first.content) and cache.url_hits == 1
        assert c.get("/api/v1/alerts?limit=999").status_code == 200 and cache.url_hits == 1   # another URL
        # A silence changes the answer at once.
        body = {"matchers": [{"name": "topic", "value": "orders"}], "createdBy": "ops", "comment": "maintenance",
                "endsAt": (datetime.now(UTC) + timedelta(hours=1)).isoformat()}
        sid = c.post("/api/v1/silences", json=body, headers=AUTH).json()["silenceID"]
        silenced = c.get(url).json()["items"]
        assert cache.url_hits == 1
        assert any(a["silenced_by"] == [sid] for a in silenced)
        assert c.get(url).json()["items"] == silenced and cache.url_hits == 2
        # So does a new version of gold.alerts.
        rows = DeltaTable(f"{lake_copy}/gold/alerts").to_pyarrow_table()
        extra = rows.slice(0, 1).to_pylist()[0] | {"fingerprint": "eeeeeeeeeeeeeeee", "status": "firing"}
        write_deltalake(f"{lake_copy}/gold/alerts", pa.Table.from_pylist([extra], schema=rows.schema), mode="append")
        after = c.get(url).json()
        assert cache.url_hits == 2 and "eeeeeeeeeeeeeeee" in {a["fingerprint"] for a in after["items"]}


def test_a_cached_answer_still_needs_the_read_token(api_lake: str) -> None:
    with TestClient(create_app(api_settings(api_lake, read_auth=True))) as c:
        cache = c.app.state.responses   # type: ignore[attr-defined]
        topic = c.get("/api/v1/topics", headers=AUTH).json()["items"][0]["topic"]
        for url in ("/api/v1/alerts?state=firing", f"/api/v1/topics/{topic}"):
            assert c.get(url, headers=AUTH).status_code == 200
            assert c.get(url, headers=AUTH).status_code == 200
            assert c.get(url).status_code == 401
            assert c.get(url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert cache.url_hits == 2


# POSTs that only read (the SQL in the body): open as the GETs are, unless `api.read_auth` is on.
READING_POSTS = {("POST", "/api/v1/query")}


@pytest.mark.parametrize("read_auth", [False, True])
def test_every_route_that_is_not_a_read_needs_the_token(api_lake: str, read_auth: bool) -> None:
    """A new route cannot ship open: every method but GET of every path the API serves (its OpenAPI schema; the API
    hides no route from it) answers 401 without the token and with a wrong one, before its body is looked at; with
    `read_auth` the reading POSTs too."""
    app = create_app(api_settings(api_lake, read_auth=read_auth))
    paths = app.openapi()["paths"]
    not_get = {(method.upper(), path) for path, methods in paths.items() for method in methods if method != "get"}
    assert {("POST", "/api/v1/silences"), ("DELETE", "/api/v1/silences/{silence_id}")} | READING_POSTS <= not_get
    guarded = not_get if read_auth else not_get - READING_POSTS
    with TestClient(app) as c:
        for method, path in sorted(guarded):
            url = re.sub(r"\{[^}]+\}", "00000000-0000-0000-0000-000000000000", path)
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                r = c.request(method, url, json={}, headers=headers)
                assert r.status_code == 401, (method, path, headers, r.text)
