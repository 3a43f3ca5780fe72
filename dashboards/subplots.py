"""A grid of small charts sharing their columns' time axes, built as a plain layout.

What `plotly.subplots.make_subplots(shared_xaxes=True, subplot_titles=…)` lays out, computed directly:
make_subplots and the `update_*axes` / `add_trace(row=, col=)` calls after it go through plotly.py's
per-property update machinery: the 12-partition offsets figure of a topic page took ~135 ms of server time
that way and takes ~40 ms built as one `go.Figure(data=…, layout=…)` (warm, measured in one process).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from dashboards.style import axis_ref, axis_style, axis_title, base_layout, label_margin

TITLE_FONT_SIZE = 16  # make_subplots' subplot title size


@dataclass(frozen=True)
class Grid:
    """Axes and titles of `cells` charts, `cols` per row, filled row by row."""

    layout: dict[str, Any]
    refs: list[tuple[str, str]]  # per cell: the (xaxis, yaxis) a trace names to be drawn in it


def grid(cells: int, cols: int, *, titles: list[str], vertical_spacing: float,
         horizontal_spacing: float | None = None) -> Grid:
    """Cells numbered row-major from 1 (x, y, x2, y2, …) as make_subplots numbers them; the x axes of a column
    follow its bottom cell's (zoom one, all zoom), and only the bottom cell shows tick labels."""
    if cells < 1 or cols < 1:
        raise ValueError(f"a grid needs at least one cell and one column, got {cells} cells, {cols} columns")
    if len(titles) != cells:
        raise ValueError(f"{cells} cells need {cells} titles, got {len(titles)}")
    cols = min(cols, cells)
    rows = -(-cells // cols)
    if rows > 1 and vertical_spacing * (rows - 1) >= 1:
        raise ValueError(f"vertical_spacing {vertical_spacing} leaves no height for {rows} rows: at most "
                         f"{1 / (rows - 1):.4f}")
    h_space = 0.2 / cols if horizontal_spacing is None else horizontal_spacing
    width = (1 - h_space * (cols - 1)) / cols
    height = (1 - vertical_spacing * (rows - 1)) / rows
    bottom = {c: max(n for n in range(c, cells, cols)) + 1 for c in range(cols)}  # column -> its last cell
    layout: dict[str, Any] = {"annotations": []}
    refs = []
    for index in range(cells):
        n, row, col = index + 1, index // cols, index % cols
        x0 = col * (width + h_space)
        top = 1 - row * (height + vertical_spacing)
        x_axis: dict[str, Any] = {"anchor": axis_ref("y", n), "domain": [x0, x0 + width]}
        if n != bottom[col]:
            x_axis.update(matches=axis_ref("x", bottom[col]), showticklabels=False)
        layout[f"xaxis{'' if n == 1 else n}"] = x_axis
        layout[f"yaxis{'' if n == 1 else n}"] = {"anchor": axis_ref("x", n), "domain": [max(0.0, top - height), top]}
        layout["annotations"].append({
            "text": titles[index], "x": x0 + width / 2, "xanchor": "center", "xref": "paper", "y": top,
            "yanchor": "bottom", "yref": "paper", "showarrow": False, "font": {"size": TITLE_FONT_SIZE}})
        refs.append((axis_ref("x", n), axis_ref("y", n)))
    return Grid(layout, refs)


def grid_figure(traces: list[dict[str, Any]], layout: Grid, title: str, *, x_title: str, y_title: str, height: int,
                subtitle: str | None = None, y_axis: dict[str, Any] | None = None,
                y_labels: list[str] | None = None) -> go.Figure:
    """The figure `style.finish` would make of the grid: shared look, the x title under the last cell, the y
    title (and `y_axis` settings) on every cell's y axis. No automargin (a layout pass per axis): the left
    margin fits `y_labels`, the longest tick labels the y axes can show (default: short counts)."""
    spec = {**base_layout(title, height=height, subtitle=subtitle), **layout.layout}
    spec["margin"] = {**spec["margin"], "l": label_margin(y_labels or [])}
    last_x = layout.refs[-1][0]
    for key in [k for k in layout.layout if k.startswith(("xaxis", "yaxis"))]:
        spec[key] = {**spec[key], **axis_style(automargin=False)}
        if key.startswith("yaxis"):
            spec[key].update(y_axis or {}, title=axis_title(y_title))
        elif key == f"xaxis{last_x[1:]}":
            spec[key]["title"] = axis_title(x_title)
    fig = go.Figure(data=traces, layout=spec)
    fig.layout.template = None  # go.Figure puts the default template back: see dashboards/style.py
    return fig
