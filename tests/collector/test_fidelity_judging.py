"""How bench/fidelity.py judges its rows: ranges and means for ordinary measures, pooled shares for races."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.fidelity import calibrated, compare, main, pooled_races, recovery_of, rejudge, z_score
from bench.fidelity_runs import PLANS


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
    rows = [{"measure": "IsrExpandsPerSec", "real": [1, 2], "emulated": [4, 4, 4], "ok": False},
            {"measure": "isr_joins", "real": [6, 6], "emulated": [6, 6, 6], "ok": True},
            {"measure": "fence_s", "real": [9.5, 9.4], "emulated": [7.9, 8.1, 8.7], "ok": True}]
    saved = {"stall-follower": {"sample_ms": 400, "rows": rows}}
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(saved))
    assert rejudge(path, check=True) == 1   # 3 of 12 against 12 of 18: z 2.24
    out = capsys.readouterr().out
    assert "IsrExpandsPerSec" in out and "race" in out and "z 2.24  NO" in out
    rows[0]["real"] = [3, 4]
    path.write_text(json.dumps(saved))
    assert rejudge(path, check=True) == 0


def test_an_emulator_change_is_judged_against_real_runs_kept_in_a_json_file(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """--real-from runs no cluster: the real columns come from the file, the emulator runs at its cadence."""
    kept = {"stall-follower": {"sample_ms": 500, "rows": [
        {"measure": "fence_s", "real": [9.5, 9.4], "emulated": [0.0], "ok": False},
        {"measure": "isr_joins", "real": [6, 6], "emulated": [0], "ok": False},
        {"measure": "records acknowledged", "real": [37_501, 37_509], "emulated": [0], "ok": False}]}}
    path, out_path = tmp_path / "real.json", tmp_path / "new.json"
    path.write_text(json.dumps(kept))
    assert main(["--real-from", str(path), "--seeds", "1", "--workdir", str(tmp_path), "--json", str(out_path)]) == 0
    printed = capsys.readouterr().out
    assert "stall-follower" in printed and "kill-restart-follower" not in printed
    judged = json.loads(out_path.read_text())["stall-follower"]
    assert judged["sample_ms"] == 500
    by_name = {r["measure"]: r for r in judged["rows"]}
    assert by_name["fence_s"]["real"] == [9.5, 9.4] and by_name["records acknowledged"]["real"] == [37_501, 37_509]
    # The emulated side is measured anew: broker 3 out of, then back in, each of its six ISRs; every record
    # acknowledged (the emulated producer stops at the plan's end and its last requests are answered).
    assert by_name["isr_joins"]["emulated"] == [6] and by_name["isr_joins"]["ok"]
    assert by_name["records acknowledged"]["emulated"] == [37_500]
    assert 7.0 <= by_name["fence_s"]["emulated"][0] <= 9.0


def test_a_restart_plan_hands_the_real_brokers_return_to_the_emulator_and_does_not_judge_it() -> None:
    """The real brokers came back 14.5 and 17.1 s after their restart: the emulated one registers 1 s (half a
    heartbeat interval) sooner on average, spread as they were; a plan without a restart gets nothing."""
    by_name = {p.name: p for p in PLANS}
    real = [{"unfenced_s": 14.5, "rejoin_s": 14.5}, {"unfenced_s": 17.1, "rejoin_s": 17.1}]
    assert recovery_of(by_name["kill-restart-follower"], real) == (14_800, 0.09)
    assert recovery_of(by_name["stall-follower"], real) is None
    assert recovery_of(by_name["kill-restart-leader"], [{"unfenced_s": None}] * 2) is None
    emulated = [{"unfenced_s": 30.0, "rejoin_s": 15.0}]
    rows = {name: ok for name, _, _, ok in compare(real, emulated, calibrated(by_name["kill-restart-follower"]))}
    assert rows == {"unfenced_s": True, "rejoin_s": True}
    rows = {name: ok for name, _, _, ok in compare(real, emulated, calibrated(by_name["stall-follower"]))}
    assert rows == {"unfenced_s": False, "rejoin_s": True}
