"""Topic durability posture: what each topic's replication settings can survive, and how likely a loss is.

The seed's RF / min.insync.replicas table is the rubric. With M clamped to min(M, RF) (the broker's
effectiveMinIsr cap), a topic keeps accepting acks=all writes through the loss of RF − M replicas
(availability headroom) and holds a committed record as long as one of its copies survives (redundancy
bound RF − 1). Its five rows (1/1, 2/2, 2/1, 3/2, 5/3) carry the seed's verdicts; every other combination
gets the verdict of its class (no durability, durable but not available, single-copy acks, durable and
available).

The loss probability P(all copies lost) = p^RF holds only if the RF copies fail independently. Replicas
sharing a rack share its power and network, so the exponent is the number of distinct failure domains,
not RF: three copies in one rack are about as safe as one against that rack failing. A replica's domain
is its broker.rack; a broker without a rack counts as its own domain, because without rack information
isrwatch cannot see the correlation (racks_configured says when that is the case). Both probabilities
are reported, so the gap between them is the durability the placement gives away.

Pure pandas: the caller reads silver.topic_configs, keeps the latest row per partition (latest_configs)
and passes the cluster sizes.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

CONFIG_COLUMNS = (
    "run_id", "topic", "partition", "replication_factor", "min_insync_replicas", "effective_min_isr",
    "unclean_leader_election_enable", "elr_enabled", "replicas", "replica_racks",
)
PARTITION_KEYS = ("run_id", "topic", "partition")

# (RF, effective M) -> the seed table's verdict.
SEED_VERDICTS: dict[tuple[int, int], str] = {
    (1, 1): "No durability. Dev only.",
    (2, 2): "Durable but not available, one slow follower halts the topic.",
    (2, 1): "Available but a single-copy ack can be lost on leader failure.",
    (3, 2): "The standard. Durable AND available under one failure.",
    (5, 3): "Higher tolerance for critical/financial data; meaningfully pricier.",
}

# name -> (severity, explanation for operators); the order is the order of the finding_ columns.
FINDINGS: dict[str, tuple[str, str]] = {
    "min_isr_above_rf": ("warning", "min.insync.replicas is above the replication factor: the broker silently "
                         "caps it at RF, so losing any replica stops acks=all writes."),
    "min_isr_one": ("warning", "Effective min.insync.replicas is 1: acks=all can acknowledge a record held by "
                    "one copy, lost if that leader fails."),
    "rf_below_3": ("warning", "Replication factor below 3: no min.insync.replicas is both durable and available "
                   "under one broker failure."),
    "rf2_trap": ("warning", "RF=2: min.insync.replicas=2 halts writes on any single loss, =1 reopens single-copy "
                 "acks; RF=3 is the smallest RF that escapes this."),
    "unclean_enabled": ("warning", "unclean.leader.election.enable is on: an out-of-sync replica can become "
                        "leader and truncate acknowledged records."),
    "shared_failure_domain": ("warning", "Some partitions keep several replicas in one rack: one rack failure "
                              "takes several copies, so p^RF overstates durability."),
    "rf_equals_brokers": ("info", "Replication factor equals the broker count: after a broker loss there is no "
                          "spare broker to re-replicate onto."),
}

POSTURE_COLUMNS: tuple[str, ...] = (
    "run_id", "topic", "partitions", "replication_factor", "configured_min_isr", "effective_min_isr",
    "unclean_leader_election_enable", "elr_enabled", "brokers", "racks_configured", "failure_domains",
    "partitions_sharing_domain", "availability_headroom", "zero_loss_tolerance", "redundancy_bound",
    "p_all_copies_lost", "p_all_copies_lost_if_independent", "verdict", "verdict_row", "verdict_class",
    *(f"finding_{name}" for name in FINDINGS), "findings", "finding_count",
)


def _require(frame: pd.DataFrame, argument: str, columns: Iterable[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{argument} is missing required column(s): {', '.join(missing)}")


def latest_configs(rows: pd.DataFrame) -> pd.DataFrame:
    """The latest row by `ts` per (run_id, topic, partition); on equal `ts` the later input row wins."""
    _require(rows, "rows", (*PARTITION_KEYS, "ts"))
    ordered = rows.sort_values([*PARTITION_KEYS, "ts"], kind="stable")
    return ordered.drop_duplicates(list(PARTITION_KEYS), keep="last").reset_index(drop=True)


def failure_domains(replicas: Iterable[int], racks: Iterable[str]) -> int:
    """Distinct failure domains holding a partition's replicas: its rack, or the broker itself when rackless."""
    brokers, rack_names = list(replicas), list(racks)
    if len(brokers) != len(rack_names):
        raise ValueError(f"replica_racks has {len(rack_names)} entries for {len(brokers)} replicas")
    return len({("rack", r) if r else ("broker", int(b)) for b, r in zip(brokers, rack_names, strict=True)})


def verdict(rf: int, min_isr: int) -> tuple[str, str | None, str]:
    """(verdict, seed table row or None, verdict class) for RF and configured M (clamped to RF here)."""
    m = min(min_isr, rf)
    if rf == 1:
        cls, text = "no-durability", SEED_VERDICTS[(1, 1)]
    elif m == rf:
        cls, text = "durable-not-available", "Durable but not available: losing any one replica stops acks=all writes."
    elif m == 1:
        cls, text = "single-copy-acks", SEED_VERDICTS[(2, 1)]
    else:
        cls, text = "durable-and-available", f"Durable and available under {rf - m} failure(s)."
    if (rf, m) in SEED_VERDICTS:
        return SEED_VERDICTS[(rf, m)], f"RF={rf}/M={m}", cls
    return text, None, cls


def topic_posture(configs: pd.DataFrame, brokers: dict[str, int], failure_probability: float) -> pd.DataFrame:
    """One row per (run_id, topic): headroom, loss probabilities, verdict and findings (see POSTURE_COLUMNS).

    `configs` holds the latest silver.topic_configs row per partition; `brokers` maps a cluster (run_id)
    to its broker count (a missing cluster has unknown brokers); `failure_probability` is the per-broker
    loss probability p in the chosen window, in (0, 1).
    """
    if not 0 < failure_probability < 1:
        raise ValueError(f"failure_probability must be in (0, 1), got {failure_probability!r}")
    _require(configs, "configs", CONFIG_COLUMNS)
    if configs.empty:
        return pd.DataFrame({c: pd.Series(dtype="object") for c in POSTURE_COLUMNS})

    replicas = [[] if v is None else list(v) for v in configs["replicas"]]
    racks = [[] if v is None else list(v) for v in configs["replica_racks"]]
    domains = [failure_domains(r, k) for r, k in zip(replicas, racks, strict=True)]
    part = configs[list(CONFIG_COLUMNS[:-2])].assign(
        failure_domains=domains,
        racks_configured=[all(bool(r) for r in k) for k in racks],
        sharing=np.asarray(domains) < configs["replication_factor"].to_numpy(),
    )
    t = part.groupby(["run_id", "topic"], sort=True).agg(
        partitions=("partition", "size"),
        replication_factor=("replication_factor", "min"),
        configured_min_isr=("min_insync_replicas", "max"),
        unclean_leader_election_enable=("unclean_leader_election_enable", "any"),
        elr_enabled=("elr_enabled", "any"),
        racks_configured=("racks_configured", "all"),
        failure_domains=("failure_domains", "min"),
        partitions_sharing_domain=("sharing", "sum"),
    ).reset_index()
    ints = ["partitions", "replication_factor", "configured_min_isr", "failure_domains", "partitions_sharing_domain"]
    t[ints] = t[ints].astype("int64")
    rf, m = t["replication_factor"], t["configured_min_isr"]
    m_eff = np.minimum(m, rf)
    t["effective_min_isr"] = m_eff
    t["brokers"] = pd.array([brokers.get(r) for r in t["run_id"]], dtype="Int64")
    t["availability_headroom"] = np.maximum(rf - m_eff, 0)
    # An acks=all record is acknowledged once the ISR holds it, and the ISR may be as small as M: it
    # survives M - 1 failures. This matches every cell of the seed's "zero acked loss" column; the
    # min(RF - 1, RF - M) shorthand next to it gives 1 for RF=2/M=1, which is the single-copy-ack trap.
    t["zero_loss_tolerance"] = np.maximum(m_eff - 1, 0)
    t["redundancy_bound"] = rf - 1
    t["p_all_copies_lost"] = failure_probability ** t["failure_domains"].astype("float64")
    t["p_all_copies_lost_if_independent"] = failure_probability ** rf.astype("float64")
    verdicts = [verdict(int(r), int(x)) for r, x in zip(rf, m, strict=True)]
    t["verdict"] = [v[0] for v in verdicts]
    t["verdict_row"] = pd.Series([v[1] for v in verdicts], index=t.index, dtype="object")
    t["verdict_class"] = [v[2] for v in verdicts]

    t["finding_min_isr_above_rf"] = m > rf
    t["finding_min_isr_one"] = m_eff == 1
    t["finding_rf_below_3"] = rf < 3
    t["finding_rf2_trap"] = rf == 2
    t["finding_unclean_enabled"] = t["unclean_leader_election_enable"].astype(bool)
    t["finding_shared_failure_domain"] = t["partitions_sharing_domain"] > 0
    t["finding_rf_equals_brokers"] = (t["brokers"] == rf).fillna(False).astype(bool)
    flags = t[[f"finding_{name}" for name in FINDINGS]].to_numpy()
    t["findings"] = [[name for name, on in zip(FINDINGS, row, strict=True) if on] for row in flags]
    t["finding_count"] = flags.sum(axis=1).astype("int64")
    return t[list(POSTURE_COLUMNS)]
