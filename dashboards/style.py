"""The look every dashboard figure shares: titles, axis labels, colours, and the "no data yet" state.

Figures carry no Plotly template (plotly.js's own defaults plus the few settings below): plotly.py puts its
default template ("plotly", ~6 KB of settings for every trace type) into every figure, and plotly.js merges
it into each trace and axis it draws: measured in headless Chromium, the topic page's ISR heatmap drew in
~110 ms with it and ~50 ms without, its 12-partition offsets grid in ~170 ms and ~90 ms.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go

NO_DATA = "no data yet"
TIME_AXIS = "time (UTC)"
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
GRID = "#e5e7eb"
# One colour per broker (or SLO, or window) across all figures of a page: the Tableau 10 palette.
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#ff9da7", "#9c755f",
           "#bab0ac", "#e15759")
DANGER = "#d62728"
WARNING = "#f0a500"
GOOD = "#2ca02c"
MUTED = "#6b7280"


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def base_layout(title: str, *, height: int, subtitle: str | None = None) -> dict[str, Any]:
    """The layout every figure shares: title (and subtitle), height, font, colours, margins, legend."""
    title_spec: dict[str, Any] = {"text": title, "x": 0.01, "xanchor": "left"}
    if subtitle:
        title_spec["subtitle"] = {"text": subtitle, "font": {"size": 12, "color": MUTED}}
    return {
        "title": title_spec, "height": height, "font": {"family": FONT, "size": 12},
        "paper_bgcolor": "white", "plot_bgcolor": "white", "hovermode": "closest",
        "margin": {"l": 70, "r": 30, "t": 90 if subtitle else 60, "b": 50},
        "legend": {"orientation": "v", "yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.01},
        "uirevision": "keep",  # a redraw with new data keeps the reader's zoom and hidden traces
    }


def axis_style(*, automargin: bool = True) -> dict[str, Any]:
    """Axes without tick marks, light grid. `automargin` grows the margins to fit tick labels; it costs
    plotly.js a second layout pass per axis (the 12-chart offsets grid drew in ~170 ms with it, ~100 ms
    without), so large figures turn it off and size their margins themselves (`label_margin`)."""
    return {"gridcolor": GRID, "zeroline": False, "showline": True, "linecolor": GRID, "ticks": "",
            "automargin": automargin}


def axis_title(text: str) -> dict[str, Any]:
    """An axis title 15 px clear of its tick labels (plotly.js's default gap let a y title touch long labels)."""
    return {"text": text, "standoff": 15}


MAX_LABEL_MARGIN = 360  # px: a 249-character topic name must not squeeze the chart away


def label_margin(labels: list[str], *, minimum: int = 70) -> int:
    """A left margin (px) holding the longest label at the figures' 12 px font and the axis title beside it:
    what automargin would grow it to, computed without a layout pass, and at most MAX_LABEL_MARGIN (longer
    labels are cut at the figure's edge; hovering shows them whole)."""
    return min(MAX_LABEL_MARGIN, max(minimum, 45 + 7 * max((len(label) for label in labels), default=0)))


def finish(fig: go.Figure, title: str, *, x_title: str | None, y_title: str | None, height: int,
           subtitle: str | None = None) -> go.Figure:
    """Title, axis labels and the shared layout; axis labels go on the bottom/left axes of subplots."""
    fig.layout.template = None  # see the module docstring: the figure is sent and drawn without a template
    fig.update_layout(**base_layout(title, height=height, subtitle=subtitle))
    fig.update_xaxes(**axis_style())
    fig.update_yaxes(**axis_style())
    if x_title is not None:
        bottom = _axis_names(fig, "x")[-1]
        fig.layout[bottom].title = axis_title(x_title)
    if y_title is not None:
        for name in _axis_names(fig, "y"):
            fig.layout[name].title = axis_title(y_title)
    return fig


def no_data(fig: go.Figure, text: str = NO_DATA) -> go.Figure:
    """Mark an empty figure: a centred note, axes without ticks (there is nothing to measure)."""
    fig.add_annotation(text=text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font={"size": 16, "color": MUTED})
    fig.update_xaxes(showticklabels=False, showgrid=False)
    fig.update_yaxes(showticklabels=False, showgrid=False)
    return fig


def add_overlays(fig: go.Figure, shapes: list[dict[str, Any]], annotations: list[dict[str, Any]]) -> go.Figure:
    """Append shapes and annotations in one layout update: plotly.py revalidates the whole layout on each
    add_shape/add_hline/add_annotation call, which costs more than the rest of a figure."""
    if shapes:
        fig.layout.shapes = (*fig.layout.shapes, *shapes)
    if annotations:
        fig.layout.annotations = (*fig.layout.annotations, *annotations)
    return fig


def axis_ref(letter: str, row: int) -> str:
    """The axis reference of subplot `row` (a row in one column, or a cell counted row-major): x, x2, …"""
    return letter if row == 1 else f"{letter}{row}"


def hline(y: float, row: int, colour: str, label: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A dashed horizontal threshold across a subplot row, and its label at the left end."""
    x, yref = f"{axis_ref('x', row)} domain", axis_ref("y", row)
    shape = {"type": "line", "xref": x, "x0": 0, "x1": 1, "yref": yref, "y0": y, "y1": y,
             "line": {"color": colour, "dash": "dash", "width": 1}}
    note = {"xref": x, "x": 0, "xanchor": "left", "yref": yref, "y": y, "yanchor": "bottom", "text": label,
            "showarrow": False, "font": {"color": colour, "size": 10}}
    return shape, note


def plot_time(values: pd.Series) -> pd.Series:
    """Timestamps as naive UTC for plotly.js, which does not read UTC offsets in date strings."""
    ts = pd.to_datetime(values)
    if ts.dt.tz is not None:
        ts = ts.dt.tz_convert("UTC").dt.tz_localize(None)
    return ts


def table_figure(header: list[str], cells: list[list[Any]], fill: list[list[str]] | None, title: str, *,
                 column_widths: list[float] | None = None, row_px: int = 30, subtitle: str | None = None,
                 empty_text: str = NO_DATA) -> go.Figure:
    """A go.Table figure tall enough for its rows (`row_px` each, more where cells wrap); with no rows,
    the no-data note instead of an empty grid."""
    fig = go.Figure()
    rows = len(cells[0]) if cells else 0
    chrome = 100 if subtitle else 70
    if rows:
        fig.add_trace(go.Table(
            columnwidth=column_widths,
            header={"values": [f"<b>{h}</b>" for h in header], "fill": {"color": "#f3f4f6"}, "align": "left",
                    "line": {"color": GRID}, "height": 30},
            cells={"values": cells, "align": "left", "line": {"color": GRID}, "height": 26,
                   **({"fill": {"color": fill}} if fill is not None else {})},
        ))
        finish(fig, title, x_title=None, y_title=None, height=chrome + 40 + row_px * rows, subtitle=subtitle)
        fig.update_layout(margin={"l": 10, "r": 10, "b": 10})
        return fig
    finish(fig, title, x_title=None, y_title=None, height=chrome + 90, subtitle=subtitle)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(text=empty_text, xref="paper", yref="paper", x=0.5, y=0.5, showarrow=False,
                       font={"size": 16, "color": MUTED})
    return fig


def _axis_names(fig: go.Figure, letter: str) -> list[str]:
    """Layout keys of the figure's x or y axes, in subplot order (xaxis, xaxis2, …)."""
    names = [k for k in fig.layout.to_plotly_json() if k.startswith(f"{letter}axis")]
    names = sorted(names, key=lambda k: int(k[5:] or 1))
    return names or [f"{letter}axis"]
