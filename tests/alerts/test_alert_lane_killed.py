"""The alert lane SIGKILLed at each of its write boundaries, in a real `jobs/validate.py` process, then run to the end.

The boundaries, in a batch's order: the transitions handed to the receivers (`after_delivery`), gold.alert_events
committed (`after_events`), gold.alerts committed (`after_alerts`), the engine's state committed (`after_state`), and
a batch Spark has committed whose record the writer behind the batches has not written (`before_record`). Each kill is
a real SIGKILL of the process (a kill point armed by tests/kill_at.py); each start continues from what the killed one
left.
At the end every transition is recorded once, under the id it was sent with, and is the engine's over all the rows
at once; the receiver got every routed transition, a killed batch's again under the same delivery ids.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from foundation.delta_io import read_rows
from schemas.gold import ALERT_EVENTS, ALERTS, ALERTS_STATE
from tests.alerts.receiver import Receiver, rules_file
from tests.alerts.test_alert_lane import _engine_on_bronze
from tests.driver_env import driver_env
from tests.kill_at import killed_at

ROOT = Path(__file__).resolve().parents[2]
# (batch, point): one commit a table per batch, the faults' transitions in the first batches.
KILLS = ((0, "after_delivery"), (1, "after_events"), (2, "after_alerts"), (3, "after_state"), (4, "before_record"))


def _validate(lake: str, rules: str, kill: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*killed_at(kill), str(ROOT / "jobs/validate.py"), "--lakehouse", lake, "--tables", "runs",
                           "--trigger", "available-now", "--max-files-per-trigger", "1", "--wait-for-tables", "0",
                           "--rules", rules], cwd=ROOT, env=driver_env(),
                          capture_output=True, text=True, timeout=600)


def _recorded_batch(lake: str) -> int:
    rows = read_rows(ALERTS_STATE, lake).to_pylist()
    return max((r["batch_id"] for r in rows), default=-1)


def test_the_lane_sigkilled_at_each_write_boundary_loses_and_repeats_nothing(bronze: Path, tmp_path: Path) -> None:
    lake = str(tmp_path / "lakehouse")
    shutil.copytree(bronze, lake)
    receiver = Receiver().start()
    try:
        rules = rules_file(tmp_path, receiver.url)
        for batch, point in KILLS:
            events_before = len(read_rows(ALERT_EVENTS, lake))
            killed = _validate(lake, rules, f"alert_lane:{batch}:{point}")
            assert killed.returncode == -9, (batch, point, killed.stderr[-3000:])
            events = read_rows(ALERT_EVENTS, lake).to_pylist()
            if point == "after_delivery":  # delivered, nothing of the batch recorded
                assert not [e for e in events if e["eval_batch_id"] == batch] and _recorded_batch(lake) < batch
            elif point == "after_events":  # its events, not its state
                assert _recorded_batch(lake) < batch
            elif point == "after_alerts":  # its events and gold.alerts, not its state
                assert _recorded_batch(lake) < batch
                assert {r["updated_batch_id"] for r in read_rows(ALERTS, lake).to_pylist()} == {batch}
            elif point == "after_state":   # recorded whole (Spark may have committed it: records follow the batches)
                assert _recorded_batch(lake) == batch
            else:                          # committed by Spark, not recorded
                assert (tmp_path / "lakehouse" / "_checkpoints" / "alert_lane" / "commits" / str(batch)).exists()
                assert _recorded_batch(lake) < batch
            assert len(events) >= events_before
        done = _validate(lake, rules, None)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "alert_lane: replayed batches 4..4" in done.stderr, done.stderr[-3000:]
    finally:
        receiver.stop()

    events = read_rows(ALERT_EVENTS, lake).to_pylist()
    got = sorted((e["rule"], e["fingerprint"], e["status"], int(e["ts"].timestamp() * 1000), e["value"])
                 for e in events)
    assert {t[0] for t in got if t[2] == "firing"} >= {"UnderMinIsr", "AtMinIsr", "UnderReplicated"}
    assert got == _engine_on_bronze(lake)   # each transition once
    assert len({e["event_id"] for e in events}) == len(events)
    assert max(e["eval_batch_id"] for e in events) >= KILLS[-1][0]
    routed = {f"{e['event_id']}@test" for e in events if e["status"] in ("firing", "resolved")
              and e["severity"] in ("critical", "warning")}
    ids: list[str] = [r["json"]["isrwatchDeliveryId"] for r in receiver.delivered()]
    assert set(ids) == routed                       # none lost, none under another id
    repeated = {i for i in ids if ids.count(i) > 1}
    assert repeated and all(int(i.split("@")[0].split("-")[1]) <= KILLS[-1][0] for i in repeated)
    current: list[dict[str, Any]] = read_rows(ALERTS, lake).to_pylist()
    assert current and {a["stage"] for a in current} == {"lane"}
    assert not [a for a in current if a["status"] == "firing" and a["rule"] in ("UnderMinIsr", "AtMinIsr")], \
        "the run ends healthy: every partition alert resolved"
