"""The `broker_reports` source of the alert rules: how long each broker has been silent, computed by the engine from
broker_metrics arrivals, the brokers holding replicas and the controlled shutdowns (pipelines/alert_signals.py), with
what it remembers between batches in `EngineState` (`last_seen`, `shut_down`, `back_from_shutdown`)."""

from __future__ import annotations

import pandas as pd

from pipelines.alert_samples import to_ms
from pipelines.alert_state import EngineState

# A broker restarting after a controlled shutdown: from the shutdown until it is back (unfenced) and this long after,
# the time its replicas take to catch up and rejoin their ISRs; a broker not back after the second is no restart.
RESTART_SETTLES_MS = 60_000
RESTART_LONGEST_MS = 600_000


def broker_reports(state: EngineState, metrics: pd.DataFrame | None, replica_brokers: pd.DataFrame | None,
                   stops: pd.DataFrame | None, clocks: dict[str, int]) -> pd.DataFrame:
    """For each time a cluster reported metrics, how long since each known broker last did, and whether it is
    down after a controlled shutdown. A broker holding replicas that never reported is known from the first time
    it was seen (its silence counts from there); a cluster whose batch holds no metrics at all is looked at its
    latest time, so metrics that stop altogether are not silence. A controlled shutdown lasts until the broker
    is back (unfenced; its silence then counts from its return): it answers, and reports, for a few seconds after
    Kafka begins it. `restarting`: from the shutdown until RESTART_SETTLES_MS after the broker is back, for at most
    RESTART_LONGEST_MS before it is."""
    rows = []

    def by_cluster(frame: pd.DataFrame | None) -> dict[str, pd.DataFrame]:
        return {str(c): g for c, g in frame.groupby("run_id", sort=True)} if frame is not None else {}

    reports_of, first_seen, stops_of = by_cluster(metrics), by_cluster(replica_brokers), by_cluster(stops)
    for cluster in sorted(set(reports_of) | set(first_seen) | set(stops_of)):
        seen = {int(k.split("/", 1)[1]): v for k, v in state.last_seen.items()
                if k.split("/", 1)[0] == cluster}
        down = {int(k.split("/", 1)[1]): v for k, v in state.shut_down.items()
                if k.split("/", 1)[0] == cluster}
        back = {int(k.split("/", 1)[1]): v for k, v in state.back_from_shutdown.items()
                if k.split("/", 1)[0] == cluster}
        if cluster in first_seen:
            known = first_seen[cluster]
            for b, ts in zip(known["broker_id"], known["ts"], strict=True):
                seen.setdefault(int(b), to_ms(ts))
        group = reports_of.get(cluster)
        reports = [] if group is None else sorted(
            {(to_ms(ts), int(b)) for ts, b in zip(group["ts"], group["broker_id"], strict=True)})
        changes = [] if cluster not in stops_of else sorted(
            (to_ms(ts), int(b), bool(stopped)) for ts, b, stopped in
            zip(stops_of[cluster]["ts"], stops_of[cluster]["broker_id"], stops_of[cluster]["stopped"], strict=True))
        times = sorted({t for t, _ in reports}) or ([clocks[cluster]] if cluster in clocks else [])

        i = j = 0
        for t in times:
            while j < len(changes) and changes[j][0] <= t:
                apply_stop(down, seen, back, *changes[j])
                j += 1
            while i < len(reports) and reports[i][0] <= t:
                at, b = reports[i]
                seen[b] = max(seen.get(b, 0), at)
                i += 1
            rows += [{"run_id": cluster, "ts": pd.Timestamp(t, unit="ms", tz="UTC"), "broker_id": b,
                      "seconds_since_report": max(t - last, 0) / 1000, "shut_down_cleanly": b in down,
                      "restarting": (b in down and t - down[b] < RESTART_LONGEST_MS)
                      or (b in back and t - back[b] < RESTART_SETTLES_MS)}
                     for b, last in sorted(seen.items())]
        for change in changes[j:]:   # after the batch's last evaluation: kept for the next
            apply_stop(down, seen, back, *change)
        for b, last in seen.items():
            state.last_seen[f"{cluster}/{b}"] = last
        latest = max([*times, *(c[0] for c in changes)], default=0)
        for kept in (state.shut_down, state.back_from_shutdown):
            for key in [k for k in kept if k.split("/", 1)[0] == cluster]:
                del kept[key]
        state.shut_down.update({f"{cluster}/{b}": at for b, at in down.items()})
        state.back_from_shutdown.update({f"{cluster}/{b}": at for b, at in back.items()
                                         if latest - at < RESTART_SETTLES_MS})
    return pd.DataFrame(rows, columns=["run_id", "ts", "broker_id", "seconds_since_report", "shut_down_cleanly",
                                       "restarting"])

def apply_stop(down: dict[int, int], seen: dict[int, int], back: dict[int, int], at: int, broker: int,
               stopped: bool) -> None:
    """A broker stopped with a controlled shutdown at `at` (`down`), or back (unfenced). Back from such a shutdown,
    its silence counts from its return, as a new broker's does: its exporter may need a few seconds after the JVM
    starts (Strimzi's rules: a first scrape of ~4 s), and a rolling restart pages nobody."""
    if stopped:
        down.setdefault(broker, at)
        back.pop(broker, None)
    elif down.pop(broker, None) is not None:
        seen[broker] = max(seen.get(broker, 0), at)
        back[broker] = at
