"""Settings the protocol review found unsafe (F6, F7, F8): refused with an error naming the
rule. Pure rules, no Cassandra."""

from __future__ import annotations

import pytest

from cassieq_spark.config import (
    MAX_DELAY_SECONDS,
    MAX_VISIBILITY_SECONDS,
    ConnectionConfig,
    check_replication,
    connection_from_options,
    delay_seconds,
    replica_data_centers,
    visibility_seconds,
)
from cassieq_spark.engine.core.queues import validate_settings
from cassieq_spark.errors import ConfigError

NTS = "org.apache.cassandra.locator.NetworkTopologyStrategy"


@pytest.mark.parametrize("level", ["ONE", "TWO", "THREE", "LOCAL_ONE", "ANY", "one"])
def test_consistency_below_quorum_is_refused(level):
    """Old code (verified): ONE, TWO, THREE and LOCAL_ONE were accepted for every read and
    write, and every "closed block => its rows are visible" argument needs R + W > RF."""
    with pytest.raises(ConfigError, match=f"(?i)consistency '{level}' is below a quorum"):
        connection_from_options({"consistency": level})
    with pytest.raises(ConfigError, match="below a quorum"):
        ConnectionConfig(consistency=level)


@pytest.mark.parametrize("level", ["LOCAL_QUORUM", "QUORUM", "EACH_QUORUM", "ALL", "quorum"])
def test_quorum_levels_are_accepted(level):
    assert ConnectionConfig(consistency=level).consistency == level


def test_limits_are_named():
    """Old code (verified): no upper bound at all."""
    assert delay_seconds(MAX_DELAY_SECONDS) == MAX_DELAY_SECONDS
    with pytest.raises(ConfigError, match=r"delay must be at most 43200 seconds \(12 hours\)"):
        delay_seconds(MAX_DELAY_SECONDS + 1)
    with pytest.raises(ConfigError, match="visibility timeout must be at most"):
        visibility_seconds(MAX_VISIBILITY_SECONDS + 0.5)
    with pytest.raises(ConfigError, match="must be > 0"):
        visibility_seconds(0)
    assert visibility_seconds(0, "timeout", zero=True) == 0
    base = dict(
        bucket_size=10,
        max_delivery_count=1,
        visibility_timeout=30,
        repair_timeout=15,
        dead_letter_queue=None,
        message_ttl=None,
        max_payload_bytes=100,
        name="q",
    )
    with pytest.raises(ConfigError, match="visibility timeout must be at most"):
        validate_settings(**{**base, "visibility_timeout": 13 * 3600})
    with pytest.raises(ConfigError, match="repair timeout must be at most"):
        validate_settings(**{**base, "repair_timeout": 25 * 3600})
    with pytest.raises(ConfigError, match="message TTL must be a whole number"):
        validate_settings(**{**base, "message_ttl": 21 * 365 * 86400})


def test_replica_data_centers():
    assert replica_data_centers({"class": NTS, "dc1": "3", "dc2": "0"}, ["dc1", "dc2"]) == {"dc1"}
    assert replica_data_centers({"class": NTS, "dc1": "3", "dc2": "2/1"}, []) == {"dc1", "dc2"}
    simple = {"class": "org.apache.cassandra.locator.SimpleStrategy", "replication_factor": "3"}
    assert replica_data_centers(simple, ["a", "b"]) == {"a", "b"}


def test_local_levels_are_refused_across_data_centers():
    """Old code (verified): nothing looked at the keyspace's replication."""
    two = {"class": NTS, "dc1": "1", "dc2": "1"}
    with pytest.raises(
        ConfigError, match="serialConsistency LOCAL_SERIAL and consistency LOCAL_QUORUM"
    ):
        check_replication(ConnectionConfig(), two, ["dc1", "dc2"])
    with pytest.raises(ConfigError, match="serialConsistency LOCAL_SERIAL would"):
        check_replication(ConnectionConfig(consistency="QUORUM"), two, ["dc1", "dc2"])
    check_replication(ConnectionConfig(consistency="QUORUM", serial_consistency="SERIAL"), two, [])
    # One data center: LOCAL_* are the global levels.
    check_replication(ConnectionConfig(), {"class": NTS, "dc1": "3"}, ["dc1", "dc2"])
    check_replication(ConnectionConfig(), None, ["dc1"])
