"""Figure builders for the SLO page: current status, error budget over time, burn rates by window.

gold.slo_status carries whether a page or ticket condition held, not the conditions themselves, so the
burn-rate chart draws the default multi-window thresholds (pipelines/slo_spec.py, from the Google SRE
workbook); an SLO with its own `alerting` in conf/slos.yaml is judged by the `page`/`ticket` columns,
which the status table shows.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

from dashboards.data import BURN_WINDOWS
from dashboards.style import (
    DANGER,
    TIME_AXIS,
    WARNING,
    add_overlays,
    colour,
    finish,
    hline,
    no_data,
    plot_time,
    table_figure,
)
from dashboards.subplots import grid, grid_figure
from pipelines.slo_spec import DEFAULT_PAGE, DEFAULT_TICKET

# (label, burn rate) lines on every SLO's burn-rate chart.
BURN_THRESHOLDS: tuple[tuple[str, float], ...] = (
    *((f"page {factor:g}× ({long} & {short})", factor) for long, short, factor in DEFAULT_PAGE),
    *((f"ticket {factor:g}× ({long} & {short})", factor) for long, short, factor in DEFAULT_TICKET),
)


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.3f}".rstrip("0").rstrip(".") + " %"


def slo_table_figure(status: pd.DataFrame) -> go.Figure:
    """Each SLO's latest status in the window: SLI against objective, budget left, burn, page/ticket."""
    latest = status.sort_values("ts").groupby("slo").tail(1).sort_values("slo") if not status.empty else status
    rows = [] if latest.empty else latest.to_dict("records")
    fill = [["#fde2e1" if r["page"] else "#fff4d6" if r["ticket"] else "white" for r in rows]] if rows else None
    cells = [
        [r["slo"] for r in rows], [r["sli"] for r in rows], [_percent(r["objective"]) for r in rows],
        [_percent(r["sli_value"]) for r in rows], [_percent(r["error_budget_remaining"]) for r in rows],
        *([f"{r[f'burn_rate_{w}']:.2f}" for r in rows] for w in BURN_WINDOWS),
        ["yes" if r["page"] else "" for r in rows], ["yes" if r["ticket"] else "" for r in rows],
    ]
    header = ["SLO", "indicator", "objective", "SLI now", "budget left", *(f"burn {w}" for w in BURN_WINDOWS),
              "page", "ticket"]
    return table_figure(header, cells, fill, "SLO status", column_widths=[1.6, 1.6, *[1.0] * 10],
                        subtitle="latest interval in the window; red: page condition holds, amber: ticket")


def error_budget_figure(status: pd.DataFrame) -> go.Figure:
    """Error budget remaining over time per SLO (lowest per bucket); below 0 the budget is overspent."""
    fig = go.Figure()
    finish(fig, "Error budget remaining", x_title=TIME_AXIS, y_title="budget remaining (%)", height=380,
           subtitle="1 − error ratio / (1 − objective) over each SLO's rolling window")
    if status.empty:
        return no_data(fig)
    for i, slo in enumerate(sorted(status["slo"].unique())):
        series = status[status["slo"] == slo]
        fig.add_trace(go.Scatter(
            x=plot_time(series["ts"]), y=(series["error_budget_remaining"] * 100).to_numpy(), name=slo,
            mode="lines", line={"color": colour(i), "width": 2},
            hovertemplate=f"{slo}<br>%{{x}}<br>%{{y:.2f}} % left<extra></extra>"))
    shape, note = hline(0, 1, DANGER, "budget exhausted")
    return add_overlays(fig, [shape], [note])


def burn_rate_figure(status: pd.DataFrame,
                     thresholds: tuple[tuple[str, float], ...] = BURN_THRESHOLDS) -> go.Figure:
    """Burn rate per window (5m … 3d), one chart per SLO, with the page and ticket thresholds."""
    slos = [] if status.empty else sorted(status["slo"].unique())
    title, subtitle = ("Burn rates", "error ratio / (1 − objective), highest per bucket; dashed: default page and "
                       "ticket thresholds")
    height = max(360, 120 + 230 * len(slos))
    if status.empty:
        fig = go.Figure()
        finish(fig, title, x_title=TIME_AXIS, y_title="burn rate (×)", height=height, subtitle=subtitle)
        return no_data(fig)
    cells = grid(len(slos), 1, titles=slos, vertical_spacing=0.08)
    status = status.assign(ts=plot_time(status["ts"]))  # converted once, not once per trace
    threshold_colours = [DANGER if label.startswith("page") else WARNING for label, _ in thresholds]
    traces: list[dict[str, Any]] = []
    shapes, notes = [], []
    for row, ((x_ref, y_ref), (slo, series)) in enumerate(zip(cells.refs, status.groupby("slo", sort=True),
                                                                strict=True), start=1):
        for i, window in enumerate(BURN_WINDOWS):
            traces.append({
                "type": "scatter", "x": series["ts"], "y": series[f"burn_rate_{window}"].to_numpy(), "name": window,
                "legendgroup": window, "showlegend": row == 1, "mode": "lines",
                "line": {"color": colour(i), "width": 1.5}, "xaxis": x_ref, "yaxis": y_ref,
                "hovertemplate": f"{slo} {window}<br>%{{x}}<br>%{{y:.2f}}×<extra></extra>"})
        for (label, factor), line_colour in zip(thresholds, threshold_colours, strict=True):
            shape, note = hline(factor, row, line_colour, label)
            shapes.append(shape)
            notes.append(note)
    fig = grid_figure(traces, cells, title, x_title=TIME_AXIS, y_title="burn rate (×)", height=height,
                      subtitle=subtitle, y_axis={"rangemode": "tozero"})
    return add_overlays(fig, shapes, notes)
