"""Replica placement after Kafka's StripedReplicaPlacer: spread across racks first, then brokers.

For each partition the placer walks the racks round-robin from a start that advances per partition
(randomised once from the seed), taking the next broker of each rack in turn, so consecutive
partitions get different leaders and each partition's replicas land on distinct racks while racks
last. RF larger than the number of usable brokers is INVALID_REPLICATION_FACTOR.
"""

from __future__ import annotations

from random import Random

from broker_emulator.errors import InvalidReplicationFactor


def place_replicas(
    brokers: list[tuple[int, str | None]], partitions: int, replication_factor: int, rng: Random
) -> list[tuple[int, ...]]:
    """Assign `replication_factor` distinct brokers to each partition; brokers are (id, rack)."""
    if replication_factor <= 0:
        raise InvalidReplicationFactor(f"INVALID_REPLICATION_FACTOR: replication factor must be larger than 0, "
                                       f"got {replication_factor}")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"INVALID_REPLICATION_FACTOR: the target replication factor of {replication_factor} cannot be reached "
            f"because only {len(brokers)} broker(s) are registered")
    racks: dict[str, list[int]] = {}
    for broker_id, rack in sorted(brokers):
        racks.setdefault(rack if rack is not None else f"__broker_{broker_id}", []).append(broker_id)
    rack_names = sorted(racks)
    for members in racks.values():
        rng.shuffle(members)
    rack_offset = rng.randrange(len(rack_names))
    cursors = {r: rng.randrange(len(racks[r])) for r in rack_names}
    out: list[tuple[int, ...]] = []
    for _ in range(partitions):
        chosen: list[int] = []
        rack_index = rack_offset
        # Racks first (one replica per rack per pass), then brokers within racks on later passes.
        while len(chosen) < replication_factor:
            rack = rack_names[rack_index % len(rack_names)]
            members = racks[rack]
            for _attempt in range(len(members)):
                b = members[cursors[rack] % len(members)]
                cursors[rack] += 1
                if b not in chosen:
                    chosen.append(b)
                    break
            rack_index += 1
        out.append(tuple(chosen))
        rack_offset += 1
    return out
