"""The figure builders on hand-built frames: the values each figure draws, and the no-data state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from dashboards import data
from dashboards.figures import (
    GAP_MAX_CELLS,
    alerts_figure,
    isr_heatmap_figure,
    isr_membership_figure,
    offsets_figure,
    overview_figure,
    rejections_figure,
)
from dashboards.posture_figures import findings_figure, posture_table_figure
from dashboards.slo_figures import BURN_THRESHOLDS, burn_rate_figure, error_budget_figure, slo_table_figure
from dashboards.style import MAX_LABEL_MARGIN, NO_DATA, label_margin
from dashboards.subplots import grid

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def ts(second: int) -> pd.Timestamp:
    return pd.Timestamp(T0 + timedelta(seconds=second))


def naive(second: int) -> pd.Timestamp:
    """What the figures plot: naive UTC (plotly.js ignores offsets in date strings)."""
    return pd.Timestamp(T0 + timedelta(seconds=second)).tz_localize(None)


def frame(columns: list[str], rows: Sequence[tuple[object, ...]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=columns)


def texts(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def trace(fig: go.Figure, name: str, index: int = 0) -> go.BaseTraceType:
    return [t for t in fig.data if t.name == name][index]


# -- overview ----------------------------------------------------------------------------------------------
def metrics() -> pd.DataFrame:
    rows = [(ts(s), b, name, float(b * 10 + s)) for s in (0, 1) for b in (1, 2) for name in data.PARTITION_GAUGES]
    # The controller moved from broker 1 to broker 2 at s 1: each reports only while active.
    rows += [(ts(0), 1, "OfflinePartitionsCount", 3.0), (ts(1), 2, "OfflinePartitionsCount", 0.0)]
    return frame(data.BROKER_METRIC_COLUMNS, rows)


def test_overview_draws_each_gauge_per_broker_and_the_controllers_offline_count() -> None:
    fig = overview_figure(metrics(), frame(data.LOSS_EVENT_COLUMNS, []))
    assert len(fig.data) == 3 * 2 + 1
    assert [t.name for t in fig.data[:2]] == ["broker 1", "broker 2"]
    # One legend entry per broker, not one per gauge.
    assert [t.name for t in fig.data if t.showlegend] == ["broker 1", "broker 2"]
    under_min_broker_2 = fig.data[1 * 2 + 1]
    assert under_min_broker_2.yaxis == "y2"
    assert list(under_min_broker_2.y) == [20.0, 21.0]
    assert list(under_min_broker_2.x) == [naive(0), naive(1)]
    offline = trace(fig, "offline partitions")
    assert list(offline.y) == [3.0, 0.0]
    assert offline.yaxis == "y4"
    assert fig.layout.title.text == "Partition health by broker"
    assert fig.layout.xaxis4.title.text == "time (UTC)"
    assert fig.layout.yaxis.title.text == "partitions"


def test_overview_marks_an_unclean_election_and_lost_records_at_their_time() -> None:
    losses = frame(data.LOSS_EVENT_COLUMNS, [(ts(1), "unclean election", 2, 0, "orders-0, orders-1"),
                                             (ts(1), "acked records lost", 1, 500, "orders-0")])
    fig = overview_figure(metrics(), losses)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert [(s.x0, s.x1, s.yref) for s in lines] == [(naive(1), naive(1), "paper")] * 2
    assert {"unclean election", "acked records lost"} <= set(texts(fig))
    markers = trace(fig, "data loss")
    assert list(markers.x) == [naive(1), naive(1)]
    assert list(markers.text) == ["unclean election: 2 partition(s)<br>orders-0, orders-1",
                                  "acked records lost: 1 partition(s), 500 records<br>orders-0"]


def test_active_alerts_table_lists_rows_in_the_given_order() -> None:
    alerts = frame(data.ALERT_COLUMNS, [
        ("critical", "firing", "UnderMinIsr", "partition", "orders-0: ISR 1 below 2", 1.0, ts(10), ts(12)),
        ("warning", "pending", "UnderReplicated", "partition", "orders-0 lagging", 1.0, ts(11), pd.NaT)])
    fig = alerts_figure(alerts)
    cells = fig.data[0].cells.values
    assert list(cells[0]) == ["critical", "warning"]
    assert list(cells[2]) == ["UnderMinIsr", "UnderReplicated"]
    # Firing: since it fired; pending: since the condition began.
    assert list(cells[5]) == ["2026-01-01 00:00:12", "2026-01-01 00:00:11"]
    assert fig.layout.title.text == "Active alerts (2)"


# -- ISR heatmap -------------------------------------------------------------------------------------------
def test_isr_heatmap_colours_isr_minus_min_and_offline_separately() -> None:
    cells = frame(data.ISR_CELL_COLUMNS, [
        (ts(0), "orders", 0, 1, False, 2), (ts(6), "orders", 0, -1, False, 2), (ts(12), "orders", 0, -1, True, 2),
        (ts(0), "orders", 10, 0, False, 2), (ts(6), "orders", 10, 0, False, 2),
        (ts(0), "logs", 0, 2, False, 1), (ts(6), "logs", 0, 2, False, 1), (ts(12), "logs", 0, 2, False, 1),
    ])
    fig = isr_heatmap_figure(cells, bucket_seconds=6, partitions_total=5)
    margin, offline = fig.data
    assert list(margin.y) == ["logs-0", "orders-0", "orders-10"]  # numeric partition order
    assert list(margin.x) == [naive(0), naive(6), naive(12)]
    np.testing.assert_array_equal(margin.z, [[2, 2, 2], [1, -1, np.nan], [0, 0, np.nan]])
    np.testing.assert_array_equal(offline.z, [[np.nan] * 3, [np.nan, np.nan, 1.0], [np.nan] * 3])
    assert fig.layout.yaxis.autorange == "reversed"
    assert (margin.xgap, margin.ygap) == (offline.xgap, offline.ygap) == (1, 1)
    assert fig.layout.title.subtitle.text.startswith("3 of 5 partitions (the worst) · min over 6-s buckets")


# -- topic detail ------------------------------------------------------------------------------------------
def test_isr_membership_shows_leader_in_isr_and_out_per_replica() -> None:
    membership = frame(data.MEMBERSHIP_COLUMNS, [
        (ts(0), 0, 1, 2), (ts(0), 0, 2, 1), (ts(1), 0, 1, 2), (ts(1), 0, 2, 0), (ts(0), 1, 2, 2), (ts(1), 1, 2, 2)])
    fig = isr_membership_figure(membership, "orders")
    (heat,) = fig.data
    assert list(heat.y) == ["p0 · broker 1", "p0 · broker 2", "p1 · broker 2"]
    np.testing.assert_array_equal(heat.z, [[2, 2], [1, 0], [2, 2]])
    assert fig.layout.title.text == "ISR membership: orders"
    assert (heat.xgap, heat.ygap) == (1, 1)  # a small grid keeps a pixel between cells


def test_a_large_heatmap_has_no_cell_gaps() -> None:
    # With gaps plotly.js paints cell by cell; past GAP_MAX_CELLS the chart is drawn as one image.
    rows = [(ts(t), p, b, 1) for t in range(30) for p in range(30) for b in (1, 2, 3)]  # 90 rows x 30 buckets
    (heat,) = isr_membership_figure(frame(data.MEMBERSHIP_COLUMNS, rows), "orders").data
    assert len(heat.y) * len(heat.x) > GAP_MAX_CELLS
    assert (heat.xgap, heat.ygap) == (0, 0)


def test_offsets_draw_the_high_watermark_with_a_gap_while_offline_and_each_replicas_leo() -> None:
    offsets = frame(data.OFFSET_COLUMNS, [
        (ts(0), 0, 1, 100, 120), (ts(0), 0, 2, 100, 100), (ts(1), 0, 1, -1, 150), (ts(1), 0, 2, -1, 100)])
    fig = offsets_figure(offsets, "orders")
    hw = trace(fig, "high watermark")
    np.testing.assert_array_equal(hw.y, [100.0, np.nan])
    assert list(trace(fig, "broker 1 LEO").y) == [120, 150]
    assert list(trace(fig, "broker 2 LEO").y) == [100, 100]



def test_offsets_draw_each_partition_in_its_own_chart_with_shared_time_axes_per_column() -> None:
    rows = [(ts(t), p, b, 10 * t, 10 * t + b) for p in (3, 7, 9) for b in (1, 2) for t in (0, 1)]
    fig = offsets_figure(frame(data.OFFSET_COLUMNS, rows), "orders")
    charts = {a.text: a for a in fig.layout.annotations}
    assert list(charts) == ["partition 3", "partition 7", "partition 9"]
    # Partition 9 is the third cell: x3/y3, the bottom of the first column, so it carries the time axis.
    p9 = [t for t in fig.data if t.hovertemplate.startswith("p9 ")]
    assert {(t.xaxis, t.yaxis) for t in p9} == {("x3", "y3")}
    assert [t.name for t in p9] == ["high watermark", "broker 1 LEO", "broker 2 LEO"]
    assert list(p9[2].y) == [2, 12]
    assert fig.layout.xaxis.matches == "x3" and fig.layout.xaxis.showticklabels is False
    assert fig.layout.xaxis3.matches is None and fig.layout.xaxis3.title.text == "time (UTC)"
    assert fig.layout.xaxis2.matches is None  # partition 7 is alone in the second column: its own bottom
    assert [fig.layout[f"yaxis{n}"].title.text for n in ("", "2", "3")] == ["offset"] * 3
    assert sum(t.showlegend for t in fig.data) == 3  # one legend entry per series kind, not per chart
    assert "template" not in fig.to_plotly_json()["layout"]


@pytest.mark.parametrize(("cells", "cols"), [(6, 2), (12, 2), (4, 1)])
def test_the_grid_lays_out_cells_as_make_subplots_does(cells: int, cols: int) -> None:
    titles = [f"c{n}" for n in range(cells)]
    rows = -(-cells // cols)
    ours = grid(cells, cols, titles=titles, vertical_spacing=0.4 / rows).layout
    theirs = make_subplots(rows=rows, cols=cols, shared_xaxes=True, vertical_spacing=0.4 / rows,
                           subplot_titles=titles).layout.to_plotly_json()
    theirs.pop("template", None)
    for key, axis in theirs.items():
        if key.startswith(("xaxis", "yaxis")):
            assert ours[key]["domain"] == pytest.approx(axis["domain"]), key
            assert ours[key].get("matches") == axis.get("matches"), key
            assert ours[key].get("showticklabels", True) == axis.get("showticklabels", True), key
    assert [a["text"] for a in ours["annotations"]] == [a["text"] for a in theirs["annotations"]]
    for mine, made in zip(ours["annotations"], theirs["annotations"], strict=True):
        assert (mine["x"], mine["y"]) == pytest.approx((made["x"], made["y"])), mine["text"]


def test_a_grid_needs_a_title_per_cell_and_room_for_its_rows() -> None:
    with pytest.raises(ValueError, match="3 cells need 3 titles, got 2"):
        grid(3, 2, titles=["a", "b"], vertical_spacing=0.1)
    with pytest.raises(ValueError, match=r"vertical_spacing 0.08 leaves no height for 14 rows: at most 0.0769"):
        grid(14, 1, titles=[str(n) for n in range(14)], vertical_spacing=0.08)


def test_an_odd_grid_leaves_no_empty_cell_and_each_column_shows_its_own_time_axis() -> None:
    layout = grid(5, 2, titles=list("abcde"), vertical_spacing=0.1).layout
    assert "xaxis6" not in layout
    # Column 1's bottom is cell 5 (row 3), column 2's is cell 4 (row 2): each shows tick labels, the rest follow.
    assert [layout[k].get("matches") for k in ("xaxis", "xaxis3", "xaxis5")] == ["x5", "x5", None]
    assert [layout[k].get("matches") for k in ("xaxis2", "xaxis4")] == ["x4", None]
    assert layout["xaxis4"].get("showticklabels", True) and not layout["xaxis2"]["showticklabels"]


def test_label_margins_fit_the_labels_up_to_a_cap() -> None:
    assert label_margin(["p1 · broker 2"]) == 45 + 7 * 13
    assert label_margin(["x"]) == 70
    assert label_margin(["t" * 249]) == MAX_LABEL_MARGIN


def test_the_offsets_margin_fits_the_largest_offset() -> None:
    rows = [(ts(t), 0, 1, 1_234_567_890 + t, 1_234_567_890 + t) for t in (0, 1)]
    assert offsets_figure(frame(data.OFFSET_COLUMNS, rows), "orders").layout.margin.l == 45 + 7 * 10

def test_produce_errors_stack_per_acks_level() -> None:
    rejections = frame(data.REJECTION_COLUMNS, [(ts(0), "all", 6.0, 20.0), (ts(1), "all", 0.0, 20.0),
                                                (ts(0), "1", 0.5, 5.0), (ts(1), "1", 0.0, 5.0)])
    fig = rejections_figure(rejections, "orders")
    assert [t.name for t in fig.data] == ["acks=1", "acks=all"]
    assert list(trace(fig, "acks=all").y) == [6.0, 0.0]
    assert list(trace(fig, "acks=all").customdata) == [20.0, 20.0]
    assert fig.layout.barmode == "stack"
    assert fig.layout.yaxis.title.text == "records failed / s"


# -- SLOs and posture --------------------------------------------------------------------------------------
def slo_status() -> pd.DataFrame:
    def row(second: int, slo: str, budget: float, burn: float, page: bool) -> dict[str, object]:
        return {"ts": ts(second), "slo": slo, "sli": slo.replace("-", "_"), "objective": 0.999, "sli_value": 0.99,
                "error_budget_remaining": budget, **{f"burn_rate_{w}": burn for w in data.BURN_WINDOWS},
                "page": page, "ticket": page}
    return pd.DataFrame([row(0, "write-availability", 1.0, 0.0, False), row(1, "write-availability", 0.25, 20.0, True),
                         row(0, "acked-durability", 1.0, 0.0, False)])


def test_error_budget_is_drawn_in_percent_per_slo() -> None:
    fig = error_budget_figure(slo_status())
    assert list(trace(fig, "write-availability").y) == [100.0, 25.0]
    assert list(trace(fig, "acked-durability").y) == [100.0]
    assert [s.y0 for s in fig.layout.shapes] == [0]


def test_burn_rates_per_window_with_the_page_and_ticket_thresholds_on_every_slo() -> None:
    fig = burn_rate_figure(slo_status())
    assert len(fig.data) == 2 * len(data.BURN_WINDOWS)
    assert [t.name for t in fig.data[:5]] == ["5m", "30m", "1h", "6h", "3d"]
    assert list(fig.data[5 + 2].y) == [0.0, 20.0]  # write-availability (second row), 1h
    assert fig.data[5 + 2].yaxis == "y2"
    assert fig.layout.yaxis.rangemode == fig.layout.yaxis2.rangemode == "tozero"
    assert [(s.yref, s.y0) for s in fig.layout.shapes] == [
        (yref, factor) for yref in ("y", "y2") for factor in (14.4, 6.0, 1.0)]
    assert [label for label, _ in BURN_THRESHOLDS] == ["page 14.4× (1h & 5m)", "page 6× (6h & 30m)",
                                                      "ticket 1× (3d & 6h)"]
    assert "page 14.4× (1h & 5m)" in texts(fig)


def test_slo_table_shows_each_slos_latest_interval() -> None:
    cells = slo_table_figure(slo_status()).data[0].cells.values
    assert list(cells[0]) == ["acked-durability", "write-availability"]
    assert list(cells[4]) == ["100 %", "25 %"]
    assert list(cells[-2]) == ["", "yes"]


def test_posture_table_and_findings_per_topic() -> None:
    posture = pd.DataFrame([
        {"topic": "logs", "verdict_class": "single-copy-acks", "replication_factor": 2, "configured_min_isr": 1,
         "effective_min_isr": 1, "unclean_leader_election_enable": True, "failure_domains": 2,
         "p_all_copies_lost": 0.0004, "p_all_copies_lost_if_independent": 0.0004,
         "findings": np.array(["rf_below_3", "unclean_enabled"])},
        {"topic": "orders", "verdict_class": "durable-and-available", "replication_factor": 3, "configured_min_isr": 2,
         "effective_min_isr": 2, "unclean_leader_election_enable": False, "failure_domains": 3,
         "p_all_copies_lost": 8e-6, "p_all_copies_lost_if_independent": 8e-6, "findings": np.array([], dtype=str)},
    ])
    table = posture_table_figure(posture).data[0].cells.values
    assert list(table[0]) == ["logs", "orders"]
    assert list(table[3]) == ["1 → 1", "2 → 2"]
    assert list(table[-1]) == ["rf_below_3, unclean_enabled", "none"]
    bars = findings_figure(posture)
    assert [t.name for t in bars.data] == ["rf below 3", "unclean enabled"]
    assert [list(t.y) for t in bars.data] == [[1, 0], [1, 0]]
    assert list(bars.data[0].x) == ["logs", "orders"]


# -- every builder on no data ------------------------------------------------------------------------------
EMPTY_BUILDERS: list[tuple[str, Callable[[], go.Figure]]] = [
    ("overview", lambda: overview_figure(frame(data.BROKER_METRIC_COLUMNS, []), frame(data.LOSS_EVENT_COLUMNS, []))),
    ("alerts", lambda: alerts_figure(frame(data.ALERT_COLUMNS, []))),
    ("isr heatmap", lambda: isr_heatmap_figure(frame(data.ISR_CELL_COLUMNS, []))),
    ("membership", lambda: isr_membership_figure(frame(data.MEMBERSHIP_COLUMNS, []), "t")),
    ("offsets", lambda: offsets_figure(frame(data.OFFSET_COLUMNS, []), "t")),
    ("produce errors", lambda: rejections_figure(frame(data.REJECTION_COLUMNS, []), "t")),
    ("slo table", lambda: slo_table_figure(frame(data.SLO_COLUMNS, []))),
    ("error budget", lambda: error_budget_figure(frame(data.SLO_COLUMNS, []))),
    ("burn rates", lambda: burn_rate_figure(frame(data.SLO_COLUMNS, []))),
    ("posture", lambda: posture_table_figure(pd.DataFrame())),
    ("findings", lambda: findings_figure(pd.DataFrame())),
]


@pytest.mark.parametrize(("name", "build"), EMPTY_BUILDERS, ids=[n for n, _ in EMPTY_BUILDERS])
def test_an_empty_frame_gives_a_titled_figure_saying_no_data_yet(name: str, build: Callable[[], go.Figure]) -> None:
    fig = build()
    assert fig.layout.title.text
    assert NO_DATA in texts(fig)
    assert all(len(getattr(t, "x", None) or ()) == 0 for t in fig.data if not isinstance(t, go.Table))
    assert not any(isinstance(t, go.Table) for t in fig.data)
    fig.to_json()  # serialisable as it is


@pytest.mark.parametrize(("name", "build"), EMPTY_BUILDERS, ids=[n for n, _ in EMPTY_BUILDERS])
def test_figures_carry_no_plotly_template(name: str, build: Callable[[], go.Figure]) -> None:
    # plotly.py's default template is ~6 KB per figure and doubled the browser's drawing time (style.py).
    assert "template" not in build().to_plotly_json()["layout"]


def test_the_empty_text_of_the_alerts_table_can_say_there_are_none() -> None:
    assert texts(alerts_figure(frame(data.ALERT_COLUMNS, []), empty_text="no pending or firing alerts")) == [
        "no pending or firing alerts"]
