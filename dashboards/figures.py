"""Figure builders for the cluster overview, the ISR heatmap and a topic's detail: frames in, figures out.

Pure functions of the frames that `dashboards.data` returns (no I/O), so a test can hand-build a frame
and assert the values a figure draws. Every builder returns a titled figure with labelled axes, and the
"no data yet" note when its frame is empty.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from dashboards.data import (
    OFFLINE_PARTITIONS,
    PARTITION_GAUGES,
    REPLICA_IN_ISR,
    REPLICA_LEADER,
    REPLICA_OUT_OF_ISR,
)
from dashboards.style import (
    DANGER,
    GOOD,
    MUTED,
    NO_DATA,
    TIME_AXIS,
    WARNING,
    add_overlays,
    colour,
    finish,
    label_margin,
    no_data,
    plot_time,
    table_figure,
)
from dashboards.subplots import grid, grid_figure
from schemas.gold import AlertStatus

GAUGE_TITLES = {
    "UnderReplicatedPartitions": "Under-replicated partitions",
    "UnderMinIsrPartitionCount": "Under min ISR: acks=all writes refused",
    "AtMinIsrPartitionCount": "At min ISR: one more failure refuses writes",
    OFFLINE_PARTITIONS: "Offline partitions (active controller)",
}
# Heatmap colours for ISR size minus effective min ISR, one band per integer from -2 to +2 (values
# beyond take the end colours): reds refuse acks=all writes, amber is at the edge, greens have headroom.
MARGIN_COLOURS = ("#99000d", "#ef3b2c", "#fdae61", "#a6d96a", "#1a9850")
OFFLINE_COLOUR = "#111827"
MEMBERSHIP_COLOURS = {REPLICA_OUT_OF_ISR: "#ef3b2c", REPLICA_IN_ISR: "#a6d96a", REPLICA_LEADER: "#1a9850"}
# Data-loss markers get a text label only while there are few enough not to overlap.
MAX_LOSS_LABELS = 8


def _band_colourscale(colours: tuple[str, ...]) -> list[tuple[float, str]]:
    """A colourscale of equal, sharp bands (one per colour) instead of a gradient."""
    scale: list[tuple[float, str]] = []
    for i, c in enumerate(colours):
        scale += [(i / len(colours), c), ((i + 1) / len(colours), c)]
    return scale


GAP_MAX_CELLS = 2_000


def _cell_gaps(rows: int, columns: int) -> tuple[int, int]:
    """(xgap, ygap): a pixel between heatmap cells on small grids only. With a gap plotly.js paints every cell
    on its own instead of one image: a 180 x 61 grid took ~220 ms to draw with gaps, ~100 ms without. No
    column gap either once it would eat a third of a cell."""
    if rows * columns > GAP_MAX_CELLS:
        return 0, 0
    return (1 if columns <= 100 else 0), 1


def partition_label(topic: str, partition: int) -> str:
    return f"{topic}-{int(partition)}"


# -- overview ----------------------------------------------------------------------------------------------
def overview_figure(metrics: pd.DataFrame, losses: pd.DataFrame) -> go.Figure:
    """Per-broker partition gauges and the controller's offline count over time, one row each, with
    every data-loss event (unclean election, acknowledged records lost) as a red vertical marker."""
    rows = [*PARTITION_GAUGES, OFFLINE_PARTITIONS]
    title, subtitle = ("Partition health by broker",
                       "leader-side broker gauges (max per bucket); red markers: data-loss events")
    cells = grid(len(rows), 1, titles=[GAUGE_TITLES[r] for r in rows], vertical_spacing=0.07)
    if metrics.empty:
        return no_data(grid_figure([], cells, title, x_title=TIME_AXIS, y_title="partitions", height=820,
                                   subtitle=subtitle))
    brokers = sorted(int(b) for b in metrics.loc[metrics["name"].isin(PARTITION_GAUGES), "broker_id"].unique())
    metrics = metrics.assign(ts=plot_time(metrics["ts"]))  # converted once, not once per trace
    gauges = dict(tuple(metrics.groupby(["name", "broker_id"], sort=False)))
    traces: list[dict[str, Any]] = []
    for (x_ref, y_ref), name in zip(cells.refs[:len(PARTITION_GAUGES)], PARTITION_GAUGES, strict=True):
        for i, broker in enumerate(brokers):
            series = gauges.get((name, broker))
            traces.append({
                "type": "scatter", "x": [] if series is None else series["ts"],
                "y": [] if series is None else series["value"].to_numpy(), "name": f"broker {broker}",
                "legendgroup": f"broker {broker}", "showlegend": name == PARTITION_GAUGES[0], "mode": "lines",
                "line": {"color": colour(i), "width": 1.5, "shape": "hv"}, "xaxis": x_ref, "yaxis": y_ref,
                "hovertemplate": f"broker {broker}<br>%{{x}}<br>%{{y}} partitions<extra></extra>"})
    # Only the active controller reports it; after a failover another broker does: the max over brokers.
    offline = metrics[metrics["name"] == OFFLINE_PARTITIONS].groupby("ts", as_index=False)["value"].max()
    x_ref, y_ref = cells.refs[-1]
    traces.append({
        "type": "scatter", "x": offline["ts"], "y": offline["value"].to_numpy(), "name": "offline partitions",
        "mode": "lines", "line": {"color": DANGER, "width": 2, "shape": "hv"}, "xaxis": x_ref, "yaxis": y_ref,
        "hovertemplate": "%{x}<br>%{y} offline partitions<extra></extra>"})
    shapes, notes = _loss_markers(traces, losses, cells.refs[-1])
    fig = grid_figure(traces, cells, title, x_title=TIME_AXIS, y_title="partitions", height=820, subtitle=subtitle)
    return add_overlays(fig, shapes, notes)


def _loss_markers(traces: list[dict[str, Any]], losses: pd.DataFrame, refs: tuple[str, str]
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Data-loss events: a marker trace (appended to `traces`, on the chart `refs`) and the vertical lines and
    labels across the charts, returned as (shapes, annotations)."""
    if losses.empty:
        return [], []
    times = plot_time(losses["ts"])
    shapes = [{"type": "line", "x0": when, "x1": when, "xref": "x", "y0": 0, "y1": 1, "yref": "paper",
               "line": {"color": DANGER, "width": 1.5, "dash": "dot"}} for when in times]
    # Labels inside the top chart, next to their line, alternating height so close events stay readable.
    notes = [{"x": when, "xref": "x", "xanchor": "left", "xshift": 3, "y": 1.0, "yref": "y domain",
              "yanchor": "top", "yshift": -14 * (i % 2), "text": kind, "showarrow": False,
              "bgcolor": "rgba(255,255,255,0.85)", "font": {"size": 10, "color": DANGER}}
             for i, (when, kind) in enumerate(zip(times, losses["kind"], strict=True))]
    hover = [f"{k}: {p} partition(s){f', {r} records' if r else ''}<br>{w}"
             for k, p, r, w in zip(losses["kind"], losses["partitions"], losses["records"], losses["where"],
                                   strict=True)]
    traces.append({
        "type": "scatter", "x": times, "y": np.zeros(len(losses)), "name": "data loss", "mode": "markers",
        "text": hover, "marker": {"symbol": "x", "size": 11, "color": DANGER}, "xaxis": refs[0], "yaxis": refs[1],
        "hovertemplate": "%{x}<br>%{text}<extra></extra>"})
    return shapes, notes if len(losses) <= MAX_LOSS_LABELS else []


def alerts_figure(alerts: pd.DataFrame, empty_text: str = NO_DATA) -> go.Figure:
    """The active (pending and firing) alerts as a table, most severe first."""
    rows = [] if alerts.empty else alerts.to_dict("records")
    severity_fill = {"critical": "#fde2e1", "warning": "#fff4d6"}
    fill = [[severity_fill.get(str(r["severity"]), "white") for r in rows]] if rows else None
    cells = [
        [r["severity"] for r in rows], [r["status"] for r in rows], [r["rule"] for r in rows],
        [r["summary"] for r in rows], [f"{r['value']:.4g}" for r in rows],
        [_when(r["fired_at"] if r["status"] == AlertStatus.FIRING else r["active_since"]) for r in rows],
    ]
    return table_figure(["severity", "status", "rule", "summary", "value", "since (UTC)"], cells, fill,
                        f"Active alerts ({len(rows)})", column_widths=[0.7, 0.6, 1.6, 4.5, 0.6, 1.4], row_px=34,
                        empty_text=empty_text)


COVERAGE_FILL = {"complete": "#e3f4e1", "partial": "#fff4d6", "none": "#fde2e1"}


def metrics_coverage_figure(coverage: pd.DataFrame) -> go.Figure:
    """Per node: the exporter rules its metrics come under, the metrics isrwatch reads found of those expected,
    the missing ones and the alert rules that cannot fire for want of them."""
    rows = [] if coverage.empty else coverage.to_dict("records")

    def node(r: dict[str, Any]) -> str:
        named = r["metrics_url"] if pd.isna(r["node_id"]) else f"{r['role']} {int(r['node_id'])}"
        return named if r["reporting"] else f"{named} (not reporting: {r['reason']})"

    def state(r: dict[str, Any]) -> str:
        if r["metrics_found"] == r["metrics_expected"] and r["reporting"] and not pd.isna(r["node_id"]):
            return "complete"
        return "partial" if r["metrics_found"] else "none"

    cells = [[node(r) for r in rows], [r["exporter_rules"] or "" for r in rows],
             [f"{r['metrics_found']} / {r['metrics_expected']}" for r in rows],
             [", ".join(r["missing"]) or "none" for r in rows], [", ".join(r["rules_blind"]) or "none" for r in rows]]
    fill = [[COVERAGE_FILL[state(r)] for r in rows]] if rows else None
    return table_figure(["node", "exporter rules", "found / expected", "missing", "rules that cannot fire"], cells,
                        fill, "Metrics coverage", column_widths=[2.2, 1.0, 0.9, 3.2, 1.8], row_px=34,
                        subtitle="what each node's metrics endpoint gives isrwatch, as last recorded")


def _when(value: pd.Timestamp | None) -> str:
    return "" if value is None or pd.isna(value) else pd.Timestamp(value).strftime("%Y-%m-%d %H:%M:%S")


# -- ISR heatmap -------------------------------------------------------------------------------------------
def isr_heatmap_figure(cells: pd.DataFrame, *, bucket_seconds: int = 1,
                       partitions_total: int | None = None) -> go.Figure:
    """Partition × time, coloured by ISR size minus effective min ISR (negative: acks=all writes
    refused, 0: at min ISR, positive: headroom); offline buckets (leader -1) black."""
    shown = 0 if cells.empty else len(cells[["topic", "partition"]].drop_duplicates())
    total = shown if partitions_total is None else partitions_total
    subtitle = (f"{shown} of {total} partitions" + (" (the worst)" if total > shown else "")
                + f" · min over {bucket_seconds}-s buckets · black: offline (no leader)")
    fig = go.Figure()
    finish(fig, "ISR size − effective min ISR", x_title=TIME_AXIS, y_title="topic-partition",
           height=max(360, 150 + 18 * shown), subtitle=subtitle)
    if cells.empty:
        return no_data(fig)
    keys = cells[["topic", "partition"]].drop_duplicates().sort_values(["topic", "partition"])
    labels = [partition_label(t, p) for t, p in zip(keys["topic"], keys["partition"], strict=True)]
    frame = cells.assign(label=[partition_label(t, p) for t, p in zip(cells["topic"], cells["partition"],
                                                                     strict=True)])
    times = sorted(frame["ts"].unique())
    margin = frame.pivot(index="label", columns="ts", values="margin").reindex(index=labels, columns=times)
    offline = frame.pivot(index="label", columns="ts", values="offline").reindex(index=labels, columns=times)
    offline_mask = offline.eq(True).to_numpy()
    z = margin.to_numpy(dtype=float)
    z[offline_mask] = np.nan
    x = plot_time(pd.Series(times))
    xgap, ygap = _cell_gaps(len(labels), len(times))
    fig.add_trace(go.Heatmap(
        x=x, y=labels, z=z, zmin=-2.5, zmax=2.5, colorscale=_band_colourscale(MARGIN_COLOURS), xgap=xgap, ygap=ygap,
        name="ISR − min ISR", hovertemplate="%{y}<br>%{x}<br>ISR − effective min ISR: %{z}<extra></extra>",
        colorbar={"outlinewidth": 0, "title": {"text": "ISR − min"}, "tickvals": [-2, -1, 0, 1, 2],
                  "ticktext": ["≤ −2", "−1 refused", "0 at min", "+1", "≥ +2"]}))
    fig.add_trace(go.Heatmap(
        x=x, y=labels, z=np.where(offline_mask, 1.0, np.nan), zmin=0, zmax=1, showscale=False, xgap=xgap,
        ygap=ygap,
        colorscale=[(0.0, OFFLINE_COLOUR), (1.0, OFFLINE_COLOUR)], name="offline",
        hovertemplate="%{y}<br>%{x}<br>offline: no leader<extra></extra>"))
    _category_rows(fig, labels)
    return fig


def _category_rows(fig: go.Figure, labels: list[str]) -> None:
    """One heatmap row per label, first at the top, the margin sized to the labels (no automargin pass:
    hundreds of labels made it the largest part of drawing the chart)."""
    fig.update_yaxes(autorange="reversed", type="category", automargin=False)
    fig.update_xaxes(automargin=False)
    fig.update_layout(margin={"l": label_margin(labels)})


# -- topic detail ------------------------------------------------------------------------------------------
def isr_membership_figure(membership: pd.DataFrame, topic: str) -> go.Figure:
    """Per partition and assigned replica over time: leader, in the ISR, or out of it."""
    fig = go.Figure()
    rows = 0 if membership.empty else len(membership[["partition", "broker_id"]].drop_duplicates())
    finish(fig, f"ISR membership: {topic}", x_title=TIME_AXIS, y_title="partition · replica",
           height=max(320, 150 + 20 * rows), subtitle="lowest state per bucket: an ISR exit is never hidden")
    if membership.empty:
        return no_data(fig)
    keys = membership[["partition", "broker_id"]].drop_duplicates().sort_values(["partition", "broker_id"])
    labels = [f"p{int(p)} · broker {int(b)}" for p, b in zip(keys["partition"], keys["broker_id"], strict=True)]
    frame = membership.assign(label=[f"p{int(p)} · broker {int(b)}" for p, b in
                                     zip(membership["partition"], membership["broker_id"], strict=True)])
    times = sorted(frame["ts"].unique())
    z = frame.pivot(index="label", columns="ts", values="state").reindex(index=labels, columns=times)
    states = sorted(MEMBERSHIP_COLOURS)
    xgap, ygap = _cell_gaps(len(labels), len(times))
    fig.add_trace(go.Heatmap(
        x=plot_time(pd.Series(times)), y=labels, z=z.to_numpy(dtype=float), zmin=states[0] - 0.5,
        zmax=states[-1] + 0.5, colorscale=_band_colourscale(tuple(MEMBERSHIP_COLOURS[s] for s in states)),
        xgap=xgap, ygap=ygap,
        hovertemplate="%{y}<br>%{x}<br>state %{z} (0 out of ISR, 1 in ISR, 2 leader)<extra></extra>",
        colorbar={"outlinewidth": 0, "tickvals": states, "ticktext": ["out of ISR", "in ISR", "leader"]}))
    _category_rows(fig, labels)
    return fig


def offsets_figure(offsets: pd.DataFrame, topic: str) -> go.Figure:
    """High watermark against each replica's log end offset, one small chart per partition."""
    title, subtitle = (f"High watermark vs log end offsets: {topic}",
                       "dashed: high watermark; lines: each replica's LEO (last snapshot per bucket)")
    if offsets.empty:
        fig = go.Figure()
        finish(fig, title, x_title=TIME_AXIS, y_title="offset", height=340, subtitle=subtitle)
        return no_data(fig)
    # Timestamps converted once for the whole frame, not once per trace.
    by_partition = dict(tuple(offsets.assign(ts=plot_time(offsets["ts"])).groupby("partition", sort=True)))
    partitions = [int(p) for p in by_partition]
    cells = grid(len(partitions), 2, titles=[f"partition {p}" for p in partitions],
                 vertical_spacing=min(0.12, 0.4 / math.ceil(len(partitions) / 2)))
    brokers = sorted(int(b) for b in offsets["broker_id"].unique())
    traces: list[dict[str, Any]] = []
    shown: set[str] = set()
    for (x_ref, y_ref), (partition, of_partition) in zip(cells.refs, by_partition.items(), strict=True):
        hw = of_partition.groupby("ts", as_index=False)["high_watermark"].max()
        # An offline partition reports HW -1: a gap in the line, not a fall to zero.
        hw_values = hw["high_watermark"].where(hw["high_watermark"] >= 0).to_numpy(dtype=float)
        traces.append({
            "type": "scatter", "x": hw["ts"], "y": hw_values, "name": "high watermark", "mode": "lines",
            "legendgroup": "hw", "showlegend": "hw" not in shown, "line": {"color": MUTED, "dash": "dash", "width": 2},
            "hovertemplate": f"p{partition} HW<br>%{{x}}<br>%{{y}}<extra></extra>", "xaxis": x_ref, "yaxis": y_ref})
        shown.add("hw")
        for broker, replica in of_partition.groupby("broker_id", sort=True):
            label = f"broker {int(broker)}"
            traces.append({
                "type": "scatter", "x": replica["ts"], "y": replica["log_end_offset"].to_numpy(),
                "name": f"{label} LEO", "mode": "lines", "legendgroup": label, "showlegend": label not in shown,
                "line": {"color": colour(brokers.index(int(broker))), "width": 1.5},
                "hovertemplate": f"p{partition} {label} LEO<br>%{{x}}<br>%{{y}}<extra></extra>",
                "xaxis": x_ref, "yaxis": y_ref})
            shown.add(label)
    rows = math.ceil(len(partitions) / 2)
    # An offset's tick label has at most its digits (plotly.js may write 1.234567B for a narrow range near 1e9).
    widest = str(int(max(offsets["log_end_offset"].max(), offsets["high_watermark"].max(), 0)))
    return grid_figure(traces, cells, title, x_title=TIME_AXIS, y_title="offset", height=max(340, 120 + 220 * rows),
                       subtitle=subtitle, y_labels=[widest])


def rejections_figure(rejections: pd.DataFrame, topic: str) -> go.Figure:
    """Records answered with an error (NotEnoughReplicas, timeouts…) per acks level, per second."""
    fig = go.Figure()
    finish(fig, f"Produce errors: {topic}", x_title=TIME_AXIS, y_title="records failed / s", height=360,
           subtitle="average per metric interval over the bucket, from the ack ledger")
    if rejections.empty:
        return no_data(fig)
    acks_colours = {"0": MUTED, "1": WARNING, "all": DANGER}
    for acks in sorted(rejections["acks"].unique()):
        series = rejections[rejections["acks"] == acks]
        fig.add_trace(go.Bar(
            x=plot_time(series["ts"]), y=series["records_failed_per_s"].to_numpy(), name=f"acks={acks}",
            marker={"color": acks_colours.get(str(acks), GOOD)}, customdata=series["records_sent_per_s"].to_numpy(),
            hovertemplate=f"acks={acks}<br>%{{x}}<br>%{{y:.1f}} failed/s of %{{customdata:.1f}} sent/s<extra></extra>"))
    fig.update_layout(barmode="stack", bargap=0.1)
    return fig
