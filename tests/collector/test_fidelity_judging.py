"""How bench/fidelity.py judges its rows: ranges and means for ordinary measures, pooled shares for races."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.fidelity import compare, pooled_races, rejudge, z_score


def test_a_count_is_within_tolerance_when_the_ranges_meet_or_the_means_are_within_a_quarter_or_one_event() -> None:
    rows = {name: ok for name, _, _, ok in compare(
        [{"a": 40, "b": 40, "c": 2, "d": 2, "fence_s": 9.0, "rejoin_s": 1.0},
         {"a": 44, "b": 44, "c": 2, "d": 2, "fence_s": 9.5, "rejoin_s": 1.2}],
        [{"a": 44, "b": 56, "c": 1, "d": 4, "fence_s": 7.4, "rejoin_s": 3.5},
         {"a": 50, "b": 56, "c": 1, "d": 4, "fence_s": 7.6, "rejoin_s": 3.5}])}
    # b: 56 against 42, 33 % and 12 events off; c: one event off 2; d: two; fence 1.75 s apart; rejoin 2.4 s.
    assert rows == {"a": True, "b": False, "c": True, "d": False, "fence_s": True, "rejoin_s": False}


def test_a_race_meter_is_judged_on_its_share_pooled_over_every_plan() -> None:
    # One plan's two real runs counted 1 and 2 of 6 where the emulator counted 4 of 6: alone that is not judged
    # (real runs of a plan range from 2 to 6 of 6); pooled with a plan where the real runs counted 11 of 12, the
    # shares agree.
    plan_a = ([{"IsrExpandsPerSec": 1, "isr_joins": 6}, {"IsrExpandsPerSec": 2, "isr_joins": 6}],
              [{"IsrExpandsPerSec": 4, "isr_joins": 6}] * 3)
    plan_b = ([{"IsrExpandsPerSec": 6, "isr_joins": 6}, {"IsrExpandsPerSec": 5, "isr_joins": 6}],
              [{"IsrExpandsPerSec": 4, "isr_joins": 6}] * 3)
    assert all(ok for *_, ok in compare(*plan_a))
    text, failures = pooled_races({"a": plan_a, "b": plan_b})
    assert failures == 0 and "real 14/24 (58 %), emulated 24/36 (67 %)" in text
    # A share far from the real one fails: 2 of 24 emulated against 14 of 24.
    low = ([{"IsrExpandsPerSec": 7, "isr_joins": 12}] * 2, [{"IsrExpandsPerSec": 1, "isr_joins": 12}] * 2)
    assert pooled_races({"a": low})[1] == 1
    assert z_score((14, 24), (24, 36)) == pytest.approx(0.66, abs=0.01)


def test_a_saved_run_is_judged_again_without_running_anything(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    saved = {"stall-follower": [
        {"measure": "IsrExpandsPerSec", "real": [1, 2], "emulated": [4, 4, 4], "ok": False},
        {"measure": "isr_joins", "real": [6, 6], "emulated": [6, 6, 6], "ok": True},
        {"measure": "fence_s", "real": [9.5, 9.4], "emulated": [7.9, 8.1, 8.7], "ok": True}]}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(saved))
    assert rejudge(path, check=True) == 1   # 3 of 12 against 12 of 18: z 2.24
    out = capsys.readouterr().out
    assert "IsrExpandsPerSec" in out and "race" in out and "z 2.24  NO" in out
    saved["stall-follower"][0]["real"] = [3, 4]
    path.write_text(json.dumps(saved))
    assert rejudge(path, check=True) == 0
