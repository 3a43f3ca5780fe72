"""`isrwatch dashboards export` and `isrwatch serve` argument errors, through the CLI's main()."""

from __future__ import annotations

from pathlib import Path

import pytest

from isrwatch.cli import main


def test_dashboards_export_writes_linked_static_pages(api_lake: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "export"
    assert main(["dashboards", "export", "--lakehouse", api_lake, "--out", str(out),
                 "--cluster", "lose-two-s3"]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert {"index.html", "overview.html", "isr-heatmap.html", "slos.html", "posture.html", "topics.html",
            "topic-orders.html", "plotly.min.js"} <= set(files)
    assert f"wrote {len(files)} files to {out}" in capsys.readouterr().out
    overview = (out / "overview.html").read_text()
    assert 'src="plotly.min.js' in overview and "https://" not in overview and "lose-two-s3" in overview


@pytest.mark.parametrize(("argv", "message"), [
    (["dashboards", "export", "--out", "x", "--window-minutes", "0"], "--window-minutes must be > 0"),
    (["serve", "--port", "70000"], "api.port: 70000"),
])
def test_bad_arguments_exit_2_with_the_reason(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
                                              ) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err
