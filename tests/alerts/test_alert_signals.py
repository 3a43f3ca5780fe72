"""broker_metrics shaped wide (pipelines/alert_signals.py) as a pivot of the rows would shape them: each metric's last
known value and each meter's last count per (run, ts, broker), sorted, with error-coded meters, metrics no rule
knows, repeated and missing values, and a broker none of whose values is known."""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipelines.alert_samples import grouped_sum_max
from pipelines.alert_signals import BROKER_METRIC_COLUMNS, shape_broker_metrics, shape_cluster_events
from schemas.bronze import ElectionKind, EventType
from schemas.kafka_metrics import BROKER_METERS, CONTROLLER_METERS, MBEANS

METERS = {*BROKER_METERS, *CONTROLLER_METERS}


def by_pivot(rows: pd.DataFrame) -> pd.DataFrame:
    """The shaping written the plain way: two pivot tables of the last value, joined."""
    error = rows["mbean"].str.extract(r"error=([A-Z_]+)", expand=False)
    keyed = rows.assign(metric=rows["name"].where(error.isna(), rows["name"] + "_" + error.fillna("")))
    index = ["run_id", "ts", "broker_id"]
    values = keyed.pivot_table(index=index, columns="metric", values="value", aggfunc="last")
    counts = keyed[keyed["kind"] == "meter"].pivot_table(index=index, columns="metric", values="count",
                                                         aggfunc="last")
    counts.columns = [f"{c}_count" for c in counts.columns]
    wide = values.join(counts, how="left").reindex(columns=list(BROKER_METRIC_COLUMNS))
    wide.columns.name = None
    return wide.reset_index()


def random_rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    keys = [*MBEANS, "SomethingNoRuleReads"]
    picked = [keys[i] for i in rng.integers(0, len(keys), n)]
    names = [k.split(":")[0] for k in picked]
    value = rng.integers(0, 5, n).astype("float64")
    value[rng.random(n) < 0.15] = np.nan
    count = rng.integers(0, 1000, n).astype("float64")
    count[rng.random(n) < 0.15] = np.nan
    rows = pd.DataFrame({
        "run_id": rng.choice(["c2", "c1"], n), "ts": pd.Timestamp("2026-01-01", tz="UTC").as_unit("us")
        + pd.to_timedelta(rng.integers(0, 4, n) * 1000, unit="ms"), "broker_id": rng.choice([3, 1, 2, 3000], n),
        "mbean": [MBEANS.get(k, "kafka.server:type=X,name=" + k) for k in picked], "name": names,
        "kind": ["meter" if m in METERS else "gauge" for m in names], "value": value, "count": count})
    # One (run, ts, broker) whose values are all unknown: no row, as the pivot drops it.
    lost = {"run_id": "c9", "ts": rows["ts"].iloc[0], "broker_id": 7, "mbean": MBEANS["IsrShrinksPerSec"],
            "name": "IsrShrinksPerSec", "kind": "meter", "value": np.nan, "count": 4.0}
    return pd.concat([rows, pd.DataFrame([lost])], ignore_index=True)


def test_the_wide_frame_equals_the_pivot_of_the_rows() -> None:
    for seed in range(5):
        rows = random_rows(300, seed)
        shaped = shape_broker_metrics(rows)
        pd.testing.assert_frame_equal(shaped, by_pivot(rows))
        assert rows.duplicated(["run_id", "ts", "broker_id", "mbean"]).any()  # cells given twice: the last wins
        assert "c9" not in set(shaped["run_id"])
        assert shaped[["run_id", "ts", "broker_id"]].duplicated().sum() == 0


def test_an_election_of_the_last_known_leader_counts_as_unclean_as_kafka_counts_it() -> None:
    """PartitionChangeBuilder elects the last known leader (ELR on, ISR and ELR empty) with `unclean` set, so
    UncleanLeaderElectionsPerSec counts it: the event column, the ground truth and the pages count the same set."""
    kinds = [ElectionKind.CLEAN, ElectionKind.ELR, ElectionKind.LAST_KNOWN_LEADER, ElectionKind.UNCLEAN,
             ElectionKind.OFFLINE]
    ts = pd.Timestamp("2026-11-29T00:00:00Z")
    rows = pd.DataFrame({"run_id": "r", "ts": ts, "topic": "t", "partition": range(len(kinds)),
                         "event_type": EventType.ELECTION, "cause": [str(k) for k in kinds], "records": np.nan})
    got = shape_cluster_events(rows).set_index("partition")
    assert list(got["elections"]) == [1, 1, 1, 1, 1]
    assert list(got["unclean_elections"]) == [0, 0, 1, 1, 0]


def test_grouped_sum_max_gives_what_a_pandas_groupby_gives_with_missing_keys_and_values() -> None:
    """pipelines/alert_samples.py `grouped_sum_max` against `groupby(keys, sort=True)` written the plain way: a row with
    a missing key left out, missing values skipped (a group with none sums to 0, its max NaN), keys sorted with their
    dtypes (a zone too), integer sums and maxima kept integers."""
    rng = np.random.default_rng(7)
    n = 400
    ts = pd.Series(pd.to_datetime(rng.integers(0, 5, n) * 1_000, unit="ms", utc=True))
    ts[rng.random(n) < 0.05] = pd.NaT
    frame = pd.DataFrame({
        "run_id": pd.Series(rng.choice(["b-run", "a-run", None], n, p=[0.45, 0.45, 0.1]), dtype=object),
        "ts": ts,
        "topic": rng.choice(["t2", "t10", "t1"], n),
        "partition": np.where(rng.random(n) < 0.05, np.nan, rng.integers(0, 4, n)),
        "sent": rng.integers(0, 100, n),
        "lost": np.where(rng.random(n) < 0.5, np.nan, rng.integers(0, 10, n).astype(float)),
        "waited": rng.integers(-5, 500, n),
        "isr": np.where(rng.random(n) < 0.7, np.nan, rng.integers(1, 4, n).astype(float)),
    })
    keys = ["run_id", "ts", "topic", "partition"]
    mine = grouped_sum_max(frame, keys, {c: frame[c].to_numpy() for c in ("sent", "lost")},
                           {c: frame[c].to_numpy() for c in ("waited", "isr")})
    grouped = frame.groupby(keys, sort=True)
    plain = pd.concat([grouped[["sent", "lost"]].sum(), grouped[["waited", "isr"]].max()], axis=1).reset_index()
    pd.testing.assert_frame_equal(mine, plain)
    assert mine["sent"].dtype == np.int64 and mine["waited"].dtype == np.int64 and str(mine["ts"].dt.tz) == "UTC"
    assert 0 < len(mine) < n and mine["isr"].isna().any() and (mine["lost"] == 0).any()
