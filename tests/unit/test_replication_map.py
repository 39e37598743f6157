"""validate.replication: a keyspace replication map as CQL writes it, or a clear refusal."""

from __future__ import annotations

import pytest

from cassieq_spark import validate
from cassieq_spark.errors import ConfigError


@pytest.mark.parametrize(
    ("given", "replicas"),
    [
        ({"class": "SimpleStrategy", "replication_factor": 3}, {None: 3}),
        ('{"class": "SimpleStrategy", "replication_factor": "2"}', {None: 2}),
        ({"class": "NetworkTopologyStrategy", "datacenter1": 3}, {"datacenter1": 3}),
        (
            '{"class": "org.apache.cassandra.locator.NetworkTopologyStrategy", "eu-1": 3, "us.2": 1}',
            {"eu-1": 3, "us.2": 1},
        ),
    ],
)
def test_valid_maps(given, replicas):
    assert validate.replication(given) == replicas


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("{'class': 3}", r"replication must be a JSON object such as"),
        ("3", r"replication must be a map with a 'class' key, got 3"),
        ({"replication_factor": 3}, r"'class' must be SimpleStrategy or NetworkTopologyStrategy"),
        ({"class": "LocalStrategy"}, r"'class' must be SimpleStrategy or NetworkTopologyStrategy"),
        ({"class": "com.example.SimpleStrategy", "replication_factor": 1}, r"'class' must be"),
        ({"class": "SimpleStrategy"}, r"SimpleStrategy takes exactly one key"),
        ({"class": "SimpleStrategy", "replication_factor": 1, "dc1": 1}, r"exactly one key"),
        ({"class": "SimpleStrategy", "replication_factor": 0}, r"from 1 to 10, got 0"),
        ({"class": "SimpleStrategy", "replication_factor": True}, r"must be an integer"),
        ({"class": "NetworkTopologyStrategy"}, r"needs at least one data center"),
        (
            {"class": "NetworkTopologyStrategy", "dc1": 11},
            r"replicas in data center 'dc1' .* got 11",
        ),
        ({"class": "NetworkTopologyStrategy", "dc'1": 1}, r"data center name .* must be 1-100"),
        ({"class": "NetworkTopologyStrategy", "dc1": 2.5}, r"must be an integer"),
    ],
)
def test_invalid_maps_name_what_is_wrong(given, message):
    with pytest.raises(ConfigError, match=message):
        validate.replication(given)
