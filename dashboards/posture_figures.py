"""Figure builders for the posture page: the per-topic verdicts and findings of gold.posture."""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd
import plotly.graph_objects as go

from dashboards.style import MUTED, colour, finish, no_data, table_figure
from schemas.gold_durability import FINDING_COLUMNS

VERDICT_FILL = {
    "no-durability": "#fde2e1",
    "single-copy-acks": "#ffe8cc",
    "durable-not-available": "#fff4d6",
    "durable-and-available": "#e3f4e1",
}
FINDINGS = tuple((column.removeprefix("finding_"), doc) for column, doc in FINDING_COLUMNS)


def _findings(value: Iterable[str] | None) -> list[str]:
    return [] if value is None else [str(f) for f in value]


def posture_table_figure(posture: pd.DataFrame) -> go.Figure:
    """One row per topic: verdict, the durability dials, loss probability and findings."""
    rows = [] if posture.empty else posture.to_dict("records")
    fill = [[VERDICT_FILL.get(str(r["verdict_class"]), "white") for r in rows]] if rows else None
    cells = [
        [r["topic"] for r in rows],
        [r["verdict_class"] for r in rows],
        [r["replication_factor"] for r in rows],
        [f"{r['configured_min_isr']} → {r['effective_min_isr']}" for r in rows],
        ["on" if r["unclean_leader_election_enable"] else "off" for r in rows],
        [r["failure_domains"] for r in rows],
        [f"{r['p_all_copies_lost']:.2g} (indep. {r['p_all_copies_lost_if_independent']:.2g})" for r in rows],
        [", ".join(_findings(r["findings"])) or "none" for r in rows],
    ]
    header = ["topic", "verdict", "RF", "min ISR (configured → effective)", "unclean election", "failure domains",
              "P(all copies lost)", "findings"]
    return table_figure(header, cells, fill, "Durability posture by topic",
                        column_widths=[1.2, 1.5, 0.5, 1.3, 0.9, 0.9, 1.6, 2.2], row_px=40,
                        subtitle="verdicts of the RF / min.insync.replicas table; loss probability p^failure domains")


def findings_figure(posture: pd.DataFrame) -> go.Figure:
    """Findings per topic, stacked by finding (a topic with none has no bar)."""
    fig = go.Figure()
    finish(fig, "Posture findings per topic", x_title="topic", y_title="findings", height=380)
    if posture.empty:
        return no_data(fig)
    topics = list(posture["topic"])
    held = [set(_findings(f)) for f in posture["findings"]]
    for i, (finding, doc) in enumerate(FINDINGS):
        counts = [1 if finding in h else 0 for h in held]
        if not any(counts):
            continue
        fig.add_trace(go.Bar(x=topics, y=counts, name=finding.replace("_", " "), marker={"color": colour(i)},
                             hovertemplate=f"%{{x}}: {doc}<extra></extra>"))
    if not fig.data:
        fig.add_annotation(text="no findings: every topic passes", xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False, font={"size": 16, "color": MUTED})
    fig.update_layout(barmode="stack")
    fig.update_yaxes(dtick=1, rangemode="tozero")
    fig.update_xaxes(type="category")
    return fig
