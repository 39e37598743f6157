"""What the consistency levels need from a keyspace's replication.

Data-center-local levels are only safe while a keyspace lives in one data center; these checks
run when a client connects and again once bootstrap has created the keyspace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import ConfigError
from .connection import ConnectionConfig


def replica_data_centers(
    replication: Mapping[str, object] | None, cluster_dcs: Iterable[str]
) -> set[str]:
    """The data centers holding replicas of a keyspace with ``replication`` (its CQL map)."""
    if not replication:
        return set(cluster_dcs)
    strategy = str(replication.get("class", ""))
    if strategy.endswith("NetworkTopologyStrategy"):
        out = set()
        for dc, rf in replication.items():
            if dc in ("class", "replication_factor"):
                continue
            try:
                if int(str(rf).split("/")[0]) > 0:  # "3/1": 3 replicas, 1 transient
                    out.add(dc)
            except ValueError:
                out.add(dc)
        return out
    # SimpleStrategy and others place replicas wherever the ring puts them.
    return set(cluster_dcs)


def check_replication(
    config: ConnectionConfig, replication: Mapping[str, object] | None, cluster_dcs: Iterable[str]
) -> None:
    """Refuse data-center-local levels for a keyspace replicated to several data centers.

    LOCAL_SERIAL runs Paxos among one data center's replicas: writers in two data centers both
    win ``IF next = ?`` (the same ids twice) and consumers in two both claim one message.
    LOCAL_QUORUM lets a reader in one data center see a block closed before its rows arrive
    from the other, and pass them. Single data center: LOCAL_* equal their global levels.
    """
    dcs = replica_data_centers(replication, cluster_dcs)
    if len(dcs) < 2:
        return
    local = [
        f"{name} {value}"
        for name, value in (
            ("serialConsistency", config.serial_consistency.upper()),
            ("consistency", config.consistency.upper()),
        )
        if value.startswith("LOCAL_")
    ]
    if local:
        raise ConfigError(
            f"keyspace {config.keyspace!r} replicates to data centers {', '.join(sorted(dcs))}: "
            f"{' and '.join(local)} would let each data center reserve the same ids and claim "
            "the same message; use serialConsistency=SERIAL and consistency=QUORUM (or "
            "EACH_QUORUM)"
        )


def check_cluster(config: ConnectionConfig, metadata) -> None:
    """:func:`check_replication` against a driver ``Metadata`` (no-op while the keyspace does
    not exist: bootstrap checks again once it is created)."""
    ks = metadata.keyspaces.get(config.keyspace)
    if ks is None:
        return
    strategy = ks.replication_strategy
    replication: dict[str, object] = {"class": type(strategy).__name__}
    factors = getattr(strategy, "dc_replication_factors", None)
    if factors is not None:
        replication.update(factors)
    cluster_dcs = {h.datacenter for h in metadata.all_hosts() if h.datacenter}
    check_replication(config, replication, cluster_dcs)
