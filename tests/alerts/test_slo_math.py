"""SLO arithmetic on hand-computed fixtures, and conf/slos.yaml checking."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from pipelines.slo_config import load_slos
from pipelines.slo_math import BudgetSeries, evaluate_batch, timeslices
from pipelines.slo_spec import Slo, SloConfigError, parse_slos

MIN = 60_000


def slo(**kw: Any) -> Slo:
    raw = {"name": "s", "sli": "write_availability", "objective": 99, "window": "1h", **kw}
    return parse_slos({"slos": [raw]}, "<test>")[0]


def slices(minutes: range, bad: Any, total: float = 100.0) -> pd.DataFrame:
    ts = [m * MIN for m in minutes]
    bads = [bad(m) if callable(bad) else bad for m in minutes]
    return pd.DataFrame({"run_id": "c", "ts": ts, "bad": bads, "total": total})


def test_budget_and_burn_rates_over_each_window() -> None:
    # 99 % over 1 h; a slice a minute of 100 partition-intervals, 10 bad in each of the last 5 minutes.
    s = slo()
    status = BudgetSeries().evaluate(s, slices(range(1, 61), lambda m: 10.0 if m > 55 else 0.0))
    last = status.iloc[-1]
    assert (last["bad_window"], last["total_window"]) == (50.0, 6000.0)
    assert last["sli_value"] == pytest.approx(1 - 50 / 6000)
    assert last["error_budget_remaining"] == pytest.approx(1 - (50 / 6000) / 0.01)       # 1/6 left
    assert last["burn_rate_5m"] == pytest.approx((50 / 500) / 0.01)                       # 10x
    assert last["burn_rate_30m"] == pytest.approx((50 / 3000) / 0.01)                     # 1.67x
    assert last["burn_rate_1h"] == pytest.approx((50 / 6000) / 0.01)
    assert last["burn_rate_6h"] == last["burn_rate_3d"] == pytest.approx((50 / 6000) / 0.01)
    # 10x over 5 min but under 14.4x, and 1.67x over 30 min but under 6x: no page; 3d at 0.83x: no ticket.
    assert not status["page"].any() and not status["ticket"].any()
    # Before the first bad minute everything is perfect.
    first = status.iloc[0]
    assert (first["sli_value"], first["error_budget_remaining"], first["burn_rate_5m"]) == (1.0, 1.0, 0.0)


def test_page_needs_both_windows_and_ticket_fires_on_slow_burn() -> None:
    s = slo()
    # 20 % bad for a whole hour: 20x everywhere -> page (1h & 5m > 14.4) and ticket (3d & 6h > 1).
    hot = BudgetSeries().evaluate(s, slices(range(1, 61), 20.0)).iloc[-1]
    assert hot["burn_rate_1h"] == pytest.approx(20.0) and hot["page"] and hot["ticket"]
    assert hot["error_budget_remaining"] == pytest.approx(1 - 20.0)                      # overspent 19x
    # One very bad minute after a clean hour: 5m burns at 20x but 1h only at 20/60 -> no page.
    spike = BudgetSeries().evaluate(s, slices(range(1, 61), lambda m: 100.0 if m == 60 else 0.0)).iloc[-1]
    assert spike["burn_rate_5m"] == pytest.approx((100 / 500) / 0.01)
    assert spike["burn_rate_1h"] == pytest.approx((100 / 6000) / 0.01)
    assert not spike["page"]
    # 2 % bad for an hour: 2x -> ticket, no page.
    slow = BudgetSeries().evaluate(s, slices(range(1, 61), 2.0)).iloc[-1]
    assert slow["ticket"] and not slow["page"]


def test_windows_are_the_same_when_fed_in_batches_past_the_exact_horizon() -> None:
    """8 h of minutes, bad during the first 2 h: older slices fold into minute buckets without changing sums."""
    s = slo(window="1d")
    data = slices(range(1, 481), lambda m: 1.0 if m <= 120 else 0.0, total=1.0)
    whole = BudgetSeries().evaluate(s, data)
    series = BudgetSeries()
    parts = [series.evaluate(s, data.iloc[i:i + 60]) for i in range(0, 480, 60)]
    batched = pd.concat(parts, ignore_index=True)
    pd.testing.assert_frame_equal(whole, batched)
    last = batched.iloc[-1]
    assert (last["bad_window"], last["total_window"]) == (120.0, 480.0)
    assert last["burn_rate_6h"] == 0.0                   # the bad hours are older than 6 h
    assert len(series.exact) == 360 and sum(b[2] for b in series.buckets.values()) == 120


def test_status_at_times_without_events_slides_the_window() -> None:
    s = slo(sli="acked_durability", objective=99.9)
    series = BudgetSeries()
    lost = pd.DataFrame({"run_id": "c", "ts": [MIN], "bad": [2.0], "total": [0.0]})  # found lost, no acks then
    at = np.array([MIN, 6 * MIN + 1])
    status = series.evaluate(s, lost, at=at)
    # A loss with no acks in the window is all bad (1 / 0.001), then slides out of the 5-minute window.
    assert list(status["burn_rate_5m"]) == [pytest.approx(1000.0), 0.0]
    assert list(status["error_budget_remaining"]) == [pytest.approx(-999.0), pytest.approx(-999.0)]


def test_timeslices_count_each_sli() -> None:
    ps = pd.DataFrame({
        "run_id": "c", "ts": 1000, "topic": ["a", "a", "a", "a", "other"], "partition": [0, 1, 2, 3, 0],
        "leader": [-1, 1, 2, 3, 1], "isr_size": [0, 1, 3, 1, 1], "effective_min_isr": [2, 2, 2, 1, 1],
    })
    def counts(**kw: Any) -> tuple[float, float]:
        row = timeslices(slo(topics=["a"], **kw), ps).iloc[0]
        return row["bad"], row["total"]

    assert counts(sli="write_availability") == (2.0, 4.0)       # offline, and ISR 1 < 2
    assert counts(sli="read_availability") == (1.0, 4.0)        # offline
    assert counts(sli="multi_copy_acks") == (1.0, 3.0)          # ISR 1 with min ISR 1; offline does not count
    ledger = pd.DataFrame({"run_id": "c", "ts": 1000, "topic": "a", "acks": ["0", "1", "all"],
                           "records_acked": [10, 20, 30], "records_lost": [5, 1, 2]})
    row = timeslices(slo(sli="acked_durability", acks=["all"]), ledger).iloc[0]
    assert (row["bad"], row["total"]) == (2.0, 30.0)


@pytest.mark.parametrize(("patch", "message"), [
    ({"objective": 0.999}, "objective: 0.999: a percentage strictly between 1 and 100"),
    ({"sli": "latency"}, "sli: 'latency' is not one of"),
    ({"window": "30m"}, "window: '30m': at least 1h"),
    ({"window": "soon"}, "window: expected a duration"),
    ({"topics": []}, "topics: a list of topic names or glob patterns"),
    ({"acks": ["all"]}, "acks: only the acked_durability SLI counts records by acks level"),
    ({"alerting": {"page": [{"long": "5m", "short": "1h", "factor": 14.4}]}},
     "short window '1h' must be shorter than long window '5m'"),
    ({"alerting": {"page": [{"long": "2h", "short": "5m", "factor": 14.4}]}}, "long window '2h' is not one of"),
    ({"colour": "red"}, "colour: unknown field"),
])
def test_bad_specs_name_the_file_slo_and_field(patch: dict[str, Any], message: str) -> None:
    raw = {"name": "orders-writes", "sli": "write_availability", "objective": 99.9, **patch}
    with pytest.raises(SloConfigError) as e:
        parse_slos({"slos": [raw]}, "conf/slos.yaml")
    assert str(e.value).startswith("conf/slos.yaml: slo 'orders-writes': ") and message in str(e.value)


def test_shipped_slos_parse_with_workbook_defaults() -> None:
    slos = {s.name: s for s in load_slos("conf/slos.yaml")}
    assert set(slos) == {"write-availability", "read-availability", "acked-durability", "multi-copy-acks"}
    w = slos["write-availability"]
    assert (w.objective, w.window_ms) == (0.999, 28 * 86_400_000)
    assert [(c.long, c.short, c.factor) for c in w.page] == [("1h", "5m", 14.4), ("6h", "30m", 6.0)]
    assert [(c.long, c.short, c.factor) for c in slos["read-availability"].ticket] == [("3d", "6h", 1.0)]
    assert slos["acked-durability"].acks == ("1", "all")


def test_a_batch_with_ledger_rows_but_no_partition_state_still_counts_them() -> None:
    """validate runs one query per table, so the SLO job can see a cluster's ack ledger before its
    partition_state: those slices are stored and count in the next statuses."""
    slos = (slo(name="durable", sli="acked_durability", objective=99.9), slo(name="writes"))
    series: dict[tuple[str, str], BudgetSeries] = {}
    ledger = pd.DataFrame({"_source": "ack_ledger", "run_id": "c", "ts": [MIN], "topic": "a", "acks": "all",
                           "records_acked": [0], "records_lost": [3]})
    slices_out, status_out = evaluate_batch(slos, series, ledger, 0)
    assert [(f["slo"].iloc[0], f["bad"].sum()) for f in slices_out] == [("durable", 3.0)]
    assert status_out == []                                  # no clock yet: nothing to report at
    state = pd.DataFrame({"_source": "partition_state", "run_id": "c", "ts": [MIN, 2 * MIN], "topic": "a",
                          "leader": 1, "isr_size": 3, "effective_min_isr": 2})
    _, status_out = evaluate_batch(slos, series, state, 1)
    durable = next(f for f in status_out if f["slo"].iloc[0] == "durable")
    assert list(durable["bad_window"]) == [3.0, 3.0] and list(durable["ts"]) == [MIN, 2 * MIN]
    assert durable["page"].all()
    writes = next(f for f in status_out if f["slo"].iloc[0] == "writes")
    assert list(writes["total_window"]) == [1.0, 2.0] and list(writes["bad_window"]) == [0.0, 0.0]
